"""Attacks on what one agent may see: hidden tests, other agents' results, other agents' keys.

One real daemon on its Unix socket with a tokens file: `alice` and `bob` are
agents and `audit` an auditor (tokens sent on the socket); the tests' own uid
is the operator. Its tasks: smoke/slidingwindow (graded with a hidden test
file), vis/lrucache (no hidden tests) and gate/hold (a run the test holds and
releases). Every attack is read twice: through a privileged view, which shows
that it ran and what it would have carried (the hidden tests' names, what its
payload printed), and through the attacker's own, which must carry none of it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jb_client.api import Client
from jb_client.documents import Receipt
from jb_client.errors import ClientError

from jouled.auth import add_token
from jouled.errors import Kind

from . import attacks as A
from . import gate
from .conftest import TASKS, Daemon, start_daemon

SLIDING = "smoke/slidingwindow"
LRU = "vis/lrucache"
HIDDEN = "tests/test_hidden_windows.py"
VISIBLE = "tests/test_windows.py"
SLIDING_DIR = TASKS / "smoke" / "slidingwindow"
# A copy of it whose task.toml lists its expected ids, hidden ones among them.
LISTED = "listed/slidingwindow"
LISTED_F2P = [
    f"{VISIBLE}::test_window_as_long_as_input",
    "tests/test_hidden_windows.py::test_moving_average_covers_the_last_window",
]


def _test_names(path: Path) -> set[str]:
    return set(re.findall(r"^def (test_\w+)", path.read_text(), re.MULTILINE))


# What an agent must never receive: the hidden file's name and the names of its tests.
SECRETS = sorted(
    {"test_hidden", "hidden_windows"}
    | (_test_names(SLIDING_DIR / "before" / HIDDEN) - _test_names(SLIDING_DIR / "before" / VISIBLE))
)


@dataclass
class World:
    root: Path
    tokens: dict[str, str]
    daemon: Daemon
    args: tuple[str, ...] = field(default=())

    def client(self, who: str | None = None) -> Client:
        """A client as `who` (a token's name), or as the operator (the daemon's uid)."""
        return Client(self.daemon.target, token=self.tokens[who] if who else "", env={})

    def cli(self, who: str | None, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JB_")}
        if who:
            env["JB_TOKEN"] = self.tokens[who]
        return subprocess.run(
            [sys.executable, "-m", "jb_client", "--target", self.daemon.target, *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )

    def restart(self) -> None:
        assert self.daemon.stop() == 0, self.daemon.log.read_text()
        self.daemon = start_daemon(self.daemon.data_dir, *self.args, tasks=self.root / "tasks")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("visibility")
    tasks = root / "tasks"
    shutil.copytree(SLIDING_DIR, tasks / "smoke" / "slidingwindow")
    shutil.copytree(TASKS / "smoke" / "lrucache", tasks / "vis" / "lrucache")
    listed = tasks / "listed" / "slidingwindow"
    shutil.copytree(SLIDING_DIR, listed)
    with (listed / "task.toml").open("a") as fh:
        fh.write(f"fail_to_pass = {json.dumps(LISTED_F2P)}\npass_to_pass = []\n")
    gate.write_tasks(tasks)
    tokens_file = root / "tokens.toml"
    tokens = {
        who: add_token(tokens_file, who, [role], None)
        for who, role in (("alice", "agent"), ("bob", "agent"), ("audit", "auditor"))
    }
    args = ("--tokens", str(tokens_file))
    w = World(root, tokens, start_daemon(root / "data", *args, tasks=tasks), args)
    yield w
    gate.Gate(w.daemon.data_dir).release_all()
    assert w.daemon.stop() == 0, w.daemon.log.read_text()


def signed_body(receipt: Receipt | dict[str, Any]) -> dict[str, Any]:
    raw = receipt.to_dict() if isinstance(receipt, Receipt) else receipt
    return dict(json.loads(base64.b64decode(raw["entry"]["payload"]))["body"])


def assert_nothing_hidden(texts: Iterable[str], *, also: Iterable[str] = ()) -> None:
    """None of the hidden tests' names (nor `also`) appears in anything the agent got."""
    for text in texts:
        for secret in (*SECRETS, *also):
            assert secret not in text, f"{secret!r} reached the agent in:\n{text[:3000]}"


def visible_failing(ids: Iterable[str]) -> list[str]:
    return [i for i in ids if i.startswith(VISIBLE + "::")]


def empty_patch(tmp_path: Path) -> Path:
    path = tmp_path / "empty.diff"
    path.write_bytes(b"")
    return path


def cli_ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


# -- 1. hidden stays hidden -----------------------------------------------------------------


def test_an_empty_patch_shows_its_agent_no_hidden_test(world: World, tmp_path: Path) -> None:
    key = f"empty-{uuid.uuid4().hex}"
    events: list[tuple[str, str]] = []
    with world.client("alice") as c:
        receipt = c.submit(
            SLIDING, b"", idempotency_key=key, progress=lambda p, m: events.append((p, m))
        )
    seq = receipt["seq"]

    # What an auditor sees: the hidden tests ran and failed, by name and line.
    with world.client("audit") as c:
        whole, full = c.receipt(seq=seq), c.logs(seq)
    hidden_ids = [i for i in full["tests_failed"]["ids"] if i.startswith(HIDDEN + "::")]
    assert hidden_ids, full["tests_failed"]
    assert {"grade", "baseline", "reference"} <= set(full["runs"])  # it paid for the baseline
    for phase in ("grade", "baseline", "reference"):
        assert "test_hidden_windows" in full["runs"][phase]["text"], phase
    assert set(hidden_ids) <= set(signed_body(whole)["tests_failed"])
    assert "test_hidden_windows" in whole["output_tail"]

    # What alice sees: the verdict, counts and failing visible ids; nothing of the runs.
    visible = visible_failing(full["tests_failed"]["ids"])
    assert visible
    assert receipt["status"] == "unresolved" and receipt["tests"] == whole["tests"]
    assert receipt["tests"]["failed"] > len(visible)
    assert receipt["tests_failed"] == visible
    assert receipt["entry"] is None and receipt["output_tail"] == ""
    assert "hidden tests ran" in receipt["withheld"]
    with world.client("alice") as c:
        mine, again, by_key = c.logs(seq), c.receipt(seq=seq), c.receipt(idempotency_key=key)
    assert mine["tests_failed"]["ids"] == visible and "hidden tests ran" in mine["withheld"]
    assert mine["tests_failed"]["count"] == full["tests_failed"]["count"]
    assert set(mine["runs"]) == set(full["runs"])
    for run in mine["runs"].values():
        assert run["status"] == "withheld" and run["text"] == "" and run["exit_code"] is None
    assert again["entry"] is None and by_key["seq"] == seq
    # The CLI: a replay of the same submission with its failure summary, the logs, receipts.
    patch = empty_patch(tmp_path)
    summary = cli_ok(
        world.cli(
            "alice", "submit", "--task", SLIDING, "--patch", str(patch), "--idempotency-key", key
        )
    )
    assert "(replayed)" in summary and visible[0] in summary and "withheld" in summary
    texts = [
        *(json.dumps(doc.to_dict()) for doc in (receipt, mine, again, by_key)),
        *(repr(doc) for doc in (receipt, mine, again, by_key)),  # the typed view too
        json.dumps(events),
        summary,
        cli_ok(world.cli("alice", "logs", "--seq", str(seq))),
        cli_ok(world.cli("alice", "logs", "--seq", str(seq), "--json")),
        cli_ok(world.cli("alice", "receipt", "--seq", str(seq), "--json")),
        cli_ok(world.cli("alice", "receipt", "--key", key)),
    ]
    assert_nothing_hidden(texts)
    # The receipt says why it cannot be audited alone.
    receipt_file = tmp_path / "receipt.json"
    receipt_file.write_text(json.dumps(receipt.to_dict()))
    audited = world.cli("alice", "audit", str(receipt_file), "--pubkey", str(world.daemon.pubkey))
    assert audited.returncode != 0 and "withheld" in audited.stderr + audited.stdout
    assert "Traceback" not in audited.stderr


# Reads every file of the tree it is graded in, by whatever name, and prints each line;
# then compiles code under the name of each test file it was not given (a likely hidden
# one first: canaries are planted too), so that the monitor's finding, and the progress
# message carrying it, names the file.
LEAK = r"""
unknown = []
for top, dirs, files in os.walk("."):
    for name in sorted(files):
        path = os.path.abspath(os.path.join(top, name))
        try:
            with open(path, errors="replace") as fh:
                text = fh.read()
        except OSError:
            continue
        for line in text.splitlines():
            emit("leak", "OK", name + "|" + line)
        if os.sep + "tests" + os.sep in path and name not in CFG["given"]:
            unknown.append(path)
flush()
for path in sorted(unknown, key=lambda p: "hidden" not in p):
    attempt("borrow", compile, "x = 1", path, "exec")
"""


def leak_patch(token: str) -> bytes:
    given = sorted(p.name for p in (SLIDING_DIR / "before" / "tests").iterdir())
    given = [n for n in given if not n.startswith("test_hidden")]
    body = A.payload(LEAK, {"token": token, "given": given})
    return A.build_patch(SLIDING_DIR, append={"slidingwindow/__init__.py": body})


def test_a_patch_that_prints_the_hidden_tests_prints_them_to_nobody_but_the_host(
    world: World, tmp_path: Path
) -> None:
    token = A.new_token()
    events: list[tuple[str, str]] = []
    with world.client("alice") as c:
        receipt = c.submit(SLIDING, leak_patch(token), progress=lambda p, m: events.append((p, m)))
    seq = receipt["seq"]

    # The payload ran, read the hidden file by a name it found itself, and printed it.
    with world.client("audit") as c:
        full, whole = c.logs(seq), c.receipt(seq=seq)
    grade_text = full["runs"]["grade"]["text"]
    assert f"{token} leak OK:test_hidden_windows.py|def test_" in grade_text, grade_text[-3000:]
    body = signed_body(whole)
    forged = str((body.get("integrity") or {}).get("forged", ""))
    assert body["status"] == "tampered" and "test_hidden_windows" in forged, forged
    # The operator's own Submit of the same patch streams that finding as progress.
    seen: list[tuple[str, str]] = []
    with world.client() as c:
        c.submit(SLIDING, leak_patch(A.new_token()), progress=lambda p, m: seen.append((p, m)))
    assert any("test_hidden_windows" in m for p, m in seen if p == "grade"), seen

    # Alice gets the verdict and counts; nothing the run printed or found.
    assert receipt["status"] == "tampered" and receipt["entry"] is None
    assert receipt["output_tail"] == "" and set(receipt["tests_failed"]) <= set(
        visible_failing(receipt["tests_failed"])
    )
    assert any(p == "grade" for p, _ in events)
    with world.client("alice") as c:
        mine = c.logs(seq)
    texts = [
        *(json.dumps(doc.to_dict()) for doc in (receipt, mine)),
        *(repr(doc) for doc in (receipt, mine)),
        json.dumps(events),
        cli_ok(world.cli("alice", "logs", "--seq", str(seq))),
        cli_ok(world.cli("alice", "receipt", "--seq", str(seq), "--json")),
    ]
    assert_nothing_hidden(texts, also=[token])


def test_an_agent_sees_all_of_a_task_without_hidden_tests(world: World) -> None:
    with world.client("alice") as c:
        receipt = c.submit(LRU, b"")
        logs = c.logs(receipt["seq"])
    assert receipt["status"] == "unresolved" and receipt["entry"] is not None
    assert "withheld" not in receipt and receipt["output_tail"]
    assert receipt["tests_failed"] == signed_body(receipt)["tests_failed"]
    assert logs["runs"]["grade"]["text"] and "withheld" not in logs


def test_a_task_listing_names_no_hidden_test_to_an_agent(world: World) -> None:
    with world.client() as c:  # the operator: the ids as the task lists them
        assert c.task(LISTED)["fail_to_pass"] == LISTED_F2P
    with world.client("alice") as c:
        assert c.task(LISTED)["fail_to_pass"] == LISTED_F2P[:1]
        listing = c.tasks("listed")
    assert [t["fail_to_pass"] for t in listing] == [LISTED_F2P[:1]]
    done = world.cli("alice", "tasks", "--json")
    assert_nothing_hidden([cli_ok(done)])


def test_agents_may_not_export_the_ledger(world: World, tmp_path: Path) -> None:
    done = world.cli("alice", "export", "--out", str(tmp_path / "ledger.jsonl"))
    assert done.returncode == 2 and "may not call Export" in done.stderr


# -- 2. each agent sees its own ---------------------------------------------------------------


def test_an_agent_reads_only_its_own_results(world: World) -> None:
    key = f"own-{uuid.uuid4().hex}"
    with world.client("alice") as c:
        seq = c.submit(LRU, b"", idempotency_key=key)["seq"]
    with world.client("bob") as c:
        for read in (lambda: c.receipt(seq=seq), lambda: c.logs(seq)):
            with pytest.raises(ClientError) as err:
                read()
            assert err.value.kind == Kind.PERMISSION_DENIED
            assert "another credential" in err.value.message
        with pytest.raises(ClientError) as err:
            c.receipt(idempotency_key=key)  # her key is hers: bob has no result under it
        assert err.value.kind == Kind.NOT_FOUND
        # The aggregates stay public.
        rows = c.frontier("vis")["rows"]
        assert any(r["solver"] == "alice" for r in rows)
        assert c.best_of_k("vis")["rows"]
    done = world.cli("bob", "logs", "--seq", str(seq))
    assert done.returncode == 2 and "another credential" in done.stderr
    assert "Traceback" not in done.stderr
    # Alice, the auditor and the operator read it.
    for who in ("alice", "audit", None):
        with world.client(who) as c:
            assert c.receipt(seq=seq)["seq"] == seq and c.logs(seq)["seq"] == seq


# -- 3. idempotency keys are their holder's -------------------------------------------------


def test_the_same_key_from_two_agents_is_two_attempts(world: World) -> None:
    key = f"shared-{uuid.uuid4().hex}"
    with world.client("alice") as c:
        first = c.submit(LRU, b"", idempotency_key=key)
    with world.client("bob") as c:
        other = c.submit(LRU, b"", idempotency_key=key)
        assert c.submit(LRU, b"", idempotency_key=key)["seq"] == other["seq"]
    assert other["seq"] != first["seq"] and not other["replayed"]
    assert signed_body(first)["agent"] == "alice" and signed_body(other)["agent"] == "bob"
    with world.client("alice") as c:
        again = c.submit(LRU, b"", idempotency_key=key)
        assert again["seq"] == first["seq"] and again["replayed"]
        assert c.receipt(idempotency_key=key)["seq"] == first["seq"]


def test_an_agent_cannot_preempt_an_operator_run(world: World) -> None:
    run_id = f"run{uuid.uuid4().hex[:8]}"
    squatted = {}
    with world.client("alice") as c:
        for task in c.tasks("vis"):
            key = f"{run_id}:reference::0:{task['task_id']}"  # the key `jb-client run` uses
            squatted[key] = c.submit(task["task_id"], b"", idempotency_key=key)
    assert squatted and all(r["status"] == "unresolved" for r in squatted.values())
    done = world.cli(
        None, "run", "--suite", "vis", "--solvers", "reference", "--run-id", run_id, "--json"
    )
    assert done.returncode == 0, done.stderr
    ran = json.loads(done.stdout)["receipts"]
    assert len(ran) == len(squatted)
    for r in ran:
        assert r["status"] == "resolved" and not r["replayed"]
        assert r["seq"] not in {s["seq"] for s in squatted.values()}
        assert signed_body(r)["solver"] == "reference"
    for key, hers in squatted.items():
        with world.client() as c:
            assert c.receipt(idempotency_key=key)["status"] == "resolved"
        with world.client("alice") as c:
            assert c.receipt(idempotency_key=key)["seq"] == hers["seq"]


def _in_thread(fn: Callable[[], dict[str, Any]]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["receipt"] = fn()
        except BaseException as err:  # the test reads it
            out["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


SEEN = {"seed", "replay"}  # the first phase of an attempt of its own, or of a replay


def test_a_running_attempt_is_not_joined_by_another_credential(
    world: World, tmp_path: Path
) -> None:
    tasks = world.root / "tasks"
    key = f"inflight-{uuid.uuid4().hex}"
    held = gate.Gate(world.daemon.data_dir)
    before = set(held.held())
    agent = world.client("alice")
    operator = world.client()
    events: list[tuple[str, str]] = []
    try:
        hers, her_out = _in_thread(
            lambda: agent.submit(
                gate.TASK, gate.hold_patch(tasks, tmp_path), idempotency_key=key
            ).to_dict()
        )
        gate.wait_for("alice's run to hold", lambda: len(set(held.held()) - before) >= 1)
        ours, our_out = _in_thread(
            lambda: operator.run_solver(
                gate.TASK,
                "noop",
                idempotency_key=key,
                progress=lambda p, m: events.append((p, m)),
            ).to_dict()
        )

        # Its own attempt, seeded while hers still runs: never a replay of hers.
        def phases() -> set[str]:
            return {p for p, _ in list(events)}

        gate.wait_for("the operator's attempt to start", lambda: bool(phases() & SEEN))
        assert "replay" not in phases() and "seed" in phases(), events
    finally:
        for tree in set(held.held()) - before:
            held.release(tree)
    hers.join(gate.PATIENCE_S)
    ours.join(gate.PATIENCE_S)
    agent.close()
    operator.close()
    assert "receipt" in her_out and "receipt" in our_out, (her_out, our_out)
    mine = our_out["receipt"]
    assert mine["seq"] != her_out["receipt"]["seq"] and not mine["replayed"]
    assert signed_body(mine)["solver"] == "noop" and her_out["receipt"]["status"] == "resolved"


# -- all of it after a restart ---------------------------------------------------------------


def test_owners_and_keys_survive_a_restart(world: World) -> None:
    key = f"restart-{uuid.uuid4().hex}"
    with world.client("alice") as c:
        hers = c.submit(LRU, b"", idempotency_key=key)
        hidden = c.submit(SLIDING, b"")
    world.restart()
    with world.client("bob") as c:
        with pytest.raises(ClientError) as err:
            c.receipt(seq=hers["seq"])
        assert err.value.kind == Kind.PERMISSION_DENIED
        bobs = c.submit(LRU, b"", idempotency_key=key)
        assert bobs["seq"] != hers["seq"] and not bobs["replayed"]
    with world.client("alice") as c:
        again = c.submit(LRU, b"", idempotency_key=key)
        assert again["seq"] == hers["seq"] and again["replayed"]
        shown = c.receipt(seq=hidden["seq"])
        assert shown["entry"] is None and shown["output_tail"] == ""
