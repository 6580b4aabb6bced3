"""The merged frontier of several hosts: a row per host, attempts counted once."""

from __future__ import annotations

from typing import Any

import pytest

from jouled.errors import UsageError
from jouled.frontier_fleet import HostLedger, count_once, fleet_frontier


def body(task: str, *, key: str = "", source: str = "rapl", mj: int = 1000) -> dict[str, Any]:
    window = {"gross_mj": mj, "marginal_mj": mj, "source": source, "reliable": True, "wall_ms": 5}
    return {
        "task_id": task,
        "suite": "s",
        "status": "resolved",
        "resolved": True,
        "solver": "reference",
        "model": "",
        "run_id": "run",
        "rollout": 0,
        "idempotency_key": key,
        "energy": {"grade": window},
    }


def test_a_row_per_host_naming_it_and_its_source() -> None:
    doc = fleet_frontier(
        [
            HostLedger("b", [body("s/x", key="k1", source="rapl")]),
            HostLedger("a", [body("s/y", key="k2", source="rapl", mj=3000)]),
        ]
    )
    assert [(r["host"], r["energy_source"], r["joules_total"]) for r in doc["rows"]] == [
        ("a", "rapl", 3.0),
        ("b", "rapl", 1.0),
    ]
    [summary] = doc["summary"]
    assert summary["host"] == "*" and summary["hosts"] == ["a", "b"] and summary["comparable"]
    assert summary["attempts"] == 2 and summary["joules_total"] == 4.0
    assert doc["duplicates"] == []


def test_energy_from_different_meters_is_not_summed() -> None:
    doc = fleet_frontier(
        [
            HostLedger("a", [body("s/x", key="k1", source="rapl")]),
            HostLedger("b", [body("s/y", key="k2", source="estimator")]),
        ]
    )
    [summary] = doc["summary"]
    assert not summary["comparable"] and summary["energy_source"] == "not comparable"
    assert summary["energy_sources"] == {"a": "rapl", "b": "estimator"}
    assert summary["joules_total"] is None and summary["joules_per_resolved"] is None
    assert summary["attempts"] == 2 and summary["resolved"] == 2  # the counts still add up
    assert summary["pareto"] is False


def test_a_retried_attempt_is_counted_once_whatever_the_host_order() -> None:
    first = [HostLedger("b", [body("s/x", key="k")]), HostLedger("a", [body("s/x", key="k")])]
    for hosts in (first, first[::-1]):
        kept, duplicates = count_once(hosts)
        assert len(kept["a"]) == 1 and kept["b"] == []
        assert duplicates == [
            {"host": "b", "counted_on": "a", "task_id": "s/x", "idempotency_key": "k"}
        ]
        assert sum(r["attempts"] for r in fleet_frontier(hosts)["rows"]) == 1


def test_results_without_a_key_or_with_other_coordinates_are_all_counted() -> None:
    other_task = body("s/y", key="k")
    kept, duplicates = count_once(
        [
            HostLedger("a", [body("s/x"), body("s/x", key="k")]),
            HostLedger("b", [body("s/x"), other_task]),
        ]
    )
    assert len(kept["a"]) == 2 and len(kept["b"]) == 2 and duplicates == []


def test_two_ledgers_cannot_share_a_host_name() -> None:
    with pytest.raises(UsageError):
        fleet_frontier([HostLedger("a", []), HostLedger("a", [])])


def test_the_same_key_from_two_agents_is_two_attempts() -> None:
    # A key belongs to the credential that used it: the same coordinates from two agents
    # (two tokens with one solver prefix, say) are two attempts, on one host or several.
    alice = {**body("s/x", key="k"), "agent": "alice"}
    bob = {**body("s/x", key="k"), "agent": "bob"}
    kept, duplicates = count_once([HostLedger("a", [alice]), HostLedger("b", [bob])])
    assert len(kept["a"]) == 1 and len(kept["b"]) == 1 and duplicates == []
    kept, duplicates = count_once([HostLedger("a", [alice]), HostLedger("b", [dict(alice)])])
    assert kept["b"] == [] and len(duplicates) == 1
