"""What each caller sees of a result, decided without a daemon (the attacks are in
tests/integration/test_attack_visibility.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jouled import visibility
from jouled.auth import AGENT, AUDITOR, OPERATOR, Identity
from jouled.contracts import TaskRegistry
from jouled.documents.sent import ExportRecord, Receipt
from jouled.documents.vocabulary import Status
from jouled.errors import DeniedError

TASKS = Path(__file__).resolve().parents[1] / "tasks"
REGISTRY = TaskRegistry.from_dirs([TASKS])
SLIDING = REGISTRY.get("smoke/slidingwindow")
LRU = REGISTRY.get("smoke/lrucache")
VISIBLE = "tests/test_windows.py::test_overlapping_windows"
HIDDEN = "tests/test_hidden_windows.py::test_single_item_window"


def who(name: str, *roles: str) -> Identity:
    return Identity(name, frozenset(roles), "token")


def test_operators_auditors_and_the_daemon_see_everything() -> None:
    for caller in (None, who("ops", OPERATOR), who("audit", AUDITOR), who("x", AGENT, AUDITOR)):
        assert visibility.sees_all(caller)
        visibility.check_owner(caller, {"agent": "someone-else"}, 7)
    assert not visibility.sees_all(who("alice", AGENT))


def test_an_agent_owns_the_results_that_name_it() -> None:
    alice = who("alice", AGENT)
    visibility.check_owner(alice, {"agent": "alice"}, 1)
    for body in ({"agent": "bob"}, {"agent": ""}, {}):
        with pytest.raises(DeniedError, match="another credential"):
            visibility.check_owner(alice, body, 1)


def test_only_a_served_task_at_the_same_digest_without_hidden_files_shows_whole() -> None:
    assert not visibility.Secrecy.of(LRU, {"task_digest": LRU.digest}).hidden
    assert visibility.Secrecy.of(SLIDING, {"task_digest": SLIDING.digest}).hidden
    # Another version of the task, or one no longer served: it may have had hidden tests.
    assert visibility.Secrecy.of(LRU, {"task_digest": "0" * 64}).hidden
    assert visibility.Secrecy.of(LRU, {}).hidden
    assert visibility.Secrecy.of(None, {"task_digest": LRU.digest}).hidden


def test_visible_ids_are_those_of_test_files_an_agent_was_given() -> None:
    secrecy = visibility.Secrecy.of(SLIDING, {"task_digest": SLIDING.digest})
    odd = ["tests/../tests/test_hidden_windows.py::x", "/etc/passwd::x", "nowhere.py::x"]
    assert secrecy.visible([VISIBLE, HIDDEN, *odd]) == [VISIBLE]
    # Unknown version: no id is known to be visible.
    assert visibility.Secrecy(True, None).visible([VISIBLE]) == []


def test_a_receipt_and_logs_keep_counts_and_visible_ids_only() -> None:
    secrecy = visibility.Secrecy.of(SLIDING, {"task_digest": SLIDING.digest})
    receipt = Receipt(
        seq=4,
        task_id=SLIDING.task_id,
        patch_sha256="ab" * 32,
        status=Status.UNRESOLVED,
        resolved=False,
        tests={"expected": 9, "passed": 7, "failed": 2, "missing": 0},
        energy={},
        solver="agent",
        leaf_hash="cd" * 32,
        tests_failed=[VISIBLE, HIDDEN],
        tests_missing=[HIDDEN],
        output_tail="FAILED " + HIDDEN,
        verdict={"resolved": False, "tests_failed": [HIDDEN]},
        entry=ExportRecord(
            seq=4,
            payload="e30=",
            payload_type="application/json",
            signatures=[],
            leaf_hash="cd" * 32,
        ),
        proof={"seq": 4, "leaf_hash": "cd" * 32, "tree_size": 5, "root": "ef" * 32, "hashes": []},
        checkpoint="note",
    )
    shown = visibility.receipt(receipt, secrecy)
    assert shown.tests == receipt.tests and shown.tests_failed == [VISIBLE]
    assert shown.tests_missing == [] and shown.verdict is None
    assert shown.entry is None and shown.output_tail == "" and shown.withheld
    assert shown.proof == receipt.proof and shown.seq == 4
    logs = {
        "seq": 4,
        "runs": {
            "grade": {
                "sha256": "ab" * 32,
                "status": "complete",
                "signed_status": "complete",
                "kept_bytes": 10,
                "dropped_bytes": 0,
                "exit_code": 1,
                "signal": None,
                "text": "FAILED " + HIDDEN,
                "clipped_bytes": 0,
            }
        },
        "tests_failed": {
            "count": 2, "sha256": None, "status": "complete", "ids": [VISIBLE, HIDDEN],
            "clipped": False,
        },
    }  # fmt: skip
    seen = visibility.logs(logs, secrecy)
    assert seen["runs"]["grade"]["status"] == "withheld" and seen["runs"]["grade"]["text"] == ""
    assert seen["runs"]["grade"]["exit_code"] is None
    assert seen["tests_failed"]["ids"] == [VISIBLE] and seen["tests_failed"]["count"] == 2
    assert "test_hidden" not in repr(seen) + repr(shown)
    whole = visibility.Secrecy.of(LRU, {"task_digest": LRU.digest})
    assert visibility.receipt(receipt, whole) is receipt and visibility.logs(logs, whole) is logs


def test_progress_messages_of_a_hidden_task_say_nothing_of_its_runs() -> None:
    forged = "the source compiled as /testbed/tests/test_hidden_windows.py is not that file's"
    assert "hidden_windows" not in visibility.progress_message("grade", f"tampered: {forged}", True)
    assert "hidden_windows" not in visibility.progress_message("error", forged, True)
    assert visibility.progress_message("signed", "ledger entry 4", True) == "ledger entry 4"
    assert visibility.progress_message("grade", forged, False) == forged


def test_a_task_listing_leaves_hidden_ids_out_for_agents_only() -> None:
    ids = (VISIBLE, HIDDEN)
    assert visibility.expected_ids(SLIDING, ids, who("alice", AGENT)) == [VISIBLE]
    assert visibility.expected_ids(SLIDING, ids, who("ops", OPERATOR)) == list(ids)
    assert visibility.expected_ids(LRU, ids, who("alice", AGENT)) == list(ids)
