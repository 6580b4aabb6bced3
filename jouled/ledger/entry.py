"""A ledger entry: signed canonical payload, leaf hash, export line.

An export line is a DSSE envelope with DSSE's own field names (`payload`,
`payloadType`, `signatures` of `keyid` and `sig`) plus the entry's `seq` and
`leaf_hash` (docs/ledger.md). Exports written before the envelope followed
DSSE spelled the type `payload_type`; readers accept both spellings.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from jouled.documents.vocabulary import ENTRY_KINDS
from jouled.ledger import canonical
from jouled.ledger.merkle import leaf_hash
from jouled.ledger.signing import PAYLOAD_TYPE, Signer

KINDS = ENTRY_KINDS

# DSSE's name for the envelope's type field, and the one exports used before it.
TYPE_FIELD = "payloadType"
LEGACY_TYPE_FIELD = "payload_type"


def utc_now() -> str:
    """RFC 3339 UTC with milliseconds, as every payload spells time."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Signature:
    keyid: str
    sig: str  # base64


@dataclass(frozen=True)
class Entry:
    seq: int
    payload: bytes  # the signed canonical bytes; what is verified, never re-serialised
    signatures: tuple[Signature, ...]
    leaf_hash: bytes

    @cached_property
    def doc(self) -> dict[str, Any]:
        value = json.loads(self.payload)
        assert isinstance(value, dict)
        return value

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def body(self) -> dict[str, Any]:
        body = self.doc["body"]
        assert isinstance(body, dict)
        return body

    @property
    def time(self) -> str:
        return str(self.doc.get("time", ""))

    def export_record(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "payload": base64.b64encode(self.payload).decode("ascii"),
            TYPE_FIELD: PAYLOAD_TYPE,
            "signatures": [{"keyid": s.keyid, "sig": s.sig} for s in self.signatures],
            "leaf_hash": self.leaf_hash.hex(),
        }

    def export_line(self) -> str:
        return canonical.dumps(self.export_record())


def make_entry(
    seq: int, kind: str, prev: bytes, body: dict[str, Any], signers: list[Signer], time: str = ""
) -> Entry:
    if kind not in KINDS:
        raise ValueError(f"unknown entry kind {kind!r}")
    payload = canonical.dumpb(
        {"seq": seq, "kind": kind, "prev": prev.hex(), "time": time or utc_now(), "body": body}
    )
    return Entry(
        seq=seq,
        payload=payload,
        signatures=tuple(Signature(s.keyid, s.sign(payload)) for s in signers),
        leaf_hash=leaf_hash(payload),
    )


def record_payload_type(record: dict[str, Any]) -> object:
    """The envelope's payload type under either spelling; None when it names none.

    A record that spells it both ways with different values names no single
    type, and is answered with both, which no verifier accepts.
    """
    new, old = record.get(TYPE_FIELD), record.get(LEGACY_TYPE_FIELD)
    if new is not None and old is not None and new != old:
        return [new, old]
    return new if new is not None else old


def parse_export_record(record: dict[str, Any]) -> Entry:
    """An export line back into an Entry; the leaf hash is taken as given (verify recomputes)."""
    return Entry(
        seq=int(record["seq"]),
        payload=base64.b64decode(record["payload"], validate=True),
        signatures=tuple(Signature(str(s["keyid"]), str(s["sig"])) for s in record["signatures"]),
        leaf_hash=bytes.fromhex(record["leaf_hash"]),
    )
