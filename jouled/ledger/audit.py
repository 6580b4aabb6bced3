"""Checking one receipt alone, with nothing but a pinned public key.

A receipt carries its signed entry, an inclusion proof and the checkpoint the
proof is against: the entry's envelope must name the ledger's payload type
(as `payloadType`, or `payload_type` in receipts from before the envelope
followed DSSE), its signature must verify, its leaf hash must be
the hash of its payload, the checkpoint must be signed by the same key, and
the proof must place the leaf at `seq` in the checkpoint's tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jouled.errors import UsageError, VerificationError
from jouled.ledger import merkle
from jouled.ledger.checkpoint import parse_note, verify_note
from jouled.ledger.entry import parse_export_record, record_payload_type
from jouled.ledger.signing import PAYLOAD_TYPE, key_id, verify_signature

_RECEIPT_HINT = "pass a receipt as `jb-client submit --json` or `jb-client receipt --json` print it"
_JSON_TYPES: dict[type, str] = {dict: "object", list: "array", str: "string"}


def _check_shape(receipt: object) -> None:
    """Refuse a document that is not a receipt at all, naming what is missing."""
    if not isinstance(receipt, dict):
        raise UsageError(
            f"a receipt is a JSON object, not a JSON {_json_type(receipt)}", hint=_RECEIPT_HINT
        )
    for name, kind in (("entry", dict), ("proof", dict), ("checkpoint", str)):
        if not isinstance(receipt.get(name), kind):
            raise UsageError(
                f"the receipt's {name!r} is missing or not a JSON {_JSON_TYPES[kind]}",
                hint=_RECEIPT_HINT,
            )
    proof = receipt["proof"]
    hashes, size = proof.get("hashes"), proof.get("tree_size")
    if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
        raise UsageError("the receipt's proof has no list of hashes", hint=_RECEIPT_HINT)
    if type(size) is not int:
        raise UsageError("the receipt's proof has no tree_size", hint=_RECEIPT_HINT)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def audit_receipt(receipt: dict[str, Any], pubkeys: Sequence[Ed25519PublicKey]) -> dict[str, Any]:
    if isinstance(receipt, dict) and receipt.get("entry") is None and receipt.get("withheld"):
        raise VerificationError(
            f"this receipt has no signed entry to check: {receipt['withheld']}",
            hint="an auditor or operator of the daemon gets the whole receipt "
            "(jb-client receipt --seq N), which checks alone",
        )
    _check_shape(receipt)
    try:
        payload_type = record_payload_type(receipt["entry"])
        entry = parse_export_record(receipt["entry"])
        proof = receipt["proof"]
        note = str(receipt["checkpoint"])
        hashes = [bytes.fromhex(h) for h in proof["hashes"]]
        tree_size = int(proof["tree_size"])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise VerificationError(f"the receipt lacks its entry, proof or checkpoint: {err}") from err
    seq = entry.seq
    if payload_type != PAYLOAD_TYPE:
        raise VerificationError(f"payload type {payload_type!r} is not {PAYLOAD_TYPE}", seq=seq)
    if merkle.leaf_hash(entry.payload) != entry.leaf_hash:
        raise VerificationError("leaf hash does not match the payload", seq=seq)
    keys = {key_id(k): k for k in pubkeys}
    signed = [s for s in entry.signatures if s.keyid in keys]
    if not signed or not all(verify_signature(keys[s.keyid], entry.payload, s.sig) for s in signed):
        raise VerificationError("the entry is not validly signed by a pinned key", seq=seq)
    if entry.doc.get("seq") != seq:
        raise VerificationError("the payload's seq differs from the receipt's", seq=seq)
    origin = parse_note(note)[0].origin
    cp = verify_note(note, [(origin, k) for k in pubkeys])
    if cp.size != tree_size:
        raise VerificationError(
            f"the proof is for a tree of {tree_size} entries, the checkpoint has {cp.size}",
            seq=seq,
        )
    if not merkle.verify_inclusion(entry.leaf_hash, seq, cp.size, hashes, cp.root):
        raise VerificationError(
            "the inclusion proof does not lead to the checkpoint's root", seq=seq
        )
    body = entry.body
    return {
        "ok": True,
        "seq": seq,
        "task_id": body.get("task_id", ""),
        "status": body.get("status", ""),
        "resolved": body.get("resolved"),
        "tree_size": cp.size,
        "root": cp.root.hex(),
    }
