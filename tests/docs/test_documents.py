"""Every documented wire document parses with jouled.documents and serialises to the same bytes.

The payloads are signed as canonical JSON, so for them "the same bytes" is the
canonical serialisation (and, for the worked example, the very text that was
signed). Receipts and export lines are compared by their JSON text in the
order the page writes them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from jouled.documents.bodies import BODIES, Payload
from jouled.documents.sent import ExportRecord, Receipt
from jouled.documents.vocabulary import EntryKind
from jouled.ledger import canonical
from tests.docs.blocks import DOCS, Block, blocks, pages
from tests.docs.conftest import Real

JSON = [
    b
    for page in pages()
    for b in blocks(page)
    if b.marker == "example" and b.args[:1] == ("json",) and b.args[1] != "vector"
]


def _where(block: Block) -> str:
    return f"{block.where}:{'-'.join(block.args[1:])}"


def _same_payload(data: dict[str, Any]) -> None:
    payload = Payload.parse(data)
    assert canonical.dumps(payload.to_dict()) == canonical.dumps(data)
    body = payload.typed_body()
    assert isinstance(body, BODIES[payload.kind])
    assert canonical.dumps(body.to_dict()) == canonical.dumps(data["body"])


@pytest.mark.parametrize("block", JSON, ids=_where)
def test_each_documented_example_parses_and_serialises_to_the_same_bytes(block: Block) -> None:
    data = json.loads(block.text)
    what = block.args[1]
    if what == "payload":
        _same_payload(data)
        assert data["kind"] == block.args[2]
    elif what == "receipt":
        receipt = Receipt.parse(data)
        assert json.dumps(receipt.to_dict()) == json.dumps(data)
    elif what == "export-line":
        line = ExportRecord.parse(data)
        assert json.dumps(line.to_dict()) == json.dumps(data)
        _same_payload(json.loads(line.payload_bytes()))
    else:
        raise AssertionError(f"{block.where}: no document class for {what!r}")


def test_the_worked_example_payloads_serialise_to_the_signed_text() -> None:
    ledger_md = DOCS / "ledger.md"
    [block] = [b for b in blocks(ledger_md) if b.args[1:] == ("vector", "entries")]
    for entry in json.loads(block.text)["entries"]:
        signed = entry["payload_text"]
        assert canonical.dumps(Payload.parse(json.loads(signed)).to_dict()) == signed
        line = ExportRecord.parse(entry["export_line"])
        assert canonical.dumps(line.to_dict()) == canonical.dumps(entry["export_line"])
        assert line.payload_bytes() == signed.encode()


def test_what_the_daemon_really_wrote_parses_and_serialises_to_its_signed_bytes(
    real: Real,
) -> None:
    assert set(real.payloads) == {k.value for k in EntryKind} - {"abort", "op"}
    for data in real.payloads.values():
        _same_payload(data)
    line = ExportRecord.parse(real.export_line)
    assert canonical.dumps(line.to_dict()) == canonical.dumps(real.export_line)
    assert canonical.dumpb(line.parsed_payload().to_dict()) == line.payload_bytes()
    receipt = Receipt.parse(real.receipt)
    assert receipt.to_dict() == real.receipt
    assert receipt.entry is not None
    assert (
        receipt.entry.parsed_payload().typed_body().to_dict()
        == json.loads(receipt.entry.payload_bytes())["body"]
    )
