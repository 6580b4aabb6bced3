import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from jouled.errors import KeyFileError, LedgerIntegrityError
from jouled.ledger import merkle, opening
from jouled.ledger.checkpoint import parse_note
from jouled.ledger.signing import Signer, load_or_create_key
from jouled.ledger.store import Ledger
from jouled.ledger.verify import verify_export


def open_ledger(d: Path) -> Ledger:
    signer, _ = load_or_create_key(d / "jouled.key", d / "jouled.pub")
    return Ledger(
        d / "ledger.duckdb",
        signer,
        origin="jouled/test/0000",
        checkpoint_path=d / "checkpoint.note",
        genesis={"version": "t", "host": "h"},
    )


def test_key_is_created_private_and_a_readable_key_is_refused(tmp_path: Path) -> None:
    signer, created = load_or_create_key(tmp_path / "k", tmp_path / "k.pub")
    assert created and os.stat(tmp_path / "k").st_mode & 0o777 == 0o600
    again, created = load_or_create_key(tmp_path / "k", tmp_path / "k.pub")
    assert not created and again.keyid == signer.keyid
    os.chmod(tmp_path / "k", 0o644)
    with pytest.raises(KeyFileError, match="readable by group or others"):
        load_or_create_key(tmp_path / "k", tmp_path / "k.pub")


def test_genesis_chain_and_reopen(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    assert ledger.size == 1 and ledger.get(0).kind == "genesis"
    a = ledger.append("result", {"task_id": "s/t", "suite": "s", "idempotency_key": "k1"})
    b = ledger.append("result", {"task_id": "s/t", "suite": "s"})
    assert b.doc["prev"] == a.leaf_hash.hex()
    assert ledger.result_for_key("k1") == a
    root = ledger.root()
    ledger.close()
    reopened = open_ledger(tmp_path)
    assert reopened.size == 3 and reopened.root() == root
    assert reopened.checkpoint().size == 3
    report = verify_export(
        (e.export_line() for e in reopened.iter_export()),
        [reopened.signer.public],
        [reopened.checkpoint_note()],
    )
    assert report.entries == 3
    reopened.close()


def test_inclusion_and_consistency_proofs_verify(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    for i in range(6):
        ledger.append("result", {"task_id": f"s/{i}"})
    p = ledger.inclusion_proof(4)
    assert merkle.verify_inclusion(
        bytes.fromhex(p["leaf_hash"]),
        4,
        p["tree_size"],
        [bytes.fromhex(h) for h in p["hashes"]],
        ledger.root(),
    )
    c = ledger.consistency_proof(3)
    assert merkle.verify_consistency(
        3, 7, bytes.fromhex(c["old_root"]), ledger.root(), [bytes.fromhex(h) for h in c["hashes"]]
    )
    ledger.close()


def test_a_truncated_ledger_is_refused(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.append("result", {"task_id": "s/t"})
    ledger.close()
    with duckdb.connect(str(tmp_path / "ledger.duckdb")) as db:
        db.execute("DELETE FROM entries WHERE seq = 1")
    with pytest.raises(LedgerIntegrityError, match="behind its checkpoint"):
        open_ledger(tmp_path)


def test_an_older_copy_of_the_ledger_is_refused(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.close()
    shutil.copy(tmp_path / "ledger.duckdb", tmp_path / "old.duckdb")
    ledger = open_ledger(tmp_path)
    ledger.append("result", {"task_id": "s/t"})
    ledger.close()
    shutil.copy(tmp_path / "old.duckdb", tmp_path / "ledger.duckdb")
    with pytest.raises(LedgerIntegrityError, match="behind its checkpoint"):
        open_ledger(tmp_path)


def _flip_resolved_in_payload(path: Path, seq: int) -> None:
    """Edit entry `seq`'s signed payload in DuckDB: `resolved` false becomes true."""
    with duckdb.connect(str(path)) as db:
        db.execute(
            "UPDATE entries SET payload = replace(payload::VARCHAR, 'false', 'true')::BLOB"
            f" WHERE seq = {seq}"
        )
        (payload,) = db.execute(f"SELECT payload FROM entries WHERE seq = {seq}").fetchall()[0]
    assert b'"resolved":true' in payload


def test_an_edited_payload_is_refused(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.append("result", {"task_id": "s/t", "resolved": False})
    ledger.close()
    _flip_resolved_in_payload(tmp_path / "ledger.duckdb", 1)
    with pytest.raises(LedgerIntegrityError, match="entry 1 does not match its leaf hash"):
        open_ledger(tmp_path)


def _stored_backwards(path: Path) -> None:
    """Rewrite the entries table with its rows stored in descending seq order."""
    with duckdb.connect(str(path)) as db:
        db.execute("CREATE TEMP TABLE backwards AS SELECT * FROM entries ORDER BY seq DESC")
        db.execute("DELETE FROM entries")
        db.execute("INSERT INTO entries SELECT * FROM backwards")
        stored = [seq for (seq,) in db.execute("SELECT seq FROM entries").fetchall()]
    assert stored == sorted(stored, reverse=True)


def test_rows_stored_out_of_seq_order_rebuild_the_same_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(opening, "REHASH_BATCH", 3)  # several batches, the last one short
    ledger = open_ledger(tmp_path)
    ledger.append_many([("result", {"task_id": f"s/t{i}"}) for i in range(7)])
    root, size = ledger.root(), ledger.size
    ledger.close()
    _stored_backwards(tmp_path / "ledger.duckdb")
    again = open_ledger(tmp_path)
    assert (again.root(), again.size) == (root, size)
    again.close()


def test_an_edited_payload_stored_out_of_order_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(opening, "REHASH_BATCH", 3)
    ledger = open_ledger(tmp_path)
    ledger.append_many([("result", {"task_id": f"s/t{i}", "resolved": False}) for i in range(7)])
    ledger.close()
    _stored_backwards(tmp_path / "ledger.duckdb")
    _flip_resolved_in_payload(tmp_path / "ledger.duckdb", 5)
    with pytest.raises(LedgerIntegrityError, match="entry 5 does not match its leaf hash"):
        open_ledger(tmp_path)


def test_a_replaced_key_cannot_extend_the_ledger(tmp_path: Path) -> None:
    open_ledger(tmp_path).close()
    (tmp_path / "jouled.key").unlink()
    with pytest.raises(LedgerIntegrityError, match="is not the ledger's current key"):
        open_ledger(tmp_path)


def test_journal_tracks_unfinished_attempts(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.journal_accept("a1", "key", "s/t", {"solver": "x"})
    ledger.journal_accept("a2", None, "s/t", {"solver": "x"})
    ledger.append("result", {"task_id": "s/t", "attempt_id": "a1"})
    assert [p.attempt_id for p in ledger.journal_pending()] == ["a2"]
    ledger.close()


def test_an_edited_query_column_is_refused(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.append("result", {"task_id": "s/t", "status": "unresolved", "resolved": False})
    ledger.close()
    with duckdb.connect(str(tmp_path / "ledger.duckdb")) as db:
        db.execute("UPDATE entries SET resolved = true, status = 'resolved' WHERE seq = 1")
    with pytest.raises(LedgerIntegrityError, match="entry 1 column 'resolved' disagrees"):
        open_ledger(tmp_path)


def test_a_truncated_duckdb_file_is_refused(tmp_path: Path) -> None:
    from jouled.errors import LedgerError

    ledger = open_ledger(tmp_path)
    for i in range(20):
        ledger.append("result", {"task_id": f"s/{i}"})
    ledger.close()
    path = tmp_path / "ledger.duckdb"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(LedgerError):
        open_ledger(tmp_path)


def test_a_truncated_wal_shows_as_a_ledger_behind_its_checkpoint(tmp_path: Path) -> None:
    import subprocess
    import sys
    import textwrap

    from jouled.ledger.store import FLUSH_EVERY

    # Commit entries in a process that dies without closing, so they live only in the WAL:
    # the last append fills a batch, which moves the tail into DuckDB and empties it.
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from test_store import open_ledger
        from pathlib import Path
        ledger = open_ledger(Path({str(tmp_path)!r}))
        for i in range({FLUSH_EVERY}):
            ledger.append("result", {{"task_id": f"s/{{i}}"}})
        assert ledger._tail.empty
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    wal = tmp_path / "ledger.duckdb.wal"
    assert wal.exists() and wal.stat().st_size > 0
    with wal.open("r+b") as fh:
        fh.truncate(wal.stat().st_size // 2)
    with pytest.raises(LedgerIntegrityError, match="behind its checkpoint"):
        open_ledger(tmp_path)


def test_concurrent_appends_share_commits_and_keep_the_chain(tmp_path: Path) -> None:
    import threading

    ledger = open_ledger(tmp_path)
    results: list = []

    def worker(n: int) -> None:
        for i in range(25):
            results.append(ledger.append("result", {"task_id": f"s/{n}-{i}"}))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(e.seq for e in results) == list(range(1, 101))
    lines = [e.export_line() for e in ledger.iter_export()]
    # every checkpoint a batched commit published is consistent with the final log
    report = verify_export(lines, [ledger.signer.public], ledger.checkpoint_history())
    assert report.entries == 101 and report.checkpoints[-1]["size"] == 101
    ledger.close()


def test_result_bodies_stream_in_batches_in_seq_order(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.append("calibration", {"source": "estimator", "seconds": 0, "domains": {}})
    for i in range(7):
        ledger.append("result", {"task_id": f"{'ab'[i % 2]}/t{i}", "suite": "ab"[i % 2]})
    every = [b["task_id"] for b in ledger.result_bodies(batch=2)]
    assert every == [f"{'ab'[i % 2]}/t{i}" for i in range(7)]
    assert [b["task_id"] for b in ledger.result_bodies("b", batch=2)] == ["b/t1", "b/t3", "b/t5"]
    ledger.close()


def test_an_acknowledged_append_survives_the_process_being_killed(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import textwrap

    from jouled.frontier import Frontier

    # The child appends results and reports each one only after `append` returned; the
    # parent kills it mid-stream, with appends in flight and the note writer busy.
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from test_store import open_ledger
        from pathlib import Path
        ledger = open_ledger(Path({str(tmp_path)!r}))
        i = 0
        while True:
            entry = ledger.append("result", {{"task_id": f"s/{{i % 7}}", "status": "resolved",
                "resolved": True, "energy": {{"grade": {{"gross_mj": i, "marginal_mj": 1,
                "wall_ms": 5, "valid": True, "reliable": True, "source": "rapl"}}}}}})
            print(entry.seq, entry.leaf_hash.hex(), flush=True)
            i += 1
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    acked: list[tuple[int, str]] = []
    for line in child.stdout:  # waits for each acknowledgement; no timing involved
        seq, leaf = line.split()
        acked.append((int(seq), leaf))
        if len(acked) == 700:  # past a batch fill of the frontier columns
            break
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    child.stdout.close()

    reopened = open_ledger(tmp_path)  # opens: the note never leads the ledger
    assert reopened.size >= acked[-1][0] + 1
    for n, hexleaf in acked:
        assert reopened.get(n).leaf_hash.hex() == hexleaf
    bodies = [e.body for e in reopened.entries("result")]
    assert reopened.frontier().rows() == Frontier(bodies).rows()
    reopened.close()


def test_frontier_columns_are_filled_in_batches_and_at_close(tmp_path: Path) -> None:
    from jouled.ledger.store import FILL_EVERY

    ledger = open_ledger(tmp_path)
    unfilled = "SELECT count(*) FROM entries WHERE kind = 'result' AND counted_windows IS NULL"
    for i in range(FILL_EVERY + 40):
        ledger.append("result", {"task_id": f"s/{i}", "status": "unresolved"})
        assert ledger.fetch(unfilled)[0][0] <= FILL_EVERY
    assert ledger.fetch(unfilled)[0][0] > 0
    ledger.close()
    with duckdb.connect(str(tmp_path / "ledger.duckdb")) as db:
        assert db.execute(unfilled).fetchone() == (0,)


def test_an_export_is_of_one_tree_whatever_is_appended_while_it_streams(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    for i in range(3):
        ledger.append("result", {"task_id": f"s/{i}"})
    size = ledger.size
    lines = ledger.iter_export(size)
    first = next(lines)  # the export has started
    for i in range(2):
        ledger.append("result", {"task_id": f"s/later{i}"})
    exported = [first.export_line(), *(e.export_line() for e in lines)]
    history = ledger.checkpoint_history(size)
    assert len(exported) == size == 4 and parse_note(history[-1])[0].size == size
    assert verify_export(exported, [ledger.signer.public], history).entries == size
    assert len(ledger.checkpoint_history()) == len(history) + 2
    ledger.close()


REQUEST = {"solver": "gate", "run_id": "", "rollout": 0}


def test_a_journal_row_is_authenticated_and_checked_before_anything_is_signed(
    tmp_path: Path,
) -> None:
    ledger = open_ledger(tmp_path)
    ledger.journal_accept("a1", "k1", "s/t", REQUEST)
    ledger.close()
    with duckdb.connect(str(tmp_path / "ledger.duckdb")) as db:
        [(accepted, tag)] = db.execute("SELECT accepted, mac FROM journal").fetchall()
        db.execute(
            "INSERT INTO journal VALUES ('a2', NULL, 's/t', ?, ?, ?)",
            [accepted, '{"solver": "reference"}', tag],
        )
    ledger = open_ledger(tmp_path)
    review = ledger.journal_review()
    assert [p.attempt_id for p in review.pending] == ["a1"]
    assert [(r.attempt_id, r.reason) for r in review.refused] == [
        ("'a2'", "its MAC does not verify with this daemon's key: this daemon did not write it")
    ]
    ledger.journal_discard(review.refused)
    assert not ledger.journal_review().refused
    ledger.close()


def test_a_journal_from_before_its_macs_keeps_its_rows_within_bounds(tmp_path: Path) -> None:
    # The upgrade path: a data dir whose journal has no MAC column.
    ledger = open_ledger(tmp_path)
    ledger.close()
    with duckdb.connect(str(tmp_path / "ledger.duckdb")) as db:
        db.execute("ALTER TABLE journal DROP COLUMN mac")
        db.execute(
            "INSERT INTO journal VALUES ('a1', 'k1', 's/t', '2026-01-01T00:00:00.000Z', ?), "
            "('a2', NULL, 's/t', '2026-01-01T00:00:01.000Z', ?), "
            "('a3', NULL, 's/t', '2026-01-01T00:00:02.000Z', ?)",
            [json.dumps(REQUEST), '{"solver": "bell\\u0007"}', json.dumps({"solver": "x" * 5000})],
        )
    for _ in range(2):  # migrated once; the second open finds the rows the first one sealed
        ledger = open_ledger(tmp_path)
        review = ledger.journal_review()
        assert [p.attempt_id for p in review.pending] == ["a1"]
        assert [p.request for p in review.pending] == [REQUEST]
        assert [(r.attempt_id, r.reason) for r in review.refused] == [
            ("'a2'", "solver 'bell\\x07' is not a valid name"),
            ("'a3'", "its request is 5014 characters long; the limit is 1024"),
        ]
        ledger.close()


def test_a_journal_table_of_another_shape_is_set_aside(tmp_path: Path) -> None:
    open_ledger(tmp_path).close()
    with duckdb.connect(str(tmp_path / "ledger.duckdb")) as db:
        db.execute("DROP TABLE journal")
        db.execute("CREATE TABLE journal (attempt_id INTEGER, solver VARCHAR)")
        db.execute("INSERT INTO journal VALUES (1, 'reference')")
    ledger = open_ledger(tmp_path)
    review = ledger.journal_review()
    assert not review.pending and not review.refused
    ledger.journal_accept("a1", None, "s/t", REQUEST)
    assert [p.attempt_id for p in ledger.journal_pending()] == ["a1"]
    ledger.close()
    with duckdb.connect(str(tmp_path / "ledger.duckdb")) as db:
        tables = {r[0] for r in db.execute("SHOW TABLES").fetchall()}
    assert any(t.startswith("journal_unreadable_") for t in tables)


def test_a_journal_row_written_before_a_key_rotation_still_verifies(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.journal_accept("a1", None, "s/t", REQUEST)
    ledger.rotate(Signer(Ed25519PrivateKey.generate()), 2)
    assert [p.attempt_id for p in ledger.journal_pending()] == ["a1"]
    ledger.journal_accept("a2", None, "s/t", REQUEST)
    assert [p.attempt_id for p in ledger.journal_pending()] == ["a1", "a2"]
    ledger.close()
