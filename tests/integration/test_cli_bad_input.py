"""Bad input a new user gives the real `jb-client`: an `error:` line with a hint and
exit 2, never a Python traceback, and nothing signed on the daemon's ledger."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jb_client.api import checkpoint_history_path, parquet_path

from .attacks import wait_until
from .conftest import Daemon, start_daemon
from .gate import TASK, Gate, hold_patch, wait_for, write_tasks


def usage_error(done: subprocess.CompletedProcess[str], *said: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: "), done.stderr
    assert "\n  hint: " in done.stderr, done.stderr
    for text in said:
        assert text in done.stderr, done.stderr


@pytest.fixture(scope="module")
def export(daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "ledger.jsonl"
    done = daemon.client("export", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_verify_names_a_malformed_checkpoint_history(
    daemon: Daemon, export: Path, tmp_path: Path
) -> None:
    copy = tmp_path / export.name
    copy.write_bytes(export.read_bytes())
    history = checkpoint_history_path(copy)
    history.write_text('{"note": "x"}\n{x\n')
    done = daemon.client("verify", str(copy), "--pubkey", str(daemon.pubkey))
    usage_error(done, f"{history} line 2 is not a checkpoint note")


@pytest.mark.parametrize("where", ["dir", "missing"])
def test_meter_run_checks_its_receipt_path_before_the_window(
    daemon: Daemon, tmp_path: Path, where: str
) -> None:
    receipt = tmp_path if where == "dir" else tmp_path / "nosuch" / "r.json"
    size = daemon.ledger_size()
    done = daemon.client("meter-run", "--label", "x", "--receipt", str(receipt), "--", "true")
    usage_error(done, str(receipt))
    assert "op x:" not in done.stderr  # no window was opened, none signed
    assert daemon.ledger_size() == size


@pytest.mark.parametrize("solvers", ["", " , "])
def test_run_with_no_solvers_is_a_usage_error(daemon: Daemon, solvers: str) -> None:
    size = daemon.ledger_size()
    done = daemon.client("run", "--suite", "smoke", "--solvers", solvers)
    usage_error(done, "names no solver")
    assert daemon.ledger_size() == size


def bare_copy(export: Path, tmp_path: Path, name: str = "bare.jsonl") -> Path:
    """The export alone: no Parquet snapshot, no checkpoint history beside it."""
    copy = tmp_path / name
    copy.write_bytes(export.read_bytes())
    return copy


def test_verify_says_what_an_export_without_its_parts_left_unchecked(
    daemon: Daemon, export: Path, tmp_path: Path
) -> None:
    whole = daemon.client("verify", str(export), "--pubkey", str(daemon.pubkey))
    assert whole.returncode == 0, whole.stderr
    assert "not checked" not in whole.stdout, whole.stdout
    assert (
        daemon.client_json("verify", str(export), "--pubkey", str(daemon.pubkey))["not_checked"]
        == []
    )

    bare = bare_copy(export, tmp_path)
    skipped = [
        f"no Parquet snapshot at {parquet_path(bare)}",
        f"no checkpoint history at {checkpoint_history_path(bare)}",
    ]
    done = daemon.client("verify", str(bare), "--pubkey", str(daemon.pubkey))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok "), done.stdout
    assert f"not checked: {'; '.join(skipped)}" in " ".join(done.stdout.split()), done.stdout
    report = daemon.client_json("verify", str(bare), "--pubkey", str(daemon.pubkey))
    assert report["not_checked"] == skipped


def test_verify_does_not_call_an_empty_export_ok(daemon: Daemon, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    done = daemon.client("verify", str(empty), "--pubkey", str(daemon.pubkey))
    assert not done.stdout.startswith("ok"), done.stdout
    assert "no entries" in done.stdout, done.stdout
    report = daemon.client_json("verify", str(empty), "--pubkey", str(daemon.pubkey))
    assert report["not_checked"][0] == "no entries: the export is empty"


def test_verify_names_a_corrupt_parquet_snapshot_in_one_line(
    daemon: Daemon, export: Path, tmp_path: Path
) -> None:
    bare = bare_copy(export, tmp_path)
    parquet_path(bare).write_bytes(bytes(range(256)) * 8)
    done = daemon.client("verify", str(bare), "--pubkey", str(daemon.pubkey))
    assert done.returncode == 1, done.stderr  # a failed check
    assert "Traceback" not in done.stderr
    said = done.stderr
    assert said.startswith(f"error: cannot read the Parquet snapshot {parquet_path(bare)}: "), said
    assert "LINE 1" not in said and "SELECT" not in said, said


@pytest.mark.parametrize("option", ["--since", "--checkpoint"])
def test_a_malformed_note_is_a_usage_error(
    daemon: Daemon, export: Path, tmp_path: Path, option: str
) -> None:
    note = tmp_path / "saved.note"
    note.write_text("junk\n")
    done = daemon.client("verify", str(export), "--pubkey", str(daemon.pubkey), option, str(note))
    usage_error(done, f"{option} {note} is not a checkpoint note")


@pytest.mark.parametrize("program", ["/nonexistent/cmd", "no-such-command-here", "/etc/passwd"])
def test_meter_run_checks_the_command_runs_before_the_window(daemon: Daemon, program: str) -> None:
    size = daemon.ledger_size()
    done = daemon.client("meter-run", "--label", "build", "--", program)
    usage_error(done, f"cannot run {program}")
    assert "op build:" not in done.stderr  # no window was opened, none signed
    assert daemon.ledger_size() == size


def test_a_receipt_asked_for_by_both_key_and_seq_is_a_usage_error(daemon: Daemon) -> None:
    done = daemon.client("receipt", "--key", "k", "--seq", "1")
    usage_error(done, "not both")


def test_a_consistency_proof_from_size_0_is_refused_as_its_help_says(daemon: Daemon) -> None:
    done = daemon.client("consistency", "--old", "0")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--old" in done.stderr and "1<=x" in daemon.client("consistency", "--help").stdout


def test_a_patch_that_cannot_be_read_says_what_to_give(daemon: Daemon, tmp_path: Path) -> None:
    done = daemon.client("submit", "--task", "smoke/lrucache", "--patch", str(tmp_path / "no.diff"))
    usage_error(done, "cannot read", "readable file")


@pytest.fixture
def gate_daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon serving the `gate` suite, whose graded run the test holds and releases."""
    d = start_daemon(tmp_path / "data", tasks=write_tasks(tmp_path / "tasks"))
    yield d
    Gate(d.data_dir).release_all()
    assert d.stop() == 0, d.log.read_text()


def test_an_interrupted_submit_says_what_becomes_of_the_attempt(
    gate_daemon: Daemon, tmp_path: Path
) -> None:
    patch = tmp_path / "hold.diff"
    patch.write_bytes(hold_patch(tmp_path / "tasks", tmp_path))
    key = "interrupted-submit"
    argv = ["--target", gate_daemon.target, "submit", "--task", TASK, "--patch", str(patch)]
    size = gate_daemon.ledger_size()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jb_client", *argv, "--idempotency-key", key],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **gate_daemon.extra_env},
    )
    # The attempt's test is running and held: Ctrl-C lands while the client waits on it.
    gate = Gate(gate_daemon.data_dir)
    wait_for("the attempt to be held", lambda: bool(gate.held()) or proc.poll() is not None)
    assert gate.held(), proc.communicate(timeout=300)[1]
    proc.send_signal(signal.SIGINT)
    _, said = proc.communicate(timeout=300)
    assert proc.returncode == 130, said
    assert "interrupted: the daemon stops the attempt" in said and "Traceback" not in said, said
    # The daemon records the attempt once its run ends: let the held test go, then its
    # entry, an abort, is signed.
    gate.release_all()
    assert wait_until(lambda: gate_daemon.ledger_size() > size, 120), "the attempt was never signed"
    out = tmp_path / "ledger.jsonl"
    done = gate_daemon.client("export", "--out", str(out))
    assert done.returncode == 0, done.stderr
    done = gate_daemon.client("verify", str(out), "--pubkey", str(gate_daemon.pubkey))
    assert done.returncode == 0 and done.stdout.startswith("ok "), done.stdout + done.stderr
    docs = [
        json.loads(base64.b64decode(json.loads(line)["payload"]))
        for line in out.read_text().splitlines()
    ]
    kinds = [d["kind"] for d in docs if d["body"].get("idempotency_key") == key]
    assert kinds == ["abort"], kinds


def test_run_refuses_a_solver_the_daemon_does_not_host_before_any_attempt(
    daemon: Daemon,
) -> None:
    size = daemon.ledger_size()
    done = daemon.client("run", "--suite", "smoke", "--solvers", "reference,bogus")
    usage_error(done, "the daemon hosts no solver 'bogus'", "reference, noop")
    assert daemon.ledger_size() == size  # nothing graded, nothing signed
