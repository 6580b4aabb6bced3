"""Signed checkpoints: C2SP tlog-checkpoint bodies in C2SP signed notes.

A checkpoint commits the daemon to (size, root) of its Merkle tree. It is
written to `checkpoint.note` outside DuckDB, so a ledger that lost its tail
shows as behind its own signed checkpoint.

The note format is the one Go's golang.org/x/mod/sumdb/note and the
transparency-dev tooling read, so third-party witnesses and monitors can check
a jouled log without jouled code:

    <origin>
    <size>
    <base64 root>

    — <key name> <base64(4-byte key hash || Ed25519 signature over the text)>

Parsing is strict: a checkpoint text has one accepted spelling (decimal size
without leading zeros, canonical base64, no extension lines), so the bytes a
signature covers are exactly what `Checkpoint.body()` gives back.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jouled.errors import NO_SPACE, LedgerError, LedgerFullError, UsageError, VerificationError
from jouled.ledger.merkle import HASH_SIZE
from jouled.ledger.signing import Signer, raw_public

ALG_ED25519 = 0x01
KEY_HASH_SIZE = 4
ED25519_SIGNATURE_SIZE = 64

# The signed-note spec asks verifiers to bound the work a note can cause and
# to accept at least 16 signatures; these bounds match Go's note package.
MAX_SIGNATURES = 100
MAX_NOTE_BYTES = 1 << 20

_SIG_PREFIX = "— "  # em dash U+2014, then a space
_SIZE_RE = re.compile(r"0|[1-9][0-9]*")
_MAX_SIZE = 2**64 - 1  # tree sizes are uint64 in every other implementation
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes

    def __post_init__(self) -> None:
        if not self.origin or "\n" in self.origin or _CONTROL.search(self.origin):
            raise UsageError(
                f"checkpoint origin {self.origin!r} must be one non-empty line "
                "without control characters"
            )
        if isinstance(self.size, bool) or not isinstance(self.size, int):
            raise UsageError(f"checkpoint size must be an int, not {type(self.size).__name__}")
        if not 0 <= self.size <= _MAX_SIZE:
            raise UsageError(f"checkpoint size {self.size} is out of range")
        if not isinstance(self.root, bytes) or len(self.root) != HASH_SIZE:
            raise UsageError(f"checkpoint root must be {HASH_SIZE} bytes")

    def body(self) -> bytes:
        """The note text: what the signatures cover."""
        root = base64.b64encode(self.root).decode("ascii")
        return f"{self.origin}\n{self.size}\n{root}\n".encode()


@dataclass(frozen=True)
class NoteSignature:
    name: str
    key_hash: bytes  # 4 bytes
    signature: bytes  # the signature proper, without the key hash

    def label(self) -> str:
        """`name+hash`, how Go's tooling names a key in its messages."""
        return f"{self.name}+{self.key_hash.hex()}"


def _valid_key_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def _check_key_name(name: str) -> None:
    if not _valid_key_name(name) or _CONTROL.search(name):
        raise UsageError(
            f"key name {name!r} must be non-empty, without spaces, '+' or control characters"
        )


def key_hash(name: str, public_key: Ed25519PublicKey) -> bytes:
    """The signed-note key ID: SHA-256(name || 0x0A || 0x01 || raw key)[:4]."""
    material = name.encode() + b"\n" + bytes([ALG_ED25519]) + raw_public(public_key)
    return hashlib.sha256(material).digest()[:KEY_HASH_SIZE]


def vkey(name: str, public_key: Ed25519PublicKey) -> str:
    """The verifier key string Go's note tooling takes: name+hash+base64(0x01||key)."""
    _check_key_name(name)
    material = base64.b64encode(bytes([ALG_ED25519]) + raw_public(public_key)).decode("ascii")
    return f"{name}+{key_hash(name, public_key).hex()}+{material}"


def sign_note(checkpoint: Checkpoint, signers: Sequence[tuple[str, Signer]]) -> str:
    """The checkpoint as a note signed by every (key name, signer) given.

    More than one signer is for key rotation: a note signed by the old and the
    new key verifies for auditors that pin either.
    """
    if not signers:
        raise UsageError("a checkpoint needs at least one signer")
    body = checkpoint.body()
    lines: list[str] = []
    seen: set[tuple[str, bytes]] = set()
    for name, signer in signers:
        _check_key_name(name)
        kh = key_hash(name, signer.public)
        if (name, kh) in seen:
            raise UsageError(f"key {name}+{kh.hex()} is listed twice")
        seen.add((name, kh))
        blob = base64.b64encode(kh + signer.sign_raw(body)).decode("ascii")
        lines.append(f"{_SIG_PREFIX}{name} {blob}\n")
    return body.decode() + "\n" + "".join(lines)


# -- parsing -----------------------------------------------------------------------------


def _fail(message: str) -> VerificationError:
    return VerificationError(f"malformed checkpoint note: {message}")


def _as_text(note: str | bytes) -> str:
    if isinstance(note, str):
        try:
            # Lone surrogates have no UTF-8 encoding, so no signer produced them.
            note = note.encode("utf-8")
        except UnicodeEncodeError as err:
            raise _fail(f"not valid UTF-8 at character {err.start}") from err
    if len(note) > MAX_NOTE_BYTES:
        raise _fail(f"it is longer than {MAX_NOTE_BYTES} bytes")
    try:
        return note.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _fail(f"not valid UTF-8 at byte {err.start}") from err


def _strict_b64(value: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as err:
        raise _fail(f"{what} is not valid base64") from err
    # Only the canonical encoding is accepted, so each value has one spelling.
    if base64.b64encode(raw).decode("ascii") != value:
        raise _fail(f"{what} is not canonical base64")
    return raw


def _split_note(text: str) -> tuple[str, list[str]]:
    """(note text including its final newline, signature lines)."""
    control = _CONTROL.search(text)
    if control:
        raise _fail(f"control character {control.group()!r} at offset {control.start()}")
    split = text.rfind("\n\n")
    if split < 0:
        raise _fail("no blank line separates the text from the signatures")
    body, sigs = text[: split + 1], text[split + 2 :]
    if not sigs:
        raise _fail("no signature lines after the blank line")
    if not sigs.endswith("\n"):
        raise _fail("the last signature line does not end with a newline")
    lines = sigs[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise _fail(f"more than {MAX_SIGNATURES} signatures")
    return body, lines


def _parse_signature(line: str, number: int) -> NoteSignature:
    where = f"signature line {number}"
    if not line.startswith(_SIG_PREFIX):
        raise _fail(f"{where} does not start with an em dash (U+2014) and a space")
    name, sep, b64 = line[len(_SIG_PREFIX) :].partition(" ")
    if not sep or not _valid_key_name(name):
        raise _fail(f"{where} has no valid key name followed by a space")
    raw = _strict_b64(b64, f"the signature on {where}")
    if len(raw) <= KEY_HASH_SIZE:
        raise _fail(f"the signature on {where} is only {len(raw)} bytes")
    return NoteSignature(name, raw[:KEY_HASH_SIZE], raw[KEY_HASH_SIZE:])


def _parse_body(body: str) -> Checkpoint:
    lines = body[:-1].split("\n")
    if len(lines) < 3:
        raise _fail(f"the text has {len(lines)} lines; a checkpoint needs origin, size and root")
    if len(lines) > 3:
        # tlog-checkpoint allows opaque extension lines; jouled never writes
        # them, and accepting signed text the Checkpoint cannot carry would
        # let it differ from what was signed without anyone noticing.
        raise _fail("extension lines after the root hash are not supported")
    origin, size_text, root_text = lines
    if not origin:
        raise _fail("the origin line is empty")
    if not _SIZE_RE.fullmatch(size_text):
        raise _fail(f"size {size_text!r} is not a decimal number without leading zeros")
    size = int(size_text)
    if size > _MAX_SIZE:
        raise _fail(f"size {size_text} does not fit in 64 bits")
    root = _strict_b64(root_text, "the root hash")
    if len(root) != HASH_SIZE:
        raise _fail(f"the root hash is {len(root)} bytes, not {HASH_SIZE}")
    return Checkpoint(origin, size, root)


def _parse(note: str | bytes) -> tuple[bytes, Checkpoint, list[NoteSignature]]:
    body, lines = _split_note(_as_text(note))
    checkpoint = _parse_body(body)
    signatures = [_parse_signature(line, i) for i, line in enumerate(lines, start=1)]
    return body.encode(), checkpoint, signatures


def parse_note(text: str | bytes) -> tuple[Checkpoint, list[NoteSignature]]:
    """The checkpoint and signatures of a note, verifying nothing.

    Bytes are decoded as UTF-8 here: read `checkpoint.note` with
    `read_bytes()`, since text mode would quietly turn CRLF into LF.
    """
    _, checkpoint, signatures = _parse(text)
    return checkpoint, signatures


# -- verification ------------------------------------------------------------------------


def _trusted_keys(
    trusted: Mapping[str, Ed25519PublicKey] | Sequence[tuple[str, Ed25519PublicKey]],
) -> dict[tuple[str, bytes], Ed25519PublicKey]:
    pairs: Iterable[tuple[str, Ed25519PublicKey]] = (
        trusted.items() if isinstance(trusted, Mapping) else trusted
    )
    keys: dict[tuple[str, bytes], Ed25519PublicKey] = {}
    for name, key in pairs:
        _check_key_name(name)
        ident = (name, key_hash(name, key))
        known = keys.get(ident)
        if known is not None and raw_public(known) != raw_public(key):
            # Two keys that share a name and key hash cannot be told apart by
            # a signature line; trusting either would be guessing.
            raise UsageError(f"trusted keys {name}+{ident[1].hex()} collide")
        keys[ident] = key
    if not keys:
        raise UsageError("no trusted keys to verify the checkpoint with")
    return keys


def _verifies(key: Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
    if len(signature) != ED25519_SIGNATURE_SIZE:
        return False
    try:
        key.verify(signature, message)
    except InvalidSignature:
        return False
    return True


def verify_note(
    text: str | bytes,
    trusted: Mapping[str, Ed25519PublicKey] | Sequence[tuple[str, Ed25519PublicKey]],
) -> Checkpoint:
    """The checkpoint, once a signature by a trusted (key name, key) verifies.

    Signatures by keys not in `trusted` are ignored, as the spec requires (they
    may be witnesses' cosignatures or a rotated-out key). A signature by a
    trusted key that fails to verify rejects the whole note, as the spec
    recommends: that key's holder did not sign this text.
    """
    keys = _trusted_keys(trusted)
    message, checkpoint, signatures = _parse(text)
    verified = False
    for sig in signatures:
        key = keys.get((sig.name, sig.key_hash))
        if key is None:
            continue
        if not _verifies(key, sig.signature, message):
            raise VerificationError(
                f"checkpoint signature by trusted key {sig.label()} does not verify",
                hint="the note was altered after signing, or signed by another key",
            )
        verified = True
    if not verified:
        signed_by = ", ".join(sig.label() for sig in signatures)
        wanted = ", ".join(f"{name}+{kh.hex()}" for name, kh in keys)
        raise VerificationError(
            f"checkpoint has no signature by a trusted key: signed by {signed_by}; "
            f"trusted: {wanted}",
            hint="pin the daemon's current public key, or check the note's origin",
        )
    return checkpoint


# -- storage -----------------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so a crash leaves the old file or the new, whole.

    The rename is durable only once the directory is synced too.
    """
    data = text.encode("utf-8")
    directory = path.parent
    try:
        fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        if err.errno in NO_SPACE:
            raise LedgerFullError(f"the data dir ran out of space: cannot write {path}") from err
        raise LedgerError(f"cannot write {path}: {err.strerror}") from err
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            # mkstemp creates 0600; a checkpoint is public, for auditors to read.
            os.fchmod(fh.fileno(), 0o644)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(directory)
    except OSError as err:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if err.errno in NO_SPACE:
            raise LedgerFullError(
                f"the data dir ran out of space: cannot write {path}",
                hint="free space on that file system",
            ) from err
        raise LedgerError(f"cannot write {path}: {err.strerror}") from err
