"""Agent-opened op windows against a real daemon: signed, bounded, abandoned, verified.

The tests call over the daemon's Unix socket with the daemon's own uid, so they
are an operator whose name is their user name, and the daemon sees their pid.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jb_client.api import Client
from jb_client.errors import ClientError

from jouled.auth import PeerRules
from jouled.errors import Kind

from .conftest import Daemon, start_daemon

ME = PeerRules((), own_uid_operator=True).identify(os.getuid(), os.getgid())
assert ME is not None
AGENT = ME.name
BURN = "x = 0\nfor i in range(300_000):\n    x += i\n"


@pytest.fixture(scope="module")
def opd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(
        tmp_path_factory.mktemp("ops") / "data",
        "--op-windows-per-agent",
        "3",
        "--op-windows-max",
        "8",
    )
    yield d
    assert d.stop() == 0, d.log.read_text()


def client(d: Daemon) -> Client:
    return Client(d.target, env={**os.environ, **d.extra_env})


def ops_in_export(d: Daemon, tmp: Path) -> list[dict[str, Any]]:
    out = tmp / "export.jsonl"
    d.client_json("export", "--out", str(out))
    docs = [
        json.loads(base64.b64decode(json.loads(line)["payload"]))
        for line in out.read_text().splitlines()
        if line.strip()
    ]
    return [doc for doc in docs if doc["kind"] == "op"]


def test_meter_run_signs_an_op_entry_that_verifies_offline(opd: Daemon, tmp_path: Path) -> None:
    code = "import sys\nprint('from the command')\n" + BURN + "sys.exit(3)\n"
    done = opd.client(
        "meter-run",
        "--label",
        "tool:build",
        "--task",
        "smoke/lrucache",
        "--run-id",
        "mr1",
        "--json",
        "--",
        sys.executable,
        "-c",
        code,
    )
    # The command's own status and output come through; the receipt follows its output.
    assert done.returncode == 3, done.stderr
    first, _, rest = done.stdout.partition("\n")
    assert first == "from the command"
    receipt = json.loads(rest)
    assert receipt["label"] == "tool:build"
    assert receipt["agent"] == AGENT
    assert receipt["task_id"] == "smoke/lrucache" and receipt["run_id"] == "mr1"
    assert receipt["abandoned"] is False and receipt["end"] == "closed"
    e = receipt["energy"]
    assert e["attribution"] == "whole-host"  # the exclusive policy's lock was free
    assert e["source"] == "estimator" and e["valid"] is True
    assert e["gross_mj"] >= e["marginal_mj"] >= 0

    out = tmp_path / "ledger.jsonl"
    assert opd.client("export", "--out", str(out)).returncode == 0
    report = opd.client_json("verify", str(out), "--pubkey", str(opd.pubkey))
    assert report["kinds"]["op"] >= 1, report
    (line,) = [ln for ln in out.read_text().splitlines() if json.loads(ln)["seq"] == receipt["seq"]]
    signed = json.loads(base64.b64decode(json.loads(line)["payload"]))
    assert signed["kind"] == "op" and signed["body"]["window_id"] == receipt["window_id"]
    assert signed["body"]["energy"] == e


def test_meter_run_without_json_reports_on_stderr(opd: Daemon) -> None:
    done = opd.client("meter-run", "--label", "noop", "--", sys.executable, "-c", "pass")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "op noop:" in done.stderr and "whole-host" in done.stderr


def test_the_context_manager_and_the_frontier_column(opd: Daemon) -> None:
    with client(opd) as c:
        with c.op("inference", task_id="smoke/lrucache", run_id="cm1", rollout=2) as w:
            assert w.attribution == "whole-host"
            # A graded phase could not run while this window holds the host: refused, not hung.
            with pytest.raises(ClientError) as refused:
                c.submit("smoke/lrucache", b"", run_id="cm1", rollout=2)
            assert refused.value.kind == Kind.FAILED_PRECONDITION
            assert w.id in refused.value.message
            exec(BURN)
        op = w.receipt
        assert op is not None and op["window_id"] == w.id and op["rollout"] == 2
        assert w.close() is op  # closing again returns the same receipt

        before = {r["solver"]: r for r in c.frontier("smoke")["rows"]}.get(AGENT)
        c.submit("smoke/lrucache", b"", run_id="cm1", rollout=2)
        rows = {r["solver"]: r for r in c.frontier("smoke")["rows"]}
    row = rows[AGENT]
    grown = row["op_windows"] - (before["op_windows"] if before else 0)
    assert grown == 1
    assert row["op_joules"] >= op["energy"]["marginal_mj"] / 1000
    # Beside, never inside, the daemon-measured grade energy.
    attempts_mj = row["joules_total"] * 1000
    assert attempts_mj < op["energy"]["gross_mj"] + attempts_mj


def test_a_second_window_while_the_host_is_held_is_charged_by_cpu_share(opd: Daemon) -> None:
    with client(opd) as c, c.op("episode") as outer, c.op("inference") as inner:
        assert outer.attribution == "whole-host"
        assert inner.attribution == "cpu-share"  # the daemon sees this process's tree
        exec(BURN)
    assert inner.receipt is not None and outer.receipt is not None
    e = inner.receipt["energy"]
    assert e["attribution"] == "cpu-share"
    assert e["gross_mj"] is not None and e["gross_mj"] >= 0


def refusal(call: Any) -> ClientError:
    with pytest.raises(ClientError) as err:
        call()
    return err.value


def test_bounds(opd: Daemon) -> None:
    with client(opd) as c:
        for label in ("", "two words", "x" * 200, "-dash", "new\nline"):
            err = refusal(lambda label=label: c.open_window(label))  # type: ignore[misc]
            assert err.kind == Kind.INVALID_ARGUMENT, label
        err = refusal(lambda: c.open_window("ok", task_id="smoke/nope"))
        assert err.kind == Kind.NOT_FOUND
        assert refusal(lambda: c._close_window("0123abcd")).kind == Kind.NOT_FOUND
        assert refusal(lambda: c.open_window("ok", pid=2**31 - 1)).kind == Kind.NOT_FOUND
        windows = [c.open_window(f"w{i}") for i in range(3)]
        err = refusal(lambda: c.open_window("w3"))
        assert err.kind == Kind.RESOURCE_EXHAUSTED and "per agent" in err.message
        for w in windows:
            w.close()
        # A process of the caller's own uid may be named as the tree to charge.
        with c.op("child", pid=os.getpid()) as w:
            pass
        assert w.receipt is not None


def test_a_window_past_its_maximum_is_signed_abandoned(tmp_path: Path) -> None:
    d = start_daemon(tmp_path / "data", "--op-window-max-s", "1")
    try:
        with client(d) as c:
            w = c.open_window("forgotten")
            assert w.max_s == 1
            receipt = w.wait()  # the daemon ends it; no sleeping here
            assert receipt["abandoned"] is True and receipt["end"] == "deadline"
            assert w.close() is receipt
            # The daemon gave the host back: the next window holds it again.
            with c.op("next") as nxt:
                assert nxt.attribution == "whole-host"
        (op,) = [o for o in ops_in_export(d, tmp_path) if o["body"]["label"] == "forgotten"]
        assert op["body"]["abandoned"] is True
    finally:
        assert d.stop() == 0, d.log.read_text()


OPENER = """
import sys
from jb_client.api import Client
c = Client(sys.argv[1])
w = c.open_window("killed")
print(w.id, flush=True)
sys.stdin.read()
"""


def test_a_window_whose_caller_dies_is_signed_abandoned(opd: Daemon, tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", OPENER, opd.target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        window_id = proc.stdout.readline().strip()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert window_id, "the opener printed no window id"
    deadline = time.monotonic() + 60
    while True:  # the daemon signs it once it sees the connection gone
        found = [o for o in ops_in_export(opd, tmp_path) if o["body"]["window_id"] == window_id]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert found, opd.log.read_text()
    body = found[0]["body"]
    assert body["abandoned"] is True and body["end"] == "disconnect"


def test_windows_open_at_shutdown_are_signed_before_the_daemon_stops(tmp_path: Path) -> None:
    d = start_daemon(tmp_path / "data")
    with client(d) as c:
        w = c.open_window("interrupted")
        d.proc.send_signal(signal.SIGTERM)
        receipt = w.wait()
    assert receipt["abandoned"] is True and receipt["end"] == "shutdown"
    assert d.proc.wait(timeout=60) == 0, d.log.read_text()
