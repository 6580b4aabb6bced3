"""The wire documents: clear errors on bad input, and exactly the object they were read from."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from jouled.documents.bodies import AbortBody, OpBody, Payload, ResultBody, parse_body
from jouled.documents.parts import InclusionProof
from jouled.documents.sent import ExportRecord, FrontierRow, Receipt
from jouled.documents.vocabulary import Status
from jouled.errors import DocumentError, UsageError
from jouled.ledger import canonical


def result_body() -> dict[str, Any]:
    return {
        "task_id": "smoke/lrucache",
        "suite": "smoke",
        "task_digest": "d" * 64,
        "patch_sha256": "p" * 64,
        "status": "unresolved",
        "resolved": False,
        "tests": {"expected": 3, "passed": 1, "failed": 2, "missing": 0},
        "tests_failed": ["t::a", "t::b"],
        "tests_missing": [],
        "energy": {
            "grade": {
                "gross_mj": 40,
                "idle_mj": 10,
                "marginal_mj": 30,
                "wall_ms": 12,
                "domains": {"package-0": 40},
                "source": "rapl",
                "attribution": "exclusive",
                "valid": True,
                "reliable": True,
            }
        },
        "solver": "alice/agent",
        "model": "",
        "claimed": {"usd_micros": 5},
        "provenance": {"calibration_seq": None},
        "version": "0.1.0",
    }


def test_a_result_body_round_trips_to_its_canonical_bytes() -> None:
    data = result_body()
    body = ResultBody.parse(data)
    assert body.status is Status.UNRESOLVED and body.tests["failed"] == 2
    assert body.extra == {} and "error" in body.absent
    assert canonical.dumps(body.to_dict()) == canonical.dumps(data)


def test_a_body_from_an_older_daemon_keeps_its_shape() -> None:
    """Fields added later are absent from old bodies, and stay absent when written again."""
    old = {
        k: v
        for k, v in result_body().items()
        if k not in ("suite", "task_digest", "tests_failed", "tests_missing", "provenance")
    }
    body = ResultBody.parse(old)
    assert body.suite is None and body.provenance is None
    assert body.to_dict() == old


def test_fields_a_newer_daemon_adds_are_kept_verbatim() -> None:
    data = {**result_body(), "swebench": {"resolved": True, "report": ["x"]}, "model": None}
    body = ResultBody.parse(data)
    assert body.extra == {"swebench": {"resolved": True, "report": ["x"]}, "model": None}
    assert body.model is None
    assert canonical.dumps(body.to_dict()) == canonical.dumps(data)


def test_set_fills_a_declared_field_or_keeps_an_unknown_one() -> None:
    body = ResultBody.parse(result_body())
    body.set("error", "the sandbox failed")
    body.set("swebench", {"resolved": False})
    assert body.error == "the sandbox failed"
    assert body.to_dict()["swebench"] == {"resolved": False}
    assert body.to_dict()["error"] == "the sandbox failed"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("task_id"), "result body field 'task_id': is missing"),
        (lambda d: d.update(resolved="yes"), "field 'resolved': must be a boolean, not a string"),
        (lambda d: d.update(rollout=True), "field 'rollout': must be a number, not a boolean"),
        (lambda d: d.update(status="great"), "field 'status': 'great' is not one of resolved"),
        (lambda d: d["tests"].pop("passed"), "field 'tests.passed': is missing"),
        (
            lambda d: d["energy"]["grade"].update(gross_mj="40"),
            "field 'energy.grade.gross_mj': must be a number",
        ),
        (lambda d: d.update(tests_failed=["ok", 3]), "field 'tests_failed[1]': must be a string"),
    ],
)
def test_a_bad_field_is_named(edit: Any, message: str) -> None:
    data = copy.deepcopy(result_body())
    edit(data)
    with pytest.raises(DocumentError) as err:
        ResultBody.parse(data)
    assert message in err.value.message
    assert isinstance(err.value, UsageError)  # a bad document is the caller's to fix


def test_a_document_that_is_not_an_object_says_what_it_is() -> None:
    with pytest.raises(DocumentError, match="receipt: must be a JSON object, not an array"):
        Receipt.parse([])
    with pytest.raises(DocumentError, match="'seal' is not one of genesis"):
        parse_body("seal", {})


def _line(**fields: Any) -> dict[str, Any]:
    payload = canonical.dumpb(
        {
            "seq": 4,
            "kind": "abort",
            "prev": "a" * 64,
            "time": "2026-01-01T00:00:00.000Z",
            "body": {"task_id": "smoke/x", "reason": "cancelled", "solver": "s"},
        }
    )
    return {
        "seq": 4,
        "payload": base64.b64encode(payload).decode(),
        "payloadType": "application/vnd.jouled.event.v1+json",
        "signatures": [{"keyid": "k" * 64, "sig": "c2ln"}],
        "leaf_hash": "b" * 64,
        **fields,
    }


def test_an_export_line_in_either_spelling_is_written_back_the_same_way() -> None:
    new = _line()
    old = {("payload_type" if k == "payloadType" else k): v for k, v in new.items()}
    for data in (new, old):
        line = ExportRecord.parse(data)
        assert line.payload_type == "application/vnd.jouled.event.v1+json"
        assert json.dumps(line.to_dict()) == json.dumps(data)
    payload = ExportRecord.parse(old).parsed_payload()
    assert isinstance(payload, Payload)
    body = payload.typed_body()
    assert isinstance(body, AbortBody) and body.reason == "cancelled"
    assert canonical.dumpb(payload.to_dict()) == ExportRecord.parse(old).payload_bytes()


def test_an_export_line_whose_payload_is_not_base64_is_named() -> None:
    with pytest.raises(DocumentError, match="field 'payload': is not base64"):
        ExportRecord.parse(_line(payload="not base64!")).payload_bytes()


def test_a_receipt_is_built_from_its_result_body() -> None:
    body = ResultBody.parse(result_body())
    line = ExportRecord.parse(_line())
    proof: InclusionProof = {
        "seq": 4,
        "leaf_hash": "b" * 64,
        "tree_size": 5,
        "root": "c" * 64,
        "hashes": [],
    }
    receipt = Receipt.of(
        body, seq=4, leaf_hash="b" * 64, entry=line, proof=proof, checkpoint="note\n"
    )
    out = receipt.to_dict()
    assert out["status"] == "unresolved" and type(out["status"]) is str
    assert out["tests_failed"] == ["t::a", "t::b"] and out["audit"] == []
    assert out["entry"] == _line()
    assert Receipt.parse(json.loads(json.dumps(out))).to_dict() == out


def test_an_op_body_needs_its_window_fields() -> None:
    with pytest.raises(DocumentError, match="op body field 'window_id': is missing"):
        OpBody.parse({"label": "x"})


def test_a_frontier_row_writes_null_figures_and_leaves_out_an_unset_verdict() -> None:
    figures: dict[str, Any] = dict.fromkeys(
        ("merged_digests", "attempts", "tasks", "resolved", "invalid_windows", "invalid"), 0
    )
    figures |= dict.fromkeys(("tampered", "audit_flagged", "errors", "timeouts"), 0)
    figures |= dict.fromkeys(("op_windows", "op_abandoned"), 0)
    row = FrontierRow(
        suite="smoke",
        solver="s",
        model="",
        digest_set="x",
        resolution=0.0,
        ci_low=0.0,
        ci_high=0.0,
        joules_total=0.0,
        joules_marginal=0.0,
        usd_source="claimed",
        claimed_joules=0.0,
        energy_source="rapl",
        op_joules=0.0,
        **figures,
    )
    out = row.to_dict()
    assert out["revision"] is None and out["usd_total"] is None
    assert "pareto" not in out and "host" not in out
    assert FrontierRow.parse(out).to_dict() == out


def test_a_field_given_a_value_after_parsing_is_written() -> None:
    data = result_body()
    del data["tests_failed"], data["tests_missing"]
    body = ResultBody.parse(data)
    body.error = "the sandbox failed"
    body.tests_failed = ["t::a"]
    out = body.to_dict()
    assert out["error"] == "the sandbox failed" and out["tests_failed"] == ["t::a"]
    del_audit = {k: v for k, v in _receipt().items() if k != "audit"}
    assert "audit" not in Receipt.parse(del_audit).to_dict()
    receipt = Receipt.parse(del_audit)
    receipt.audit = [{"code": "x"}]
    assert receipt.to_dict()["audit"] == [{"code": "x"}]


def _receipt() -> dict[str, Any]:
    proof: InclusionProof = {
        "seq": 4,
        "leaf_hash": "b" * 64,
        "tree_size": 5,
        "root": "c" * 64,
        "hashes": [],
    }
    return Receipt.of(
        ResultBody.parse(result_body()),
        seq=4,
        leaf_hash="b" * 64,
        entry=ExportRecord.parse(_line()),
        proof=proof,
        checkpoint="note\n",
    ).to_dict()
