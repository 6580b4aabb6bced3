"""What opening a ledger checks and repairs before anything is appended.

A crash's tail is checked as a chain before it is moved into DuckDB; older
tables get their frontier columns and the journal its MAC column; every
stored payload is hashed again into the Merkle tree while a second cursor
checks every query column against the payloads (or against the seal of the
last clean stop). `jouled.ledger.store` runs these in that order.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

import duckdb
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jouled.errors import LedgerIntegrityError, VerificationError
from jouled.ledger import journal, merkle, seal
from jouled.ledger.checkpoint import parse_note, verify_note
from jouled.ledger.columns import (
    ALL_NAMES,
    FRONTIER_COLUMNS,
    FRONTIER_NAMES,
    derived_select,
    mismatch_sql,
)
from jouled.ledger.schema import SCHEMA
from jouled.ledger.signing import Signer
from jouled.ledger.tail import TailRecord, read_records

log = logging.getLogger("jouled.ledger.store")

RESTORE = "restore the data dir from a backup; never extend a damaged ledger"
# Payloads hashed per query when opening: each batch is read as its payloads alone.
REHASH_BATCH = 65_536

T = TypeVar("T")
A = TypeVar("A")


class _Background(Generic[T]):
    """`fn(arg)` on its own thread; `result()` waits for it and re-raises what it raised."""

    def __init__(self, fn: Callable[[A], T], arg: A) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, arg), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[Any], T], arg: Any) -> None:
        try:
            self._value = fn(arg)
        except BaseException as err:
            self._error = err

    def result(self) -> T | None:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def tail_to_replay(
    db: duckdb.DuckDBPyConnection, tail: Path, path: Path
) -> tuple[list[TailRecord], int]:
    """The records a crash left in the tail that DuckDB lacks, checked as a chain, and
    how many entries DuckDB holds.

    Records DuckDB already holds (a crash after the commit, before the tail
    was emptied) must match what it holds; the rest must continue the chain
    from its last entry, and the newest checkpoint among them must verify
    with this daemon's key. A batch is acknowledged once written whole, its
    last record carrying its checkpoint: an incomplete last line, and the
    records of a batch whose checkpoint never made it, are dropped.
    """
    records, torn = read_records(tail)
    unsealed = 0
    while records and records[-1].note is None:
        records.pop()
        unsealed += 1
    if torn or unsealed:
        log.warning(
            "dropped the end of %s (%d whole records and %d bytes of an incomplete one): "
            "a crash interrupted an append that was never acknowledged",
            tail,
            unsealed,
            torn,
        )
    if not records:
        return [], 0
    row = db.execute("SELECT count(*) FROM entries").fetchone()
    count = int(row[0]) if row else 0
    first = records[0].entry.seq
    stored = dict(
        db.execute(
            "SELECT seq, leaf_hash FROM entries WHERE seq >= ?", [max(first - 1, 0)]
        ).fetchall()
    )
    if not 0 <= first <= count:
        raise LedgerIntegrityError(
            f"{tail} starts at entry {first} but {path} holds {count}",
            hint="the tail belongs to another copy of the ledger; restore the data dir "
            "from a backup",
        )
    prev = str(stored.get(first - 1, "")) if first else ""
    new: list[TailRecord] = []
    for n, record in enumerate(records):
        entry = record.entry
        where = f"{tail}: entry {entry.seq}"
        if entry.seq != first + n:
            raise LedgerIntegrityError(f"{where} follows entry {first + n - 1}", hint=RESTORE)
        if entry.seq < count:
            if stored.get(entry.seq) != entry.leaf_hash.hex():
                raise LedgerIntegrityError(f"{where} differs from the ledger's", hint=RESTORE)
        elif (
            merkle.leaf_hash(entry.payload) != entry.leaf_hash
            or entry.doc.get("seq") != entry.seq
            or entry.doc.get("prev") != prev
        ):
            raise LedgerIntegrityError(
                f"{where} does not continue the chain (edited, or not this ledger's)",
                hint=RESTORE,
            )
        else:
            new.append(record)
        prev = entry.leaf_hash.hex()
    return new, count


def verify_tail_note(record: TailRecord, keys: list[Ed25519PublicKey], tail: Path) -> None:
    """The tail's newest checkpoint must be this daemon's and commit to the records."""
    assert record.note is not None
    try:
        cp, _ = parse_note(record.note)
        verify_note(record.note, [(cp.origin, k) for k in keys])
    except VerificationError as err:
        raise LedgerIntegrityError(
            f"{tail}: the checkpoint after entry {record.entry.seq} does not "
            f"verify with this daemon's key: {err.message}",
            hint=RESTORE,
        ) from err
    if cp.size != record.entry.seq + 1:
        raise LedgerIntegrityError(
            f"{tail}: the checkpoint after entry {record.entry.seq} is of a tree of {cp.size}",
            hint=RESTORE,
        )


def note_file_behind(
    records: Sequence[TailRecord], checkpoint_path: Path, *, fresh_ledger: bool
) -> bool:
    """Whether the tail's records carry a newer checkpoint than the note file, at open.

    A note file that does not read is left alone, for the check to report.
    """
    sizes = [parse_note(r.note)[0].size for r in records if r.note is not None]
    try:
        current, _ = parse_note(checkpoint_path.read_bytes())
    except FileNotFoundError:
        return fresh_ledger and bool(sizes)
    except (OSError, VerificationError):
        return False
    return bool(sizes) and max(sizes) > current.size


def check_note(
    text: bytes,
    checkpoint_path: Path,
    origin: str,
    keys: Sequence[Ed25519PublicKey],
    tree: merkle.MerkleTree,
    path: Path,
) -> None:
    """Refuse a ledger (`tree`, stored at `path`) behind, or forked from, the note `text`."""
    try:
        cp = verify_note(text, [(origin, k) for k in keys])
    except VerificationError as err:
        raise LedgerIntegrityError(
            f"{checkpoint_path} does not verify with this daemon's key: {err.message}",
            hint="the checkpoint was replaced, or the key changed without a key_rotation "
            "entry; restore the data dir from a backup",
        ) from err
    size = tree.size
    if cp.size > size:
        raise LedgerIntegrityError(
            f"ledger behind its checkpoint: {checkpoint_path} commits to {cp.size} "
            f"entries but {path} holds {size}",
            hint="the ledger was truncated or replaced by an older copy (or lost its WAL); "
            "restore it from a backup - the daemon refuses to append",
        )
    if tree.root(cp.size) != cp.root:
        raise LedgerIntegrityError(
            f"ledger forked from its checkpoint: the first {cp.size} entries of {path} "
            f"do not hash to the root in {checkpoint_path}",
            hint="entries were edited, reordered or replaced; restore from a backup",
        )


def migrate(db: duckdb.DuckDBPyConnection, signer: Signer) -> int:
    """Give a ledger written before some frontier columns those columns, once; how
    many entries it holds (each with its frontier columns filled).

    Every result's frontier columns are then derived again from the signed
    payloads, by the same SQL that checks them, in one transaction: a
    crash leaves the old table, migrated again at the next open.
    """
    have = {r[0] for r in db.execute("DESCRIBE entries").fetchall()}
    missing = [(n, t) for n, t in FRONTIER_COLUMNS if n not in have]
    if missing:
        db.execute("BEGIN TRANSACTION")
        try:
            for name, sql_type in missing:
                db.execute(f"ALTER TABLE entries ADD COLUMN {name} {sql_type}")
            fill_frontier_columns(db, 0, every=True)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    else:
        fill_frontier_columns(db, 0)  # what a crash left unfilled
    row = db.execute("SELECT count(*) FROM entries").fetchone()
    migrate_journal(db, signer)
    return int(row[0]) if row else 0


def migrate_journal(db: duckdb.DuckDBPyConnection, signer: Signer) -> None:
    """Give a journal written before its rows were authenticated a MAC column, once.

    Rows already there meet the bounds of a request or stay without a MAC,
    which refuses them: the journal had no authentication to tell them
    apart by. A journal table of another shape is set aside, never read.
    """
    described = db.execute("DESCRIBE journal").fetchall()
    have = [str(r[0]) for r in described]
    if any(r[1] != "VARCHAR" for r in described):
        have = [f"{r[0]} {r[1]}" for r in described]
    if have == list(journal.COLUMNS):
        return
    if have != list(journal.COLUMNS[:-1]):
        aside = "journal_unreadable_" + datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
        log.warning(
            "the ledger's journal table has columns %s, not %s: set aside as %s, and "
            "nothing is signed from it",
            ", ".join(have),
            ", ".join(journal.COLUMNS),
            aside,
        )
        db.execute(f"ALTER TABLE journal RENAME TO {aside}")
        db.execute(SCHEMA)
        return
    key = journal.mac_key(signer)
    db.execute("BEGIN TRANSACTION")
    try:
        db.execute("ALTER TABLE journal ADD COLUMN mac VARCHAR")
        adopted = []
        for row in db.execute(journal.ALL_SQL).fetchall():
            checked = journal.check(row, None)
            if isinstance(checked, journal.PendingAttempt):
                fields = row[1:-2:2]  # every field but the MAC, whole: within its bound
                adopted.append([int(row[0]), journal.mac(key, *fields)])
        if adopted:
            db.execute(
                "UPDATE journal SET mac = a.mac FROM (SELECT unnest(?::BIGINT[]) AS id, "
                "unnest(?::VARCHAR[]) AS mac) a WHERE journal.rowid = a.id",
                [[a[0] for a in adopted], [a[1] for a in adopted]],
            )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def fill_frontier_columns(
    db: duckdb.DuckDBPyConnection, start: int, *, every: bool = False
) -> None:
    """Derive the frontier columns of results from `start` on that do not have them yet
    (with `every`, of all of them: a migration's new columns).

    Appends store a result without them (each column costs its share of a
    single-row INSERT, more here than the rest of an append); they are
    filled from the payloads in batches, by the SQL that checks them.
    """
    unfilled = f"kind = 'result' AND seq >= {int(start)}"
    if not every:
        unfilled += " AND counted_windows IS NULL"
    derived = derived_select(f"(SELECT * FROM entries WHERE {unfilled})", "decode(payload)", "seq")
    assignments = ", ".join(f"{n} = d.{n}" for n in FRONTIER_NAMES)
    db.execute(f"UPDATE entries SET {assignments} FROM ({derived}) d WHERE entries.seq = d.seq")


def load(db: duckdb.DuckDBPyConnection, tree: merkle.MerkleTree, path: Path, signer: Signer) -> str:
    """Rehash every stored payload into the tree, and check every query column; how
    the columns were vouched for ("sealed" or "derived").

    The column check is one DuckDB query over the payloads, or over the
    columns alone where the last clean stop sealed them; it runs on a
    second cursor while this thread hashes (DuckDB works without the GIL),
    so the two passes share the start-up time instead of adding up.
    """
    count, last = db.execute("SELECT count(*), max(seq) FROM entries").fetchone() or (
        0,
        0,
    )
    if count and last != count - 1:
        gap = db.execute(
            "SELECT expected, seq FROM (SELECT seq, row_number() OVER (ORDER BY seq) - 1 "
            "AS expected FROM entries) WHERE seq <> expected ORDER BY seq LIMIT 1"
        ).fetchone()
        assert gap is not None
        raise LedgerIntegrityError(
            f"ledger {path}: entry {gap[0]} is missing (next stored is {gap[1]})",
            hint="restore the data dir from a backup; never extend a gapped ledger",
        )
    sealed = seal.take(seal.seal_path(path))
    check = _Background(lambda cursor: check_columns(cursor, sealed, signer), db.cursor())
    try:
        rehash(db, tree, count, path)
    finally:
        result = check.result()
    assert result is not None
    checked, bad = result
    if bad is not None:
        seq, cols = bad
        raise LedgerIntegrityError(
            f"ledger {path}: entry {seq} column {cols.split(',')[0]!r} disagrees with "
            "its signed payload (the column was edited)",
            hint="restore the data dir from a backup",
        )
    return checked


def rehash(db: duckdb.DuckDBPyConnection, tree: merkle.MerkleTree, count: int, path: Path) -> None:
    """Hash every payload into the tree, in seq order, checking it against its stored hash.

    A batch of seqs is read as its payloads alone (in the order they were stored,
    which appends keep in seq order) and its stored hashes as one string in seq
    order; only a batch whose hashes differ is read again row by row, sorted, to
    find the edited payload or to hash one stored out of order.
    """
    sha256 = hashlib.sha256
    for start in range(0, count, REHASH_BATCH):
        bounds = [start, start + REHASH_BATCH]
        payloads = db.execute(
            "SELECT payload FROM entries WHERE seq >= ? AND seq < ?", bounds
        ).fetchall()
        stored = db.execute(
            "SELECT string_agg(leaf_hash, '' ORDER BY seq) FROM entries WHERE seq >= ? AND seq < ?",
            bounds,
        ).fetchone()
        leaves = [sha256(b"\x00" + payload).digest() for (payload,) in payloads]
        if stored is None or b"".join(leaves).hex() != stored[0]:
            leaves = _rehash_sorted(db, path, start, bounds)
        tree.extend(leaves)
    assert tree.size == count


def _rehash_sorted(
    db: duckdb.DuckDBPyConnection, path: Path, start: int, bounds: list[int]
) -> list[bytes]:
    leaves: list[bytes] = []
    rows = db.execute(
        "SELECT payload, leaf_hash FROM entries WHERE seq >= ? AND seq < ? ORDER BY seq",
        bounds,
    ).fetchall()
    for i, (payload, stored) in enumerate(rows):
        leaf = merkle.leaf_hash(payload)
        if leaf.hex() != stored:
            raise LedgerIntegrityError(
                f"ledger {path}: entry {start + i} does not match its leaf hash (its "
                "payload was edited)",
                hint="restore the data dir from a backup",
            )
        leaves.append(leaf)
    return leaves


def check_columns(
    cursor: duckdb.DuckDBPyConnection, sealed: dict[str, object] | None, signer: Signer
) -> tuple[str, tuple[int, str] | None]:
    """How the columns were checked ("sealed" or "derived"), and (seq, columns) of the
    first row whose columns disagree with its payload, or None.

    The seal of the last clean stop, where it matches every row, vouches for
    the columns without a payload parsed (`jouled.ledger.seal`); otherwise
    each is derived again from its payload.
    """
    try:
        if sealed is not None:
            rows, row_digest = seal.digest(cursor, ALL_NAMES)
            if seal.matches(sealed, signer, rows, row_digest):
                log.info("the columns of %d entries are as sealed at the last clean stop", rows)
                return "sealed", None
            log.warning("the column seal does not match the ledger: checking every column")
        return "derived", column_mismatch(cursor)
    finally:
        cursor.close()


def column_mismatch(cursor: duckdb.DuckDBPyConnection) -> tuple[int, str] | None:
    row = cursor.execute(mismatch_sql("entries", "decode(payload)")).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))
