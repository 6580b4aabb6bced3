"""Offline verification of a ledger export with nothing but pinned public keys.

Checks, entry by entry: the export line parses; `seq` is continuous from 0;
the leaf hash is SHA-256(0x00 || payload); the payload's `seq` and `prev`
agree with its position; a key pinned for that entry signed it, and every
such signature verifies. Then the Merkle root over the leaves is checked
against every checkpoint given (a checkpoint larger than the export means
the export was truncated). The first failure is raised, naming the entry.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jouled.errors import VerificationError
from jouled.ledger import merkle
from jouled.ledger.checkpoint import Checkpoint, parse_note, verify_note
from jouled.ledger.entry import Entry, Signature, record_payload_type
from jouled.ledger.signing import PAYLOAD_TYPE, raw_public, verify_signature_raw
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


class _BadLine(Exception):
    """An export line that is not an entry; the caller knows which line it was."""


class _Line(msgspec.Struct):
    """An export line's fields, decoded by msgspec: the payload straight from base64.

    Decoding with a schema skips what verification never reads and turns the
    base64 payload into bytes in the same C pass; JSON's stdlib parser and
    base64 decoder cost several times as much per line. `bytes` accepts what
    `base64.b64decode(..., validate=True)` does: the standard alphabet with
    its padding, nothing else.
    """

    seq: Any
    payload: bytes
    leaf_hash: Any
    signatures: Any
    payloadType: Any = None
    payload_type: Any = None


_LINE = msgspec.json.Decoder(_Line)


class _Sig(msgspec.Struct):
    keyid: str
    sig: str


class _FastLine(msgspec.Struct):
    """`_Line` as the short way reads it: signatures typed, so msgspec checks their shape."""

    seq: int
    payload: bytes
    leaf_hash: str
    signatures: list[_Sig]
    payloadType: Any = None
    payload_type: Any = None


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """A payload's top level after its body: exactly these four fields."""

    kind: Any
    prev: Any
    seq: Any
    time: Any


_FAST_LINE = msgspec.json.Decoder(_FastLine)
_FAST_ENVELOPE = msgspec.json.Decoder(_Envelope)


def _entry(line: str | bytes) -> Entry:
    try:
        record = _LINE.decode(line)
        payload_type = record_payload_type(
            {"payloadType": record.payloadType, "payload_type": record.payload_type}
        )
        if payload_type != PAYLOAD_TYPE:
            raise VerificationError(
                f"payload type {payload_type!r} is not {PAYLOAD_TYPE}",
                seq=record.seq if isinstance(record.seq, int) else None,
            )
        return Entry(
            seq=int(record.seq),
            payload=record.payload,
            signatures=tuple(
                Signature(str(sig["keyid"]), str(sig["sig"])) for sig in record.signatures
            ),
            leaf_hash=bytes.fromhex(record.leaf_hash),
        )
    except VerificationError:
        raise
    except (msgspec.MsgspecError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise _BadLine(str(err)) from err


_ENVELOPE = frozenset({"kind", "prev", "seq", "time"})
_TAIL = b'},"kind":"'
_LEAF_PREFIX = hashlib.sha256(b"\x00")  # copied per leaf: no copy of the payload


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
                return msgspec.structs.asdict(_FAST_ENVELOPE.decode(b"{" + payload[cut + 2 :]))
            except msgspec.MsgspecError:
                pass
    return json.loads(payload)


@dataclass(frozen=True)
class _Record:
    """What one export line says, checked as far as it can be without its neighbours.

    Records can be made in worker processes over ranges of an export file;
    `_Scan` then checks them in order, so the first failure is the same
    whichever process found it.
    """

    lineno: int
    line_error: VerificationError | None = None
    bad_line: str = ""  # why the line is not an entry at all
    seq: int = -1
    leaf: bytes = b""
    leaf_ok: bool = True
    payload_error: str = ""
    envelope: dict[str, Any] | None = None
    origin: str = ""  # from the genesis entry's body
    keyids: tuple[str, ...] = ()
    bad_signature: str = ""  # a pinned key whose signature does not verify


def _record(line: str | bytes, lineno: int, trust: Trust, signatures: bool) -> _Record:
    try:
        entry = _entry(line)
    except VerificationError as err:
        return _Record(lineno, line_error=err)
    except _BadLine as err:
        return _Record(lineno, bad_line=str(err))
    leaf_ok = merkle.leaf_hash(entry.payload) == entry.leaf_hash
    keyids = tuple(s.keyid for s in entry.signatures)
    if not leaf_ok:
        return _Record(lineno, seq=entry.seq, leaf=entry.leaf_hash, leaf_ok=False, keyids=keyids)
    try:
        envelope = _envelope(entry.payload)
    except ValueError as err:
        return _Record(
            lineno,
            seq=entry.seq,
            leaf=entry.leaf_hash,
            payload_error=f"payload is not JSON: {err}",
            keyids=keyids,
        )
    if not isinstance(envelope, dict):
        return _Record(
            lineno,
            seq=entry.seq,
            leaf=entry.leaf_hash,
            payload_error="payload is not a JSON object",
            keyids=keyids,
        )
    origin = ""
    if envelope.get("kind") == "genesis":
        body = json.loads(entry.payload).get("body")
        origin = str(body.get("origin", "")) if isinstance(body, dict) else ""
    bad = ""
    if signatures:
        for sig in entry.signatures:
            key = trust.raw_key_for(sig.keyid, entry.seq)
            if key is not None and not verify_signature_raw(key, entry.payload, sig.sig):
                bad = sig.keyid
                break
    envelope = {k: envelope.get(k) for k in _ENVELOPE}
    return _Record(
        lineno,
        seq=entry.seq,
        leaf=entry.leaf_hash,
        envelope=envelope,
        origin=origin,
        keyids=keyids,
        bad_signature=bad,
    )


class _Scan:
    """The ordered checks: continuity, chain, trusted signers, in export order."""

    def __init__(
        self,
        trust: Trust,
        report: Report,
        *,
        offset: int = 0,
        prev: bytes = b"",
    ) -> None:
        self.trust = trust
        self.report = report
        self.offset = offset  # seq of the first record this scan checks
        # Leaves are collected in order; the tree is built from them in one pass at the end.
        self.leaves: list[bytes] = []
        self.tree = merkle.MerkleTree()  # the leaves so far, grown by `grow`
        self.prev = prev
        self._prev_hex = prev.hex()

    def grow(self) -> merkle.MerkleTree:
        """The Merkle tree of every leaf taken so far."""
        self.tree.extend(self.leaves[self.tree.size :])
        return self.tree

    def _add(self, leaf: bytes) -> None:
        self.leaves.append(leaf)
        self.prev = leaf
        self._prev_hex = leaf.hex()

    def fast(self, line: str | bytes | memoryview, signatures: bool) -> bool:
        """Check the next line the short way, when it is a well-formed entry that passes.

        False, with nothing changed, for anything else: `take` then checks the
        line step by step and says what is wrong, so a failure reads the same
        whichever way the line went. The checks are `take`'s, inlined: the per-call
        overhead of the long way costs as much as the hashing.
        """
        try:
            rec = _FAST_LINE.decode(line)
        except msgspec.MsgspecError:
            return False
        new_type, old_type = rec.payloadType, rec.payload_type
        if new_type is None:
            new_type = old_type
        elif old_type is not None and old_type != new_type:
            return False
        seq, stored = rec.seq, rec.leaf_hash
        if new_type != PAYLOAD_TYPE or type(seq) is not int:
            return False
        if seq != self.offset + len(self.leaves):
            return False
        payload = rec.payload
        hasher = _LEAF_PREFIX.copy()
        hasher.update(payload)
        leaf = hasher.digest()
        if leaf.hex() != stored or not payload.startswith(b'{"body":'):
            return False
        cut = payload.rfind(_TAIL)
        if cut <= 0:
            return False
        try:
            env = _FAST_ENVELOPE.decode(b"{" + payload[cut + 2 :])
        except msgspec.MsgspecError:
            return False
        kind = env.kind
        if env.seq != seq or env.prev != self._prev_hex or type(kind) is not str:
            return False
        if kind == "genesis":
            return False  # its origin is read the long way
        sigs = rec.signatures
        if not sigs:
            return False
        trusted = False
        for sig in sigs:
            raw = self.trust.raw_key_for(sig.keyid, seq)
            if raw is None:
                continue
            trusted = True
            if signatures and not verify_signature_raw(raw, payload, sig.sig):
                return False
        if not trusted:
            return False
        kinds = self.report.kinds
        kinds[kind] = kinds.get(kind, 0) + 1
        self.leaves.append(leaf)
        self.prev, self._prev_hex = leaf, stored
        return True

    def take(self, rec: _Record, lines_before: int = 0) -> None:
        """Check the next record; `lines_before` places a range's line numbers in the file."""
        if rec.bad_line:
            raise VerificationError(
                f"export line {lines_before + rec.lineno} is not a ledger entry: {rec.bad_line}"
            )
        if rec.line_error is not None:
            raise rec.line_error
        seq = self.offset + len(self.leaves)
        if rec.seq != seq:
            if rec.seq > seq:
                gap = rec.seq - seq
                raise VerificationError(
                    f"expected entry {seq} next, found {rec.seq}: "
                    f"{gap} entr{'y' if gap == 1 else 'ies'} missing",
                    seq=seq,
                )
            raise VerificationError(
                f"entry {rec.seq} appears again or out of order at position {seq}", seq=seq
            )
        if not rec.leaf_ok:
            raise VerificationError(
                "leaf hash does not match the payload (edited payload)", seq=seq
            )
        if rec.payload_error or rec.envelope is None:
            raise VerificationError(rec.payload_error or "payload is unreadable", seq=seq)
        env = rec.envelope
        if env.get("seq") != seq:
            raise VerificationError(
                f"payload says seq {env.get('seq')}, export says {seq}", seq=seq
            )
        if env.get("prev") != self.prev.hex():
            raise VerificationError(
                "prev does not match the previous entry's leaf hash (entries reordered, "
                "removed or replaced)",
                seq=seq,
            )
        self._check_signers(rec, seq)
        if rec.bad_signature:
            raise VerificationError(
                f"signature by key {rec.bad_signature[:16]} does not verify (payload or "
                "signature edited)",
                seq=seq,
            )
        kind = str(env.get("kind"))
        if kind == "genesis" and not self.report.origin:
            self.report.origin = rec.origin
        self.report.kinds[kind] = self.report.kinds.get(kind, 0) + 1
        self._add(rec.leaf)

    def extend(self, part: _Part, lines_before: int) -> None:
        """Take a range a worker checked: its first record here, the rest as the worker found."""
        if part.head is None:
            return
        self.take(part.head, lines_before)
        if part.leaves:
            self.leaves.extend(part.leaves)
            self.prev = part.leaves[-1]
            self._prev_hex = self.prev.hex()
        for kind, n in part.kinds.items():
            self.report.kinds[kind] = self.report.kinds.get(kind, 0) + n
        if part.failing is not None:
            # The state is now the worker's just before its failure: the same error.
            self.take(part.failing, lines_before)
            raise VerificationError("a worker's failure did not reproduce", seq=part.failing.seq)

    def _check_signers(self, rec: _Record, seq: int) -> None:
        if any(self.trust.key_for(k, seq) for k in rec.keyids):
            return
        pinned_elsewhere = [k for k in rec.keyids if k in self.trust.by_id]
        if pinned_elsewhere:
            raise VerificationError(
                f"signed only by key {self.trust.ranges(pinned_elsewhere[0])}, which is not "
                "trusted for this entry (revoked or rotated out)",
                seq=seq,
            )
        ids = ", ".join(k[:16] for k in rec.keyids) or "none"
        raise VerificationError(
            f"no signature by a pinned key (signed by {ids})",
            seq=seq,
            hint="pin the daemon's public key (jouled.pub) with --pubkey, or list every key "
            "with its entry range in a --trust file",
        )


# -- scanning a file on several processes ------------------------------------------------

CHUNK_BYTES = 32 << 20
_TrustSpec = list[tuple[bytes, int, int | None]]


def _trust_spec(trust: Trust) -> _TrustSpec:
    return [(raw_public(p.key), p.from_seq, p.to_seq) for p in trust.pinned]


@dataclass
class _Part:
    """A range of the export checked by a worker.

    Only its first record depends on what came before, so it is left for the
    main process; the rest are checked here against it, up to the first
    failing record, which the main process checks again in place.
    """

    lines: int = 0
    head: _Record | None = None
    leaves: list[bytes] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)
    failing: _Record | None = None


def _scan_range(path: str, start: int, end: int, spec: _TrustSpec, signatures: bool) -> _Part:
    """Check the lines that start in [start, end); line numbers are local to the range."""
    trust = Trust(
        PinnedKey(Ed25519PublicKey.from_public_bytes(raw), lo, hi) for raw, lo, hi in spec
    )
    part = _Part()
    scan: _Scan | None = None
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(end - start)  # whole lines: ranges start at line starts
    # Lines are views into the range, not copies; only one read the long way is copied.
    view, pos, size = memoryview(data), 0, len(data)
    while pos < size:
        cut = data.find(b"\n", pos)
        if cut < 0:
            cut = size
        line, pos = view[pos:cut], cut + 1
        part.lines += 1
        if part.failing is not None or (scan is not None and scan.fast(line, signatures)):
            continue
        text = bytes(line)
        if not text.strip():
            continue
        rec = _record(text, part.lines, trust, signatures)
        if scan is None:
            part.head = rec
            scan = _Scan(trust, Report(), offset=rec.seq + 1, prev=rec.leaf)
            continue
        try:
            scan.take(rec)
        except VerificationError:
            part.failing = rec
    if scan is not None:
        part.leaves, part.kinds = scan.leaves, scan.report.kinds
    return part


def _ranges(path: Path, pieces: int) -> list[tuple[int, int]]:
    """Byte ranges that each begin at the start of a line."""
    size = path.stat().st_size
    cuts = [0]
    with path.open("rb") as fh:
        for i in range(1, pieces):
            fh.seek(max(size * i // pieces, cuts[-1]))
            if fh.tell() > 0:
                fh.readline()  # finish the line the cut fell in
            cuts.append(min(fh.tell(), size))
    cuts.append(size)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def verify_export(
    lines: Iterable[str],
    pubkeys: Sequence[Ed25519PublicKey | PinnedKey],
    checkpoints: Sequence[str] = (),
    *,
    signatures: bool = True,
    parquet: Path | None = None,
    history: Sequence[str] = (),
) -> Report:
    """Verify an export's lines in this process; raises VerificationError at the first problem.

    `checkpoints` (an auditor's saved notes, the daemon's latest) are each
    signature-checked and must be prefixes of the export. `history` (the
    export's own checkpoint history, one note per commit) is checked for
    roots: every note must describe a prefix of the export; signatures are
    checked on the newest note and on any that disagrees, which is then
    either a forged note or a proven fork. `signatures=False` checks
    structure, chain and Merkle root only (the checkpoints' own signatures are
    still checked).
    """
    trust = Trust(pubkeys)
    scan = _Scan(trust, Report(keyids=trust.keyids))
    for lineno, line in enumerate(lines, 1):
        if not scan.fast(line, signatures) and line.strip():
            scan.take(_record(line, lineno, trust, signatures))
    return _finish(scan, checkpoints, history, parquet)


def verify_file(
    path: Path,
    pubkeys: Sequence[Ed25519PublicKey | PinnedKey],
    checkpoints: Sequence[str] = (),
    *,
    signatures: bool = True,
    workers: int = 1,
    parquet: Path | None = None,
    history: Sequence[str] = (),
) -> Report:
    """`verify_export` over a file, parsing (and checking signatures) on `workers` processes."""
    if workers <= 1:
        with path.open(encoding="utf-8") as fh:
            return verify_export(
                fh, pubkeys, checkpoints, signatures=signatures, parquet=parquet, history=history
            )
    trust = Trust(pubkeys)
    scan = _Scan(trust, Report(keyids=trust.keyids))
    pieces = max(workers * 2, path.stat().st_size // CHUNK_BYTES + 1)
    ranges = _ranges(path, pieces)
    spec = _trust_spec(trust)
    with ProcessPoolExecutor(workers) as pool:
        futures = [pool.submit(_scan_range, str(path), a, b, spec, signatures) for a, b in ranges]
        base = 0
        try:
            for future in futures:
                part = future.result()
                scan.extend(part, base)
                base += part.lines
                scan.grow()  # while the workers check the ranges after this one
        finally:
            for future in futures:
                future.cancel()
    return _finish(scan, checkpoints, history, parquet)


def _finish(
    scan: _Scan, checkpoints: Sequence[str], history: Sequence[str], parquet: Path | None
) -> Report:
    report, trust = scan.report, scan.trust
    tree = scan.grow()
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
        report.parquet_rows = check_parquet(parquet, tree.leaves)
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
