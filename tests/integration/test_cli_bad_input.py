"""Bad input a new user gives the real `jb-client`: an `error:` line with a hint and
exit 2, never a Python traceback, and nothing signed on the daemon's ledger."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from jb_client.api import checkpoint_history_path

from .conftest import Daemon


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
