"""Export lines and receipts are DSSE envelopes; old ones spelling `payload_type` still verify."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from jouled.errors import VerificationError
from jouled.ledger.audit import audit_receipt
from jouled.ledger.signing import PAYLOAD_TYPE
from jouled.ledger.snapshot import check_parquet, write_parquet
from jouled.ledger.verify import verify_export, verify_file

from .test_store import open_ledger


@pytest.fixture
def ledger_parts(tmp_path: Path) -> tuple[list[str], list[Any], str, dict[str, Any]]:
    """(export lines, pinned keys, checkpoint note, a receipt for entry 2)."""
    ledger = open_ledger(tmp_path)
    for i in range(3):
        ledger.append("result", {"task_id": f"s/t{i}", "status": "resolved", "resolved": True})
    lines = [e.export_line() for e in ledger.iter_export()]
    note = ledger.checkpoint_note()
    receipt = {
        "entry": ledger.get(2).export_record(),
        "proof": ledger.inclusion_proof(2, ledger.size),
        "checkpoint": note,
    }
    keys = [ledger.signer.public]
    ledger.close()
    return lines, keys, note, receipt


def legacy(record: dict[str, Any]) -> dict[str, Any]:
    """The record as exports spelled it before the envelope followed DSSE."""
    out = dict(record)
    out["payload_type"] = out.pop("payloadType")
    return out


def legacy_line(line: str) -> str:
    return json.dumps(legacy(json.loads(line)), sort_keys=True, separators=(",", ":"))


def dsse_pae(payload_type: str, payload: bytes) -> bytes:
    """PAE as the DSSE specification writes it, independently of jouled's own."""
    t = payload_type.encode()
    return b" ".join([b"DSSEv1", str(len(t)).encode(), t, str(len(payload)).encode(), payload])


def test_new_export_lines_use_dsse_field_names(ledger_parts: tuple) -> None:
    lines, keys, _, _ = ledger_parts
    for line in lines:
        record = json.loads(line)
        assert set(record) == {"seq", "payload", "payloadType", "signatures", "leaf_hash"}
        assert record["payloadType"] == PAYLOAD_TYPE
        assert [set(s) for s in record["signatures"]] == [{"keyid", "sig"}]
        # What an off-the-shelf DSSE verifier does with the envelope.
        payload = base64.b64decode(record["payload"])
        sig = base64.b64decode(record["signatures"][0]["sig"])
        keys[0].verify(sig, dsse_pae(record["payloadType"], payload))


@pytest.mark.parametrize("workers", [1, 2])
def test_exports_in_either_spelling_verify(
    ledger_parts: tuple, tmp_path: Path, workers: int
) -> None:
    lines, keys, note, _ = ledger_parts
    old = [legacy_line(line) for line in lines]
    mixed = [old[0], *lines[1:]]
    for variant in (lines, old, mixed):
        assert verify_export(variant, keys, [note]).entries == 4
        path = tmp_path / "export.jsonl"
        path.write_text("".join(line + "\n" for line in variant))
        assert verify_file(path, keys, [note], workers=workers).entries == 4


@pytest.mark.parametrize(
    "edit",
    [
        {"payloadType": "application/json"},
        {"payload_type": "application/json"},  # both spellings, disagreeing
        {"payloadType": None},
    ],
)
def test_a_wrong_or_missing_payload_type_fails(ledger_parts: tuple, edit: dict) -> None:
    lines, keys, note, _ = ledger_parts
    record = json.loads(lines[2])
    record.update(edit)
    if record["payloadType"] is None:
        del record["payloadType"]
    lines[2] = json.dumps(record)
    with pytest.raises(VerificationError, match="payload type") as info:
        verify_export(lines, keys, [note])
    assert info.value.seq == 2


def test_receipts_in_either_spelling_audit(ledger_parts: tuple) -> None:
    _, keys, _, receipt = ledger_parts
    assert "payloadType" in receipt["entry"]
    assert audit_receipt(receipt, keys)["seq"] == 2
    old = {**receipt, "entry": legacy(receipt["entry"])}
    assert audit_receipt(old, keys)["seq"] == 2
    wrong = {**receipt, "entry": {**receipt["entry"], "payloadType": "text/plain"}}
    with pytest.raises(VerificationError, match="payload type"):
        audit_receipt(wrong, keys)


def test_snapshots_of_either_spelling_carry_the_type(ledger_parts: tuple, tmp_path: Path) -> None:
    lines, _, _, _ = ledger_parts
    leaves = [bytes.fromhex(json.loads(line)["leaf_hash"]) for line in lines]
    for name, variant in (("new", lines), ("old", [legacy_line(line) for line in lines])):
        export, parquet = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.parquet"
        export.write_text("".join(line + "\n" for line in variant))
        assert write_parquet(export, parquet) == 4
        assert check_parquet(parquet, leaves) == 4
        types = duckdb.sql(f"SELECT DISTINCT payload_type FROM read_parquet('{parquet}')")
        assert types is not None and types.fetchall() == [(PAYLOAD_TYPE,)]
