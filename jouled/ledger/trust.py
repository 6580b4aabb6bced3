"""Pinned keys: which public keys an auditor trusts, and for which entries.

A verifier never trusts a key because the ledger names it: a `key_rotation`
entry says which key comes next, but the auditor pins each key out of band,
with the range of entries it may sign. The trust file is JSON:

    {"keys": [{"public_key": "<PEM or base64 raw 32 bytes>", "from_seq": 0, "to_seq": 41},
              {"public_key": "...", "from_seq": 42}]}

`to_seq` absent means open-ended. A key used outside its range is revoked
for those entries: its signature there does not count.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jouled.errors import UsageError
from jouled.ledger.signing import key_id, load_public_key, raw_public


@dataclass(frozen=True)
class PinnedKey:
    key: Ed25519PublicKey
    from_seq: int = 0
    to_seq: int | None = None  # inclusive; None: open-ended

    @property
    def keyid(self) -> str:
        return key_id(self.key)

    def covers(self, seq: int) -> bool:
        return self.from_seq <= seq and (self.to_seq is None or seq <= self.to_seq)

    def describe(self) -> str:
        end = "" if self.to_seq is None else str(self.to_seq)
        return f"{self.keyid[:16]} (entries {self.from_seq}..{end})"


class Trust:
    def __init__(self, pinned: Iterable[PinnedKey | Ed25519PublicKey]) -> None:
        self.pinned = [p if isinstance(p, PinnedKey) else PinnedKey(p) for p in pinned]
        self.by_id: dict[str, list[PinnedKey]] = {}
        self._raw: dict[int, bytes] = {}  # by id() of a key this trust holds, so ids stay unique
        for p in self.pinned:
            self.by_id.setdefault(p.keyid, []).append(p)

    @property
    def keyids(self) -> list[str]:
        return sorted(self.by_id)

    @property
    def keys(self) -> list[Ed25519PublicKey]:
        return [ps[0].key for ps in self.by_id.values()]

    def raw_key_for(self, keyid: str, seq: int) -> bytes | None:
        """The raw 32 bytes of `key_for(keyid, seq)`, read once per pinned key."""
        key = self.key_for(keyid, seq)
        if key is None:
            return None
        raw = self._raw.get(id(key))
        if raw is None:
            raw = self._raw[id(key)] = raw_public(key)
        return raw

    def key_for(self, keyid: str, seq: int) -> Ed25519PublicKey | None:
        """The pinned key with this id if it may sign entry `seq`."""
        for p in self.by_id.get(keyid, ()):
            if p.covers(seq):
                return p.key
        return None

    def ranges(self, keyid: str) -> str:
        return ", ".join(p.describe() for p in self.by_id.get(keyid, ()))


def _public_key(text: str, where: str) -> Ed25519PublicKey:
    if "BEGIN PUBLIC KEY" in text:
        key = serialization.load_pem_public_key(text.encode())
        if not isinstance(key, Ed25519PublicKey):
            raise UsageError(f"{where}: not an Ed25519 key")
        return key
    try:
        raw = base64.b64decode(text, validate=True)
        return Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError) as err:
        raise UsageError(f"{where}: public_key is neither PEM nor base64 of 32 raw bytes") from err


def load_trust_file(path: Path) -> list[PinnedKey]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"cannot read trust file {path}: {err.strerror}") from err
    except ValueError as err:
        raise UsageError(f"trust file {path} is not JSON: {err}") from err
    entries = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UsageError(f'trust file {path} needs {{"keys": [...]}} with at least one key')
    pinned = []
    for i, e in enumerate(entries):
        where = f"{path} key {i}"
        if not isinstance(e, dict) or "public_key" not in e:
            raise UsageError(f"{where}: needs public_key")
        from_seq, to_seq = e.get("from_seq", 0), e.get("to_seq")
        if not isinstance(from_seq, int) or (to_seq is not None and not isinstance(to_seq, int)):
            raise UsageError(f"{where}: from_seq and to_seq must be integers")
        if to_seq is not None and to_seq < from_seq:
            raise UsageError(f"{where}: to_seq {to_seq} is before from_seq {from_seq}")
        pinned.append(PinnedKey(_public_key(str(e["public_key"]), where), from_seq, to_seq))
    return pinned


def load_pinned(pubkeys: Sequence[Path], trust_file: Path | None) -> list[PinnedKey]:
    """Keys from --pubkey (valid for every entry) and from a trust file (ranged)."""
    pinned = [PinnedKey(load_public_key(p)) for p in pubkeys]
    if trust_file is not None:
        pinned += load_trust_file(trust_file)
    if not pinned:
        raise UsageError("no key to verify with", hint="pass --pubkey KEYFILE or --trust FILE")
    return pinned
