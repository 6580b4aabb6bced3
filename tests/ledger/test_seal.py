"""The column seal: a start after a clean stop skips the column check only when it is safe."""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb
import pytest

from jouled.errors import LedgerIntegrityError
from jouled.ledger import seal
from jouled.ledger.columns import ALL_NAMES
from jouled.ledger.signing import load_or_create_key

from .test_store import open_ledger

RESULT = {"task_id": "s/t", "status": "unresolved", "resolved": False}


def _stopped_cleanly(d: Path) -> None:
    ledger = open_ledger(d)
    ledger.append_many([("result", {**RESULT, "rollout": i}) for i in range(3)])
    ledger.close()
    assert seal.seal_path(d / "ledger.duckdb").exists()


def _forge_resolved(d: Path) -> None:
    """Flip the first result's `resolved` and `status` columns, and prove the edit landed."""
    with duckdb.connect(str(d / "ledger.duckdb")) as db:
        db.execute("UPDATE entries SET resolved = true, status = 'resolved' WHERE seq = 1")
        row = db.execute("SELECT resolved, status FROM entries WHERE seq = 1").fetchone()
    assert row == (True, "resolved")


def test_a_clean_stop_seals_and_the_next_start_takes_the_seal(tmp_path: Path) -> None:
    _stopped_cleanly(tmp_path)
    ledger = open_ledger(tmp_path)
    root = ledger.root()
    assert ledger.columns_checked == "sealed"
    assert not seal.seal_path(tmp_path / "ledger.duckdb").exists()  # one start only
    ledger.append("result", {**RESULT, "rollout": 9})
    ledger.close()
    again = open_ledger(tmp_path)
    assert again.columns_checked == "sealed" and again.size == 5
    assert again.root(4) == root
    again.close()


def test_a_start_without_a_seal_checks_every_column(tmp_path: Path) -> None:
    _stopped_cleanly(tmp_path)
    seal.seal_path(tmp_path / "ledger.duckdb").unlink()
    ledger = open_ledger(tmp_path)
    assert ledger.columns_checked == "derived"
    ledger.close()


def test_a_column_edited_after_a_clean_stop_is_refused_despite_the_seal(tmp_path: Path) -> None:
    _stopped_cleanly(tmp_path)
    _forge_resolved(tmp_path)
    with pytest.raises(LedgerIntegrityError, match="entry 1 column 'resolved' disagrees"):
        open_ledger(tmp_path)


def test_a_seal_made_with_another_key_vouches_for_nothing(tmp_path: Path) -> None:
    _stopped_cleanly(tmp_path)
    _forge_resolved(tmp_path)
    # The editor seals the edited rows with a key of their own, digest and row count right.
    forger, _ = load_or_create_key(tmp_path / "forger.key", tmp_path / "forger.pub")
    with duckdb.connect(str(tmp_path / "ledger.duckdb")) as db:
        rows, digest = seal.digest(db, ALL_NAMES)
    seal.write(seal.seal_path(tmp_path / "ledger.duckdb"), forger, rows, digest)
    with pytest.raises(LedgerIntegrityError, match="entry 1 column 'resolved' disagrees"):
        open_ledger(tmp_path)


def test_an_old_seal_does_not_cover_rows_added_since(tmp_path: Path) -> None:
    _stopped_cleanly(tmp_path)
    path = seal.seal_path(tmp_path / "ledger.duckdb")
    old = path.read_bytes()
    ledger = open_ledger(tmp_path)
    ledger.append("result", {**RESULT, "rollout": 7})
    ledger.close()
    path.write_bytes(old)  # the seal of the shorter ledger put back
    with duckdb.connect(str(tmp_path / "ledger.duckdb")) as db:
        db.execute("UPDATE entries SET resolved = true WHERE seq = 4")
    with pytest.raises(LedgerIntegrityError, match="entry 4 column 'resolved' disagrees"):
        open_ledger(tmp_path)


def test_an_unreadable_seal_means_the_full_check(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _stopped_cleanly(tmp_path)
    seal.seal_path(tmp_path / "ledger.duckdb").write_text("{not json")
    with caplog.at_level(logging.WARNING):
        ledger = open_ledger(tmp_path)
    assert ledger.columns_checked == "derived"
    assert "ignoring the column seal" in caplog.text
    ledger.close()


def test_a_seal_that_cannot_be_written_leaves_the_next_start_checking(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = open_ledger(tmp_path)
    ledger.append("result", RESULT)
    seal.seal_path(tmp_path / "ledger.duckdb").mkdir()  # in the way of the file
    with caplog.at_level(logging.WARNING):
        ledger.close()
    assert "could not seal the ledger's columns" in caplog.text
    again = open_ledger(tmp_path)
    assert again.columns_checked == "derived" and again.size == 2
    again.close()
