"""Rows written into a stopped daemon's journal table, without its key.

The attempt journal lives in the ledger's DuckDB file in the data dir. At start
the daemon signs an `abort` entry for every attempt the journal holds and no
entry names. The attacker here can write the data dir but has no signing key:
it stops nobody, it waits for a stop (a crash, here: SIGKILL while a genuine
attempt runs), writes rows with duckdb directly, and lets the daemon start.
Before the journal was authenticated, those rows became signed aborts under any
solver name (`reference`), with control characters, and a 20 MB name that made
every later Export too large to answer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import signal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from .conftest import Daemon, free_port, start_daemon
from .gate import Call, Gate, fix_patch, hold_patch, submit_request, write_tasks
from .test_metrics_daemon import scrape

HUGE = 20 << 20  # characters: the name that broke Export for good


def fid(n: int) -> str:
    """A forged attempt id: 32 hex digits, as the daemon's own are."""
    return f"f{n:031d}"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("gate-tasks"))


def _export(d: Daemon, out: Path) -> list[dict[str, Any]]:
    done = d.client("export", "--out", str(out))
    assert done.returncode == 0, done.stderr
    verified = d.client("verify", str(out), "--pubkey", str(d.pubkey))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    return [
        json.loads(base64.b64decode(json.loads(line)["payload"]))
        for line in out.read_text().splitlines()
    ]


def _journal(data_dir: Path) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(data_dir / "ledger.duckdb")) as db:
        return db.execute(
            "SELECT attempt_id, idempotency_key, task_id, accepted, request, mac FROM journal "
            "ORDER BY accepted"
        ).fetchall()


def _forge(data_dir: Path, genuine: tuple[Any, ...]) -> list[str]:
    """Write forged rows beside the genuine one; their attempt ids."""
    _, _, task_id, accepted, request, tag = genuine
    rows = {
        # A hosted solver's name, with no MAC at all.
        fid(1): (task_id, {"solver": "reference"}, None),
        # ... with a MAC made with a key of the attacker's own.
        fid(2): (
            task_id,
            {"solver": "reference"},
            hmac.new(b"guess", b"reference", hashlib.sha256).hexdigest(),
        ),
        # The genuine row's MAC spliced onto other fields.
        fid(3): (task_id, {"solver": "reference"}, tag),
        # Control characters that would reach a terminal reading the ledger.
        fid(4): (task_id, {"solver": "evil\x1b[2J\x07"}, tag),
        # A 20 MB solver name, and a 20 MB task id.
        fid(5): (task_id, {"solver": "x" * HUGE}, None),
        fid(6): ("gate/" + "y" * HUGE, {"solver": "gate"}, None),
        # Not JSON at all.
        fid(7): (task_id, "}{", None),
    }
    with duckdb.connect(str(data_dir / "ledger.duckdb")) as db:
        for attempt_id, (task, req, mac) in rows.items():
            text = req if isinstance(req, str) else json.dumps(req)
            db.execute(
                "INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)",
                [attempt_id, f"key-{attempt_id}", task, accepted, text, mac],
            )
        # An edit of the genuine row itself: its fields and its MAC no longer agree.
        edited = json.loads(request) | {"solver": "reference"}
        db.execute(
            "INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)",
            [fid(8), None, task_id, accepted, json.dumps(edited), tag],
        )
    return [*rows, fid(8)]


def test_forged_journal_rows_sign_nothing_and_a_genuine_crash_still_aborts(
    tasks: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    d = start_daemon(data, tasks=tasks)
    # A genuine attempt, held in its graded run, then the daemon crashes under it.
    call = Call(d.target, submit_request(hold_patch(tasks, tmp_path), "genuine", solver="gate"))
    gate = Gate(data)
    gate.wait_held(1)
    assert d.stop(signal.SIGKILL) == -signal.SIGKILL
    gate.release_all()
    call.join()
    [genuine] = _journal(data)
    assert genuine[1] == "genuine" and genuine[5]  # the daemon wrote it, with its MAC

    forged = _forge(data, genuine)
    assert {r[0] for r in _journal(data)} == {genuine[0], *forged}  # the payload is in place

    port = free_port()
    d = start_daemon(data, "--metrics-listen", f"127.0.0.1:{port}", tasks=tasks)
    try:
        docs = _export(d, tmp_path / "export.jsonl")  # Export answers, and verifies
        aborts = [doc["body"] for doc in docs if doc["kind"] == "abort"]
        assert [(a["attempt_id"], a["solver"], a["idempotency_key"]) for a in aborts] == [
            (genuine[0], "gate", "genuine")
        ]
        signed = json.dumps(docs)
        assert not any(a in signed for a in forged)
        assert "reference" not in signed

        # Reported: in the log, in the data dir, and on the metrics endpoint.
        refused = [
            json.loads(line) for line in (data / "journal-refused.jsonl").read_text().splitlines()
        ]
        reasons = {r["attempt_id"].strip("'"): r["reason"] for r in refused}
        assert set(reasons) == set(forged)
        assert "carries no MAC" in reasons[fid(1)]
        for n in (2, 3, 8):
            assert "MAC does not verify" in reasons[fid(n)]
        assert "solver 'evil\\x1b[2J\\x07' is not a valid name" in reasons[fid(4)]
        assert "request is 20971" in reasons[fid(5)]
        assert "task_id is 20971" in reasons[fid(6)]
        assert "not JSON" in reasons[fid(7)]
        text = d.log.read_text()
        assert "8 journal row(s) refused at start" in text
        assert fid(1) in text
        assert scrape(port)["jouled_journal_refused_total"][()] == len(forged)

        # Still serving: a new attempt is graded and signed.
        done = d.client(
            "submit", "--task", "gate/hold", "--patch", str(_fix(tasks, tmp_path)), "--json"
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "resolved"
    finally:
        assert d.stop() == 0, d.log.read_text()

    # The refused rows are gone from the journal; a restart signs nothing more.
    assert {r[0] for r in _journal(data)} & set(forged) == set()
    d = start_daemon(data, tasks=tasks)
    try:
        again = _export(d, tmp_path / "again.jsonl")
        assert [doc["kind"] for doc in again].count("abort") == 1
    finally:
        assert d.stop() == 0, d.log.read_text()


def _fix(tasks: Path, tmp_path: Path) -> Path:
    path = tmp_path / "fix.patch"
    path.write_bytes(fix_patch(tasks, tmp_path))
    return path


def test_a_data_dir_from_before_the_journal_macs_still_aborts_its_crashed_attempt(
    tasks: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    d = start_daemon(data, tasks=tasks)
    call = Call(d.target, submit_request(hold_patch(tasks, tmp_path), "genuine", solver="gate"))
    gate = Gate(data)
    gate.wait_held(1)
    assert d.stop(signal.SIGKILL) == -signal.SIGKILL
    gate.release_all()
    call.join()
    [genuine] = _journal(data)
    # The journal as a daemon without MACs left it, with a row beside it out of bounds.
    with duckdb.connect(str(data / "ledger.duckdb")) as db:
        db.execute("ALTER TABLE journal DROP COLUMN mac")
        db.execute(
            "INSERT INTO journal VALUES (?, NULL, 'gate/hold', ?, ?)",
            [fid(9), genuine[3], json.dumps({"solver": "reference\n"})],
        )

    d = start_daemon(data, tasks=tasks)
    try:
        docs = _export(d, tmp_path / "export.jsonl")
        aborts = [doc["body"] for doc in docs if doc["kind"] == "abort"]
        assert [(a["attempt_id"], a["solver"]) for a in aborts] == [(genuine[0], "gate")]
        [refused] = (data / "journal-refused.jsonl").read_text().splitlines()
        assert "solver 'reference\\\\n' is not a valid name" in refused
    finally:
        assert d.stop() == 0, d.log.read_text()
    rows = _journal(data)  # the journal has its MAC column now, and the genuine row one
    assert [(r[0], bool(r[5])) for r in rows] == [(genuine[0], True)]
