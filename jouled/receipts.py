"""Receipts: a signed entry with what checks it alone (its inclusion proof and checkpoint)."""

from __future__ import annotations

from typing import cast

from jouled import limits
from jouled.documents.bodies import OpBody, ResultBody
from jouled.documents.parts import InclusionProof
from jouled.documents.sent import ExportRecord, OpReceipt, Receipt
from jouled.errors import NotFoundError
from jouled.ledger.checkpoint import parse_note
from jouled.ledger.entry import Entry
from jouled.ledger.store import Ledger


def result_receipt(
    ledger: Ledger, entry: Entry, output_tail: str, *, replayed: bool = False
) -> Receipt:
    """Everything needed to check one result alone: entry, proof, checkpoint."""
    note = ledger.checkpoint_note()
    size = parse_note(note)[0].size
    body = ResultBody.parse(entry.body, where=f"entry {entry.seq}: result body")
    return Receipt.of(
        body,
        seq=entry.seq,
        leaf_hash=entry.leaf_hash.hex(),
        entry=ExportRecord.parse(entry.export_record()),
        proof=cast(InclusionProof, ledger.inclusion_proof(entry.seq, size)),
        checkpoint=note,
        output_tail=output_tail,
        replayed=replayed,
    )


def op_receipt(ledger: Ledger, entry: Entry) -> OpReceipt:
    """An op entry with what checks it alone: proof and checkpoint."""
    note = ledger.checkpoint_note()
    size = parse_note(note)[0].size
    return OpReceipt.of(
        OpBody.parse(entry.body, where=f"entry {entry.seq}: op body"),
        seq=entry.seq,
        leaf_hash=entry.leaf_hash.hex(),
        entry=ExportRecord.parse(entry.export_record()),
        proof=cast(InclusionProof, ledger.inclusion_proof(entry.seq, size)),
        checkpoint=note,
    )


def result_entry(ledger: Ledger, seq: int) -> Entry:
    """The result entry at `seq`; refuses any other kind, or a seq past the end."""
    limits.integer("seq", seq)
    if seq >= ledger.size:
        raise NotFoundError(
            f"entry {seq} does not exist: the ledger has {ledger.size}", hint=SEQ_HINT
        )
    entry = ledger.get(seq)
    if entry.kind != "result":
        raise NotFoundError(f"entry {seq} is a {entry.kind} entry, not a result", hint=SEQ_HINT)
    return entry


# Where a result's seq is found: the receipt printed when it was graded, or the ledger.
SEQ_HINT = (
    "a result's seq is in the receipt `jb-client submit` printed; `jb-client export` "
    "lists every entry with its seq and kind, or ask by --key instead"
)
