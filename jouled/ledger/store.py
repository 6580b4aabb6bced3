"""The ledger: a DuckDB file the daemon alone writes, extended as a transparency log.

Each append signs a canonical payload chained to the previous leaf and a
checkpoint of the new tree, writes both to the tail (`jouled.ledger.tail`)
and `fdatasync`s it: the append is durable when it returns. The tail is
moved into DuckDB in batches (every `FLUSH_EVERY` entries, before a query
over all entries such as the frontier's, at close, and at once for genesis
and key rotations): the checkpoint note is replaced atomically outside
DuckDB first, then the entries, their query columns and their checkpoints
commit in one transaction, then the tail is emptied. Reads of entries add
the tail's from memory and write nothing, so they keep answering on a full
disk. Opening moves what a crash left in the tail into DuckDB before
anything else, so every acknowledged entry is there.

At open (and before each append) the stored entries are checked against the
checkpoint note: a ledger behind or beside its checkpoint was truncated or
rolled back, and is never extended. The note is at most one batch behind the
newest entry (the tail holds the newer checkpoints) and never ahead of what
DuckDB and the tail hold together.

Durability: DuckDB's defaults are kept on purpose. Every COMMIT appends to
the WAL and fdatasync()s it before returning (checked with strace: one
fdatasync per commit), so the tail is emptied only once its entries survive
a crash of the daemon or the host.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jouled.errors import (
    LedgerError,
    LedgerFullError,
    LedgerIntegrityError,
    NotFoundError,
    UsageError,
)
from jouled.frontier import Frontier
from jouled.ledger import journal, merkle, opening, seal
from jouled.ledger.checkpoint import Checkpoint, parse_note, sign_note, write_atomic
from jouled.ledger.columns import (
    ALL_NAMES,
    NAMES,
    query_values,
)
from jouled.ledger.entry import Entry, Signature, make_entry, utc_now
from jouled.ledger.journal import PendingAttempt
from jouled.ledger.schema import CHECKPOINTS_SQL, INSERT_SQL, SCHEMA
from jouled.ledger.signing import Signer, raw_public
from jouled.ledger.tail import Tail, TailRecord, tail_path

log = logging.getLogger(__name__)


def _column(entry: Entry, name: str) -> Any:
    """The query column `name` of an entry, as the store writes it."""
    return query_values(entry.kind, entry.body)[NAMES.index(name)]


def _seq_in(seqs: range) -> Callable[[Entry], bool]:
    return lambda entry: entry.seq in seqs


def _public(b64: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(base64.b64decode(b64))


# Results whose frontier columns an append leaves for the next batch fill, at most.
FILL_EVERY = 512
# Entries the tail holds before they are moved into DuckDB, at most.
FLUSH_EVERY = 512
# Kinds moved into DuckDB as soon as they are appended: what opening reads first.
FLUSHED_AT_ONCE = ("genesis", "key_rotation")


@dataclass
class _Pending:
    kind: str
    body: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    entry: Entry | None = None
    error: BaseException | None = None


class Ledger:
    def __init__(
        self,
        path: Path,
        signer: Signer,
        *,
        origin: str,
        checkpoint_path: Path,
        genesis: dict[str, Any],
        retired: Signer | None = None,
    ) -> None:
        self.path = path
        self.signer = signer
        self.retired = retired  # the previous key, co-signing checkpoints during an overlap
        self.origin = origin
        self.checkpoint_path = checkpoint_path
        self._lock = threading.RLock()
        self._queue_lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._committing = False
        try:
            self._db = duckdb.connect(str(path))
        except duckdb.Error as err:
            raise LedgerError(
                f"cannot open the ledger {path}: {err}",
                hint="is another jouled serving this data dir (DuckDB allows one writer), or is "
                "the file damaged?",
            ) from err
        self._tree = merkle.MerkleTree()
        self._note_stat: tuple[int, int] | None = None
        self._note: str | None = None  # the newest signed checkpoint, which the tail may hold
        self._note_time: float | None = None
        self._unflushed: list[TailRecord] = []
        self._filled_to = 0
        self._journal_macs: dict[str, bytes] = {}
        # How opening vouched for the query columns: "sealed" or "derived" from the payloads.
        self.columns_checked = ""
        try:
            self._tail = Tail(tail_path(path))
        except LedgerError:
            self._db.close()
            raise
        try:
            self._db.execute(SCHEMA)
            self._replay_tail()
            self._filled_to = opening.migrate(self._db, self.signer)
            self.columns_checked = opening.load(self._db, self._tree, self.path, self.signer)
        except duckdb.Error as err:
            self._close_files()
            raise LedgerIntegrityError(
                f"the ledger {path} is damaged and cannot be read: {err}",
                hint="the file was truncated or corrupted; restore the data dir from a backup",
            ) from err
        except LedgerError:
            self._close_files()
            raise
        try:
            self._adopt_history()
            self._check_against_note()
        except LedgerError:
            self._close_files()
            raise
        if not self._tree.size:
            self.append("genesis", {**genesis, **self._key_fields(), "origin": origin})

    # -- opening and integrity -----------------------------------------------------------

    def _key_fields(self) -> dict[str, Any]:
        return {
            "public_key": base64.b64encode(raw_public(self.signer.public)).decode("ascii"),
            "keyid": self.signer.keyid,
        }

    def _close_files(self) -> None:
        self._tail.close()
        self._db.close()

    def _replay_tail(self) -> None:
        """Move the entries a crash left in the tail into DuckDB, checked as a chain
        (`opening.tail_to_replay`), once their newest checkpoint verifies with this
        daemon's key."""
        new, count = opening.tail_to_replay(self._db, self._tail.path, self.path)
        if new:
            keys = [self.signer.public] + ([self.retired.public] if self.retired else [])
            opening.verify_tail_note(new[-1], keys, self._tail.path)
            if opening.note_file_behind(new, self.checkpoint_path, fresh_ledger=count == 0):
                self._write_note(new)
            self._commit(new)
            log.info("moved %d entries from %s into the ledger", len(new), self._tail.path)
        self._tail.clear()

    def _adopt_history(self) -> None:
        """Take the origin from genesis and check the key file is the ledger's current key."""
        self._note_keys = [self.signer.public]
        self._overlap_until = -1
        if not self._tree.size:
            return
        genesis = self.get(0).body
        self.origin = str(genesis.get("origin", self.origin))
        expected = str(genesis.get("keyid", ""))
        for rotation in self.entries("key_rotation"):
            body = rotation.body
            self._note_keys.append(_public(body["old_public_key"]))
            expected = str(body["new_keyid"])
            self._overlap_until = rotation.seq + int(body.get("overlap_entries", 0))
        if expected != self.signer.keyid:
            raise LedgerIntegrityError(
                f"the signing key (key id {self.signer.keyid[:16]}) is not the ledger's current "
                f"key ({expected[:16]})",
                hint="restore the data dir's jouled.key; a new key must be introduced by "
                "`jouled keys rotate`, never by replacing the file",
            )

    def _write_note(self, records: Sequence[TailRecord]) -> None:
        """Replace the note file with the newest checkpoint the records carry."""
        note = next((r.note for r in reversed(records) if r.note is not None), None)
        if note is not None:
            write_atomic(self.checkpoint_path, note)
            st = self.checkpoint_path.stat()
            self._note_stat = (st.st_mtime_ns, st.st_size)

    def _check_against_note(self) -> None:
        """Refuse a ledger that is behind, or forked from, its own checkpoint file."""
        try:
            st = self.checkpoint_path.stat()
        except FileNotFoundError:
            if self._tree.size:
                raise LedgerIntegrityError(
                    f"{self.checkpoint_path} is missing but the ledger has {self._tree.size} "
                    "entries",
                    hint="restore checkpoint.note from a backup; the daemon will not extend a "
                    "ledger it cannot check",
                ) from None
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._note_stat and self._note is not None:
            return
        text = self.checkpoint_path.read_bytes()
        opening.check_note(
            text, self.checkpoint_path, self.origin, self._note_keys, self._tree, self.path
        )
        self._note_stat = stamp
        if self._note is None:  # opening; later the newest note is the one last signed
            self._note, self._note_time = text.decode("utf-8"), st.st_mtime

    # -- appending -----------------------------------------------------------------------

    def append(self, kind: str, body: dict[str, Any]) -> Entry:
        """Append one entry, committed together with whatever else is waiting.

        Concurrent callers queue their entries; whichever holds the lock next
        signs and commits the whole queue in one transaction (group commit),
        so the fsyncs of a durable append are shared instead of serialised.
        """
        slot = _Pending(kind, body)
        with self._queue_lock:
            self._queue.append(slot)
            lead = not self._committing
            self._committing = True
        # The leader commits batches until the queue is empty; everyone else
        # waits for their own entry. Entries that arrive during a commit make
        # the next batch, so the fsyncs are shared by all of them.
        while lead:
            with self._queue_lock:
                batch, self._queue = self._queue, []
                if not batch:
                    self._committing = False
                    break
            try:
                entries = self.append_many([(p.kind, p.body) for p in batch])
            except BaseException as err:
                for p in batch:
                    p.error = err
                    p.done.set()
            else:
                for p, entry in zip(batch, entries, strict=True):
                    p.entry = entry
                    p.done.set()
        slot.done.wait()
        if slot.error is not None:
            raise slot.error
        assert slot.entry is not None
        return slot.entry

    def append_many(self, items: Sequence[tuple[str, dict[str, Any]]]) -> list[Entry]:
        """Sign entries and one checkpoint after them, and make them durable in the tail."""
        if not items:
            return []
        with self._lock:
            self._check_against_note()
            entries: list[Entry] = []
            size = self._tree.size
            prev = self._tree.leaves[-1] if self._tree.size else b""
            try:
                for kind, body in items:
                    entry = make_entry(self._tree.size, kind, prev, body, [self.signer])
                    entries.append(entry)
                    prev = entry.leaf_hash
                    self._tree.append(entry.leaf_hash)
                cp = Checkpoint(origin=self.origin, size=self._tree.size, root=self._tree.root())
                note = sign_note(cp, self._note_signers(cp.size))
                records = [TailRecord(e) for e in entries[:-1]]
                records.append(TailRecord(entries[-1], note, utc_now()))
                self._tail.write(records)
            except BaseException:
                self._tree.truncate(size)
                raise
            self._unflushed += records
            self._note, self._note_time = note, time.time()
            if len(self._unflushed) >= FLUSH_EVERY or any(
                kind in FLUSHED_AT_ONCE for kind, _ in items
            ):
                self._flush()
            return entries

    def _flush(self) -> None:
        """Move the tail into DuckDB: the note file first, then one transaction, then empty it.

        A crash anywhere leaves the entries in the tail for the next open, and
        the note file never ahead of what DuckDB and the tail hold.
        """
        if not self._unflushed:
            return
        self._write_note(self._unflushed)
        self._commit(self._unflushed)
        self._unflushed = []
        self._tail.clear()

    def _commit(self, records: Sequence[TailRecord]) -> None:
        """Insert the records' entries and checkpoints in one transaction."""
        fill = self._tree.size - self._filled_to >= FILL_EVERY
        checkpoints = []
        for record in records:
            if record.note is not None:
                cp, _ = parse_note(record.note)
                checkpoints.append(
                    {
                        "size": cp.size,
                        "root": cp.root.hex(),
                        "note": record.note,
                        "time": record.noted,
                    }
                )
        try:
            self._db.execute("BEGIN TRANSACTION")
            self._insert([r.entry for r in records])
            if checkpoints:  # one JSON text, as `_insert` passes entries
                self._db.execute(CHECKPOINTS_SQL, [json.dumps(checkpoints, ensure_ascii=False)])
            if fill:
                opening.fill_frontier_columns(self._db, self._filled_to)
            self._db.execute("COMMIT")
        except duckdb.Error as err:
            self._db.execute("ROLLBACK")
            error = LedgerFullError if "No space left" in str(err) else LedgerError
            raise error(
                f"cannot move entries {records[0].entry.seq}..{records[-1].entry.seq} into "
                f"{self.path}: {err}",
                hint="they are safe in the ledger's tail and are moved at the next open",
            ) from err
        if fill:
            self._filled_to = self._tree.size

    def _note_signers(self, size: int) -> list[tuple[str, Signer]]:
        signers = [(self.origin, self.signer)]
        if self.retired is not None and size - 1 <= self._overlap_until:
            signers.append((self.origin, self.retired))
        return signers

    def rotate(self, new: Signer, overlap_entries: int) -> Entry:
        """Hand signing to `new`: a key_rotation entry signed by the current key names it.

        Checkpoints stay signed by both keys for `overlap_entries` entries, so
        an auditor who pinned only the old key can follow the switch.
        """
        if overlap_entries < 0:
            raise UsageError("the overlap must be zero or more entries")
        with self._lock:
            old = self.signer
            body = {
                "old_keyid": old.keyid,
                "old_public_key": base64.b64encode(raw_public(old.public)).decode("ascii"),
                "new_keyid": new.keyid,
                "new_public_key": base64.b64encode(raw_public(new.public)).decode("ascii"),
                "overlap_entries": overlap_entries,
            }
            self._overlap_until = self.size + overlap_entries
            # The rotation entry is signed by the key handing over, and its
            # checkpoint by both keys.
            self.retired = new
            entry = self.append_many([("key_rotation", body)])[0]  # we hold the lock
            self.signer, self.retired = new, old
            self._note_keys.append(new.public)
            return entry

    def _insert(self, entries: Sequence[Entry]) -> None:
        """One INSERT of the whole batch, passed as one JSON text.

        DuckDB binds a statement parameter at ~14 µs, so a multi-row VALUES of
        512 entries and their 18 columns took ~120 ms; parsing one JSON text
        of the same rows takes ~15 ms. The payload travels as its UTF-8 text
        and is stored as those bytes again (`encode`).
        """
        rows = []
        for entry in entries:
            doc = entry.doc
            row = {
                "seq": entry.seq,
                "kind": doc["kind"],
                "time": doc["time"],
                "payload": entry.payload.decode("utf-8"),
                "signatures": json.dumps(
                    [{"keyid": s.keyid, "sig": s.sig} for s in entry.signatures]
                ),
                "leaf_hash": entry.leaf_hash.hex(),
            }
            row.update(zip(NAMES, query_values(doc["kind"], doc["body"]), strict=True))
            rows.append(row)
        self._db.execute(INSERT_SQL, [json.dumps(rows, ensure_ascii=False)])

    # -- the attempt journal -------------------------------------------------------------

    def _journal_keys(self) -> list[bytes]:
        """The journal's MAC keys: the current signer's, then the retired one's."""
        signers = [self.signer] + ([self.retired] if self.retired is not None else [])
        for signer in signers:
            if signer.keyid not in self._journal_macs:
                self._journal_macs[signer.keyid] = journal.mac_key(signer)
        return [self._journal_macs[s.keyid] for s in signers]

    def journal_accept(
        self, attempt_id: str, idempotency_key: str | None, task_id: str, request: dict[str, Any]
    ) -> None:
        """Record an attempt before it runs, so a crash leaves a trace to abort."""
        accepted, text = utc_now(), json.dumps(request)
        tag = journal.mac(
            self._journal_keys()[0], attempt_id, idempotency_key, task_id, accepted, text
        )
        with self._lock:
            self._db.execute(
                f"INSERT INTO journal ({', '.join(journal.COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)",
                [attempt_id, idempotency_key, task_id, accepted, text, tag],
            )

    def journal_drop(self, attempt_id: str) -> None:
        """Forget an accepted attempt that was rejected before anything ran."""
        with self._lock:
            self._db.execute("DELETE FROM journal WHERE attempt_id = ?", [attempt_id])

    def journal_review(self) -> journal.Review:
        """Unfinished attempts to abort, and journal rows refused (`jouled.ledger.journal`)."""
        keys = self._journal_keys()
        out = journal.Review()
        with self._lock:
            # An attempt is finished exactly when an entry names it, so commits
            # never have to touch the journal.
            finished = {_column(r.entry, "attempt_id") for r in self._unflushed}
            cursor = self._db.execute(journal.PENDING_SQL)
            while rows := cursor.fetchmany(1024):
                part = journal.review(rows, keys, finished)
                out.pending += part.pending
                out.refused += part.refused
        return out

    def journal_pending(self) -> list[PendingAttempt]:
        return self.journal_review().pending

    def journal_discard(self, refused: Sequence[journal.RefusedRow]) -> None:
        """Remove refused rows from the journal, once they are reported."""
        with self._lock:
            self._db.execute(
                "DELETE FROM journal WHERE rowid IN (SELECT unnest(?::BIGINT[]))",
                [[r.rowid for r in refused]],
            )

    # -- reading -------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Entries appended: taken under the lock, so never mid-way through an append."""
        with self._lock:
            return self._tree.size

    def root(self, size: int | None = None) -> bytes:
        with self._lock:
            return self._tree.root(size)

    def _entries(
        self, where: str, params: Sequence[Any], keep: Callable[[Entry], bool]
    ) -> list[Entry]:
        """Entries matching `where` in DuckDB, then those in the tail that `keep` accepts.

        Reads never move the tail into DuckDB: they keep working when the data
        dir's disk is full. `keep` must say in Python what `where` says in SQL.
        """
        with self._lock:
            rows = self._db.execute(
                f"SELECT seq, payload, signatures, leaf_hash FROM entries {where} ORDER BY seq",
                list(params),
            ).fetchall()
            pending = [r.entry for r in self._unflushed if keep(r.entry)]
        return [
            Entry(
                seq=seq,
                payload=bytes(payload),
                signatures=tuple(Signature(s["keyid"], s["sig"]) for s in json.loads(sigs)),
                leaf_hash=bytes.fromhex(leaf),
            )
            for seq, payload, sigs, leaf in rows
        ] + pending

    def get(self, seq: int) -> Entry:
        found = self._entries("WHERE seq = ?", [seq], lambda e: e.seq == seq)
        if not found:
            raise NotFoundError(
                f"no ledger entry {seq}; the ledger holds entries 0..{self.size - 1}"
            )
        return found[0]

    def entries(self, kind: str | None = None) -> list[Entry]:
        if kind is None:
            return self._entries("", [], lambda e: True)
        return self._entries("WHERE kind = ?", [kind], lambda e: e.kind == kind)

    def iter_export(self, size: int | None = None, batch: int = 10_000) -> Iterator[Entry]:
        """The first `size` entries (all, by default) in seq order, read in batches so an
        export streams."""
        end = self.size if size is None else size
        for start in range(0, end, batch):
            chunk = range(start, min(start + batch, end))
            yield from self._entries(
                "WHERE seq >= ? AND seq < ?", [chunk.start, chunk.stop], _seq_in(chunk)
            )

    def result_for_key(self, idempotency_key: str, agent: str | None = None) -> Entry | None:
        """The result signed with this key; with `agent`, only one that credential submitted
        (a key belongs to the credential that used it)."""
        found = self._entries(
            "WHERE kind = 'result' AND idempotency_key = ?",
            [idempotency_key],
            lambda e: e.kind == "result" and _column(e, "idempotency_key") == idempotency_key,
        )
        if agent is not None:
            found = [e for e in found if str(e.body.get("agent") or "") == agent]
        return found[0] if found else None

    def baseline_for(self, task_digest: str) -> Entry | None:
        found = self._entries(
            "WHERE kind = 'baseline' AND task_digest = ?",
            [task_digest],
            lambda e: e.kind == "baseline" and _column(e, "task_digest") == task_digest,
        )
        return found[-1] if found else None

    def latest(self, kind: str) -> Entry | None:
        with self._lock:
            for record in reversed(self._unflushed):
                if record.entry.kind == kind:
                    return record.entry
            row = self._db.execute("SELECT max(seq) FROM entries WHERE kind = ?", [kind]).fetchone()
        return None if row is None or row[0] is None else self.get(int(row[0]))

    def result_bodies(self, suite: str = "", batch: int = 20_000) -> Iterator[dict[str, Any]]:
        """Every `result` body in seq order, read in batches so none is held for long."""
        where = "kind = 'result' AND suite = ?" if suite else "kind = 'result'"
        start = 0
        while True:
            with self._lock:
                rows = self._db.execute(
                    f"SELECT seq, payload FROM entries WHERE {where} AND seq >= ? "
                    "ORDER BY seq LIMIT ?",
                    [*([suite] if suite else []), start, batch],
                ).fetchall()
                if not rows:  # then the tail's, which follow every stored entry
                    pending = [
                        r.entry.body
                        for r in self._unflushed
                        if r.entry.seq >= start
                        and r.entry.kind == "result"
                        and (not suite or _column(r.entry, "suite") == suite)
                    ]
            if not rows:
                yield from pending
                return
            for _, payload in rows:
                yield json.loads(bytes(payload))["body"]
            start = rows[-1][0] + 1

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query over the ledger's tables (`entries`: see columns.py).

        The frontier columns of recent results may still be NULL (appends leave
        them for a batch); `frontier` fills them first.
        """
        with self._lock:
            self._flush()
            return self._db.execute(sql, list(params)).fetchall()

    def frontier(self, ops: Iterable[Mapping[str, Any]] = ()) -> Frontier:
        """Running frontier totals of every result, from the query columns (no payload
        is parsed); `ops` are the `op` entries' bodies."""
        with self._lock:
            self._flush()
            if self._filled_to < self._tree.size:
                opening.fill_frontier_columns(self._db, self._filled_to)
                self._filled_to = self._tree.size
        return Frontier.from_columns(self.fetch, ops=ops)

    # -- checkpoints and proofs ----------------------------------------------------------

    def checkpoint_note(self) -> str:
        """The newest signed checkpoint (the note file may be up to a batch behind it)."""
        with self._lock:
            if self._note is None:
                raise LedgerError("the ledger has no checkpoint yet")
            return self._note

    def checkpoint_age_s(self) -> float | None:
        """Seconds since the newest checkpoint was signed (None before the first)."""
        return None if self._note_time is None else max(0.0, time.time() - self._note_time)

    def checkpoint_history(self, size: int | None = None) -> list[str]:
        """Every checkpoint published, oldest first; up to a tree of `size` when given."""
        with self._lock:
            end = self._tree.size if size is None else size
            rows = self._db.execute(
                "SELECT note FROM checkpoints WHERE size <= ? ORDER BY size", [end]
            ).fetchall()
            pending = [r.note for r in self._unflushed if r.note is not None and r.entry.seq < end]
        return [r[0] for r in rows] + pending

    def checkpoint(self) -> Checkpoint:
        cp, _ = parse_note(self.checkpoint_note())
        return cp

    def inclusion_proof(self, seq: int, tree_size: int = 0) -> dict[str, Any]:
        with self._lock:
            size = tree_size or self._tree.size
            if not 0 <= seq < size <= self._tree.size:
                raise UsageError(
                    f"no inclusion proof for entry {seq} in a tree of {size}: the ledger holds "
                    f"{self._tree.size} entries",
                    hint="pick --seq below the tree size",
                )
            hashes = self._tree.inclusion_proof(seq, size)
            root = self.root(size)
        return {
            "seq": seq,
            "leaf_hash": self._tree.leaves[seq].hex(),
            "tree_size": size,
            "root": root.hex(),
            "hashes": [h.hex() for h in hashes],
        }

    def consistency_proof(self, old_size: int, new_size: int = 0) -> dict[str, Any]:
        with self._lock:
            new_size = new_size or self._tree.size
            if not 0 < old_size <= new_size <= self._tree.size:
                raise UsageError(
                    f"no consistency proof from {old_size} to {new_size}: the ledger holds "
                    f"{self._tree.size} entries",
                    hint="sizes must satisfy 0 < old <= new <= current size",
                )
            hashes = self._tree.consistency_proof(old_size, new_size)
            return {
                "old_size": old_size,
                "new_size": new_size,
                "old_root": self.root(old_size).hex(),
                "new_root": self.root(new_size).hex(),
                "hashes": [h.hex() for h in hashes],
            }

    def close(self) -> None:
        """Move the tail into DuckDB, fill the frontier columns and seal them, then close."""
        with self._lock:
            try:
                self._flush()
                opening.fill_frontier_columns(self._db, self._filled_to)
                self._seal_columns()
            finally:
                self._close_files()

    def _seal_columns(self) -> None:
        try:
            rows, row_digest = seal.digest(self._db, ALL_NAMES)
            seal.write(seal.seal_path(self.path), self.signer, rows, row_digest)
        except (LedgerError, duckdb.Error) as err:
            log.warning(
                "could not seal the ledger's columns (%s): the next start checks them all", err
            )
