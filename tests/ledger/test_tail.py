"""The ledger's tail: what a crash leaves there is in the ledger at the next open, checked.

Crashes are real: a child process appends and leaves with `os._exit`, so
nothing is flushed or closed. The one fake is a failing `fdatasync`, the
operating system's answer for a failing disk.
"""

import base64
import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jouled.config import Config
from jouled.errors import LedgerError, LedgerFullError, LedgerIntegrityError
from jouled.ledger import keys
from jouled.ledger.checkpoint import parse_note
from jouled.ledger.schema import current_keyid
from jouled.ledger.store import FLUSH_EVERY
from jouled.ledger.tail import read_records, tail_path
from jouled.ledger.verify import verify_export
from jouled.startup import open_ledger as open_daemon_ledger

from .test_store import open_ledger

HERE = Path(__file__).resolve().parent


def crash_after(tmp_path: Path, steps: str) -> list[str]:
    """Run `steps` on the ledger in a child that exits without closing it; its printed lines."""
    script = (
        textwrap.dedent(
            f"""
        import os, shutil, sys
        sys.path.insert(0, {str(HERE)!r})
        from test_store import open_ledger
        from pathlib import Path
        d = Path({str(tmp_path)!r})
        ledger = open_ledger(d)
        """
        )
        + textwrap.dedent(steps)
        + "\nsys.stdout.flush()\nos._exit(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


APPEND_FIVE = """
for i in range(5):
    e = ledger.append("result", {"task_id": f"s/{i}", "suite": "s"})
    print(e.leaf_hash.hex())
assert not ledger._tail.empty
"""


def tail(d: Path) -> Path:
    return tail_path(d / "ledger.duckdb")


def test_entries_a_crash_left_in_the_tail_are_in_the_ledger_after_reopening(
    tmp_path: Path,
) -> None:
    leaves = crash_after(tmp_path, APPEND_FIVE)
    assert len(read_records(tail(tmp_path))[0]) == 5
    # The note file is one batch behind: it names genesis alone.
    assert parse_note((tmp_path / "checkpoint.note").read_bytes())[0].size == 1

    ledger = open_ledger(tmp_path)
    assert ledger.size == 6
    assert [ledger.get(i + 1).leaf_hash.hex() for i in range(5)] == leaves
    assert ledger.fetch("SELECT count(*) FROM entries WHERE suite = 's'") == [(5,)]
    assert tail(tmp_path).stat().st_size == 0
    assert parse_note((tmp_path / "checkpoint.note").read_bytes())[0].size == 6
    lines = [e.export_line() for e in ledger.iter_export()]
    report = verify_export(lines, [ledger.signer.public], ledger.checkpoint_history())
    assert report.entries == 6 and report.checkpoints[-1]["size"] == 6
    assert ledger.append("result", {"task_id": "s/next"}).seq == 6
    ledger.close()


def test_a_torn_last_record_was_never_acknowledged_and_is_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    crash_after(tmp_path, APPEND_FIVE)
    with tail(tmp_path).open("ab") as fh:
        fh.write(b'{"seq":6,"payload":"eyJr')  # a write the crash cut short
    with caplog.at_level(logging.WARNING, logger="jouled.ledger.store"):
        ledger = open_ledger(tmp_path)
    assert ledger.size == 6
    assert "24 bytes of an incomplete one" in caplog.text and "never acknowledged" in caplog.text
    assert ledger.append("result", {"task_id": "s/next"}).seq == 6
    ledger.close()


def test_a_batch_cut_short_before_its_checkpoint_was_never_acknowledged(tmp_path: Path) -> None:
    crash_after(
        tmp_path,
        APPEND_FIVE
        + """
ledger.append_many([("result", {"task_id": f"s/batch{i}"}) for i in range(3)])
""",
    )
    lines = tail(tmp_path).read_bytes().splitlines(keepends=True)
    assert len(lines) == 8 and b'"note"' in lines[-1] and b'"note"' not in lines[-2]
    tail(tmp_path).write_bytes(b"".join(lines[:-1]))  # the batch's sealing record is lost
    ledger = open_ledger(tmp_path)
    assert ledger.size == 6  # the five single appends; none of the batch
    assert ledger.append("result", {"task_id": "s/next"}).seq == 6
    ledger.close()


def test_a_tail_checkpoint_not_signed_by_this_daemon_is_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from jouled.ledger.checkpoint import sign_note
    from jouled.ledger.signing import Signer

    crash_after(tmp_path, APPEND_FIVE)
    lines = tail(tmp_path).read_bytes().splitlines()
    record = json.loads(lines[-1])
    cp, _ = parse_note(record["note"])
    record["note"] = sign_note(cp, [(cp.origin, Signer(Ed25519PrivateKey.generate()))])
    lines[-1] = json.dumps(record).encode()
    tail(tmp_path).write_bytes(b"\n".join(lines) + b"\n")
    note_before = (tmp_path / "checkpoint.note").read_bytes()
    with pytest.raises(LedgerIntegrityError, match="does not verify with this daemon's key"):
        open_ledger(tmp_path)
    assert (tmp_path / "checkpoint.note").read_bytes() == note_before  # left as it was


def test_records_duckdb_already_holds_are_not_added_twice(tmp_path: Path) -> None:
    # The crash falls after a batch committed and before the tail was emptied.
    crash_after(
        tmp_path,
        APPEND_FIVE
        + """
shutil.copy(ledger._tail.path, str(ledger._tail.path) + ".copy")
ledger.fetch("SELECT 1")  # moves the tail into DuckDB
assert ledger._tail.empty
""",
    )
    shutil.move(str(tail(tmp_path)) + ".copy", tail(tmp_path))
    ledger = open_ledger(tmp_path)
    assert ledger.size == 6
    assert ledger.fetch("SELECT count(*), count(DISTINCT seq) FROM entries") == [(6, 6)]
    assert tail(tmp_path).stat().st_size == 0
    ledger.close()


def test_an_edited_tail_record_is_refused(tmp_path: Path) -> None:
    crash_after(tmp_path, APPEND_FIVE)
    lines = tail(tmp_path).read_bytes().splitlines()
    record = json.loads(lines[2])
    payload = base64.b64decode(record["payload"]).replace(b"s/2", b"s/X")
    record["payload"] = base64.b64encode(payload).decode()
    lines[2] = json.dumps(record).encode()
    tail(tmp_path).write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(LedgerIntegrityError, match="entry 3 does not continue the chain"):
        open_ledger(tmp_path)


def test_a_damaged_record_before_the_last_line_is_refused(tmp_path: Path) -> None:
    crash_after(tmp_path, APPEND_FIVE)
    lines = tail(tmp_path).read_bytes().splitlines()
    lines[1] = lines[1][:40]
    tail(tmp_path).write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(LedgerIntegrityError, match="line 2 is not a tail record"):
        open_ledger(tmp_path)


def test_another_ledgers_tail_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    crash_after(other, APPEND_FIVE + "for i in range(3): ledger.append('op', {'i': i})\n")
    ledger = open_ledger(tmp_path)  # genesis only
    ledger.close()
    lines = tail(other).read_bytes().splitlines()
    tail(tmp_path).write_bytes(b"\n".join(lines[5:]) + b"\n")  # entries 6..8
    with pytest.raises(LedgerIntegrityError, match=r"starts at entry 6 but .* holds 1"):
        open_ledger(tmp_path)


@pytest.mark.parametrize(
    ("code", "error", "message"),
    [
        (errno.EIO, LedgerError, r"cannot write the ledger's tail .*: Input/output error"),
        (errno.ENOSPC, LedgerFullError, r"ran out of space: cannot write the ledger's tail"),
    ],
)
def test_a_failed_sync_records_nothing_and_the_ledger_goes_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    code: int,
    error: type[LedgerError],
    message: str,
) -> None:
    ledger = open_ledger(tmp_path)
    ledger.append("result", {"task_id": "s/a"})

    def failing(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr("jouled.ledger.tail.os.fdatasync", failing)
    with pytest.raises(error, match=message) as raised:
        ledger.append("result", {"task_id": "s/lost"})
    assert raised.value.kind == error.kind
    assert ledger.size == 2
    monkeypatch.undo()
    assert ledger.append("result", {"task_id": "s/b"}).seq == 2
    ledger.close()
    reopened = open_ledger(tmp_path)
    assert [e.body.get("task_id") for e in reopened.entries("result")] == ["s/a", "s/b"]
    reopened.close()


def test_the_note_file_is_at_most_one_batch_behind(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    note_file = tmp_path / "checkpoint.note"
    for i in range(FLUSH_EVERY - 1):
        ledger.append("result", {"task_id": f"s/{i}"})
    assert parse_note(ledger.checkpoint_note())[0].size == FLUSH_EVERY  # served: the newest
    assert parse_note(note_file.read_bytes())[0].size == 1
    ledger.append("result", {"task_id": "s/last"})  # fills the batch: moved, note replaced
    assert parse_note(note_file.read_bytes())[0].size == FLUSH_EVERY + 1
    assert ledger.checkpoint_note() == note_file.read_text()
    ledger.close()


def test_a_rotation_a_crash_left_in_the_tail_names_the_key(tmp_path: Path) -> None:
    config = Config.from_env({}, data_dir=tmp_path)
    open_daemon_ledger(config).close()
    paths = keys.KeyPaths(config.key_path, config.pub_path)
    # The crash falls after the rotation entry is durable, before it reaches DuckDB.
    new_keyid = crash_after(
        tmp_path,
        """
from jouled.ledger import keys, store
store.FLUSHED_AT_ONCE = ()
new = keys.prepare_next(keys.KeyPaths(d / "jouled.key", d / "jouled.pub"))
ledger.rotate(new, 0)
print(new.keyid)
""",
    )[0]
    assert paths.next.exists()
    assert current_keyid(config.ledger_path) == new_keyid
    ledger = open_daemon_ledger(config)  # finishes the rotation the tail names
    assert ledger.signer.keyid == new_keyid and not paths.next.exists()
    assert ledger.append("result", {"task_id": "s/a"}).signatures[0].keyid == new_keyid
    ledger.close()


def test_reads_see_the_tail_without_moving_it(tmp_path: Path) -> None:
    # Reads never write: they keep answering when the disk is too full to move the tail.
    ledger = open_ledger(tmp_path)
    ledger.journal_accept("a1", "k1", "s/t", {"solver": "x"})
    ledger.journal_accept("a2", "k2", "s/t", {"solver": "x"})
    result = ledger.append(
        "result", {"task_id": "s/t", "suite": "s", "idempotency_key": "k1", "attempt_id": "a1"}
    )
    baseline = ledger.append("baseline", {"task_id": "s/t", "task_digest": "d1"})
    assert not ledger._tail.empty and ledger.size == 3
    assert ledger.get(1) == result and ledger.result_for_key("k1") == result
    assert ledger.result_for_key("k2") is None
    assert ledger.baseline_for("d1") == baseline and ledger.latest("baseline") == baseline
    assert [e.seq for e in ledger.entries()] == [0, 1, 2]
    assert [e.seq for e in ledger.entries("result")] == [1]
    assert [e.seq for e in ledger.iter_export(batch=2)] == [0, 1, 2]
    assert [b["idempotency_key"] for b in ledger.result_bodies("s")] == ["k1"]
    assert list(ledger.result_bodies("other")) == []
    assert [p.attempt_id for p in ledger.journal_pending()] == ["a2"]
    assert [parse_note(n)[0].size for n in ledger.checkpoint_history()] == [1, 2, 3]
    assert not ledger._tail.empty  # nothing was moved
    assert parse_note((tmp_path / "checkpoint.note").read_bytes())[0].size == 1
    ledger.close()
