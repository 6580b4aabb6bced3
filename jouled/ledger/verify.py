"""Offline verification of a ledger export with nothing but pinned public keys.

Checks, entry by entry: the export line parses; `seq` is continuous from 0;
the leaf hash is SHA-256(0x00 || payload); the payload's `seq` and `prev`
agree with its position; at least one DSSE signature
by a pinned key verifies. Then the Merkle root over the leaves is checked
against every checkpoint given (a checkpoint larger than the export means
the export was truncated). The first failure is raised, naming the entry.
"""

from __future__ import annotations

import binascii
import json
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jouled.errors import VerificationError
from jouled.ledger import merkle
from jouled.ledger.checkpoint import Checkpoint, parse_note, verify_note
from jouled.ledger.entry import Entry, parse_export_record
from jouled.ledger.signing import PAYLOAD_TYPE, raw_public, verify_signature
from jouled.ledger.snapshot import check_parquet
from jouled.ledger.trust import PinnedKey, Trust


@dataclass
class Report:
    entries: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    root: str = ""
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    keyids: list[str] = field(default_factory=list)
    origin: str = ""
    parquet_rows: int | None = None
    history: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "entries": self.entries,
            "kinds": dict(sorted(self.kinds.items())),
            "root": self.root,
            "checkpoints": self.checkpoints,
            "keyids": self.keyids,
            "origin": self.origin,
            "parquet_rows": self.parquet_rows,
            "history_checkpoints": self.history,
        }


def _entry(line: str, lineno: int) -> Entry:
    try:
        record = json.loads(line)
        if record.get("payload_type") != PAYLOAD_TYPE:
            raise VerificationError(
                f"payload type {record.get('payload_type')!r} is not {PAYLOAD_TYPE}",
                seq=record.get("seq"),
            )
        return parse_export_record(record)
    except VerificationError:
        raise
    except (ValueError, KeyError, TypeError, binascii.Error) as err:
        raise VerificationError(f"export line {lineno} is not a ledger entry: {err}") from err


_ENVELOPE = frozenset({"kind", "prev", "seq", "time"})
_TAIL = b'},"kind":"'


def _envelope(payload: bytes) -> Any:
    """The payload's top-level fields, without parsing the body when it can be skipped.

    A canonical payload sorts `body` first, so everything after the body's
    closing brace is the envelope. Parsing only that tail yields the same
    values as parsing the whole payload: nothing inside the body can reach
    the top level, and the last `},"kind":"` is the envelope's (no JSON
    string can hold an unescaped quote). Anything else is parsed whole.
    """
    if payload.startswith(b'{"body":'):
        cut = payload.rfind(_TAIL)
        if cut > 0:
            try:
                tail = json.loads(b"{" + payload[cut + 2 :])
            except ValueError:
                tail = None
            if isinstance(tail, dict) and tail.keys() == _ENVELOPE:
                return tail
    return json.loads(payload)


def _check_entry(entry: Entry, expected_seq: int, prev: bytes, trust: Trust) -> dict[str, Any]:
    seq = expected_seq
    if entry.seq != expected_seq:
        if entry.seq > expected_seq:
            raise VerificationError(
                f"expected entry {expected_seq} next, found {entry.seq}: "
                f"{entry.seq - expected_seq} entr{'y' if entry.seq - expected_seq == 1 else 'ies'} "
                "missing",
                seq=expected_seq,
            )
        raise VerificationError(
            f"entry {entry.seq} appears again or out of order at position {expected_seq}",
            seq=expected_seq,
        )
    if merkle.leaf_hash(entry.payload) != entry.leaf_hash:
        raise VerificationError("leaf hash does not match the payload (edited payload)", seq=seq)
    try:
        doc = _envelope(entry.payload)
    except ValueError as err:
        raise VerificationError(f"payload is not JSON: {err}", seq=seq) from err
    if not isinstance(doc, dict):
        raise VerificationError("payload is not a JSON object", seq=seq)
    if doc.get("seq") != seq:
        raise VerificationError(f"payload says seq {doc.get('seq')}, export says {seq}", seq=seq)
    if doc.get("prev") != prev.hex():
        raise VerificationError(
            "prev does not match the previous entry's leaf hash (entries reordered, removed "
            "or replaced)",
            seq=seq,
        )
    if not any(trust.key_for(s.keyid, seq) for s in entry.signatures):
        pinned_elsewhere = [s.keyid for s in entry.signatures if s.keyid in trust.by_id]
        if pinned_elsewhere:
            raise VerificationError(
                f"signed only by key {trust.ranges(pinned_elsewhere[0])}, which is not trusted "
                "for this entry (revoked or rotated out)",
                seq=seq,
            )
        ids = ", ".join(s.keyid[:16] for s in entry.signatures) or "none"
        raise VerificationError(
            f"no signature by a pinned key (signed by {ids})",
            seq=seq,
            hint="pin the daemon's public key (jouled.pub) with --pubkey, or list every key "
            "with its entry range in a --trust file",
        )
    return doc


SIGNATURE_CHUNK = 4096


def _verify_chunk(
    raw_keys: dict[str, bytes], items: list[tuple[int, str, bytes, str]]
) -> tuple[int, str] | None:
    """Verify (seq, keyid, payload, sig) items in a worker; the first failure, if any."""
    keys = {k: Ed25519PublicKey.from_public_bytes(v) for k, v in raw_keys.items()}
    for seq, keyid, payload, sig in items:
        if not verify_signature(keys[keyid], payload, sig):
            return seq, keyid
    return None


class _Signatures:
    """Checks signatures in a process pool, a bounded number of chunks in flight."""

    def __init__(self, trust: Trust, workers: int) -> None:
        self.trust = trust
        self.raw = {p.keyid: raw_public(p.key) for p in trust.pinned}
        self.workers = workers
        self.pool = ProcessPoolExecutor(workers) if workers > 1 else None
        self.pending: deque[Future[tuple[int, str] | None]] = deque()
        self.chunk: list[tuple[int, str, bytes, str]] = []

    def add(self, entry: Entry) -> None:
        for s in entry.signatures:
            if self.trust.key_for(s.keyid, entry.seq) is not None:
                self.chunk.append((entry.seq, s.keyid, entry.payload, s.sig))
        if len(self.chunk) >= SIGNATURE_CHUNK:
            self._flush()

    def _flush(self) -> None:
        chunk, self.chunk = self.chunk, []
        if not chunk:
            return
        if self.pool is None:
            _raise(_verify_chunk(self.raw, chunk))
            return
        self.pending.append(self.pool.submit(_verify_chunk, self.raw, chunk))
        while len(self.pending) > 2 * self.workers:
            _raise(self.pending.popleft().result())

    def finish(self) -> None:
        try:
            self._flush()
            while self.pending:
                _raise(self.pending.popleft().result())
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)


def _raise(failure: tuple[int, str] | None) -> None:
    if failure is not None:
        seq, keyid = failure
        raise VerificationError(
            f"signature by key {keyid[:16]} does not verify (payload or signature edited)",
            seq=seq,
        )


def verify_export(
    lines: Iterable[str],
    pubkeys: Sequence[Ed25519PublicKey | PinnedKey],
    checkpoints: Sequence[str] = (),
    *,
    signatures: bool = True,
    workers: int = 1,
    parquet: Path | None = None,
    history: Sequence[str] = (),
) -> Report:
    """Verify an export; raises VerificationError at the first problem.

    `checkpoints` (an auditor's saved notes, the daemon's latest) are each
    signature-checked and must be prefixes of the export. `history` (the
    export's own checkpoint history, one note per commit) is checked for
    roots: every note must describe a prefix of the export; signatures are
    checked on the newest note and on any that disagrees, which is then
    either a forged note or a proven fork. `signatures=False` checks
    structure, chain and Merkle root only (the checkpoints' own signatures are
    still checked). `workers` > 1 verifies entry signatures on that many
    processes.
    """
    trust = Trust(pubkeys)
    report = Report(keyids=trust.keyids)
    tree = merkle.MerkleTree()
    leaves = tree.leaves
    prev = b""
    checker = _Signatures(trust, workers) if signatures else None
    try:
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            entry = _entry(line, lineno)
            try:
                doc = _check_entry(entry, len(leaves), prev, trust)
            except VerificationError:
                # Signatures are checked behind the scan: an earlier entry's bad
                # signature is the first failure, so report it instead.
                if checker is not None:
                    pending, checker = checker, None
                    pending.finish()
                raise
            if checker is not None:
                checker.add(entry)
            kind = str(doc.get("kind"))
            if kind == "genesis" and not report.origin:
                body = json.loads(entry.payload).get("body", {})
                report.origin = str(body.get("origin", "")) if isinstance(body, dict) else ""
            report.kinds[kind] = report.kinds.get(kind, 0) + 1
            tree.append(entry.leaf_hash)
            prev = entry.leaf_hash
        if checker is not None:
            checker.finish()
            checker = None
    finally:
        if checker is not None and checker.pool is not None:
            checker.pool.shutdown(cancel_futures=True)
    report.entries = tree.size
    report.root = tree.root().hex()
    for i, note in enumerate(history):
        unverified, _ = parse_note(note)
        if i == len(history) - 1 or _disagrees(unverified, tree):
            _verified_checkpoint(note, trust, report.origin)
            check_against(unverified, tree)
    for note in checkpoints:
        cp = _verified_checkpoint(note, trust, report.origin)
        check_against(cp, tree)
        report.checkpoints.append({"size": cp.size, "root": cp.root.hex()})
    report.history = len(history)
    if parquet is not None:
        report.parquet_rows = check_parquet(parquet, leaves)
    return report


def _verified_checkpoint(note: str, trust: Trust, origin: str) -> Checkpoint:
    """A checkpoint signed by a key pinned for its last entry."""
    unverified, _ = parse_note(note)
    if origin and unverified.origin != origin:
        raise VerificationError(
            f"checkpoint origin {unverified.origin!r} is not this ledger's {origin!r}"
        )
    last = max(unverified.size - 1, 0)
    keys = [p.key for p in trust.pinned if p.covers(last)]
    if not keys:
        raise VerificationError(
            f"no pinned key is trusted for entry {last}, the checkpoint's "
            f"last entry (tree size {unverified.size})"
        )
    return verify_note(note, [(unverified.origin, k) for k in keys])


def _disagrees(cp: Checkpoint, tree: merkle.MerkleTree) -> bool:
    return cp.size > tree.size or tree.root(cp.size) != cp.root


def check_against(cp: Checkpoint, tree: merkle.MerkleTree) -> None:
    if cp.size > tree.size:
        raise VerificationError(
            f"checkpoint commits to {cp.size} entries but the export holds {tree.size}: "
            "the export was truncated (entries deleted from its tail)"
        )
    if tree.root(cp.size) != cp.root:
        raise VerificationError(
            f"the first {cp.size} entries do not hash to the checkpoint's root: entries were "
            "edited, reordered or removed, or the history forked"
        )


def split_notes(text: str) -> list[str]:
    """Checkpoint notes from a history file: one JSON object {"note": ...} a line."""
    notes = []
    for line in text.splitlines():
        if line.strip():
            notes.append(str(json.loads(line)["note"]))
    return notes
