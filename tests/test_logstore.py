"""The content-addressed store of run output: once per hash, private, checked on read."""

from __future__ import annotations

import hashlib
from pathlib import Path

from jouled.logstore import LogStore


def test_a_blob_is_stored_once_under_its_hash_and_private(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs")
    digest = store.put(b"FAILED tests/test_a.py::test_x\n")
    assert digest == hashlib.sha256(b"FAILED tests/test_a.py::test_x\n").hexdigest()
    assert store.put(b"FAILED tests/test_a.py::test_x\n") == digest
    assert [p.name for p in (tmp_path / "logs").iterdir()] == [digest]
    assert (tmp_path / "logs" / digest).stat().st_mode & 0o777 == 0o600
    assert store.get(digest) == b"FAILED tests/test_a.py::test_x\n"


def test_a_changed_or_absent_blob_is_not_returned(tmp_path: Path) -> None:
    store = LogStore(tmp_path / "logs")
    digest = store.put(b"output\n")
    (tmp_path / "logs" / digest).write_bytes(b"other\n")
    assert store.get(digest) is None
    assert store.put(b"output\n") == digest  # a changed blob is replaced by the real one
    assert store.get(digest) == b"output\n"
    assert store.get("0" * 64) is None
    assert store.get("../escape") is None


def test_a_result_signed_before_logs_has_its_graded_run_only() -> None:
    from jouled.attempt_logs import AttemptLogs

    old = {"output": {"sha256": "ab" * 32, "kept_bytes": 5, "dropped_bytes": 7}}
    assert AttemptLogs.runs(old) == {"grade": {**old["output"], "status": "truncated"}}
    assert AttemptLogs.runs({}) == {}
