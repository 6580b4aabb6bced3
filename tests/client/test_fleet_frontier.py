"""A fleet's merged frontier as the client reads it: typed rows, the same JSON."""

from __future__ import annotations

import io
from typing import Any

from jb_client import render_fleet
from jb_client.fleet_documents import FleetFrontier
from rich.console import Console

from jouled.frontier_fleet import HostLedger, fleet_frontier
from tests.test_frontier_fleet import body


def merged() -> dict[str, Any]:
    """Two hosts metering with different sources, one attempt retried on the second."""
    doc = fleet_frontier(
        [
            HostLedger("a", [body("s/x", key="k1", source="rapl")]),
            HostLedger(
                "b",
                [
                    body("s/x", key="k1", source="estimator"),
                    body("s/y", key="k2", source="estimator", mj=3000),
                ],
            ),
        ]
    )
    checkpoint = {"size": 3, "root": "ab" * 32}
    hosts = [
        {
            "host": h,
            "target": f"unix:/{h}",
            "keyids": ["k"],
            "origin": h,
            "entries": 3,
            "checkpoint": checkpoint,
        }
        for h in ("a", "b")
    ]
    return {**doc, "hosts": hosts, "unreachable": [{"host": "c", "reason": "down"}]}


def test_a_summary_of_meters_that_differ_reads_with_its_energy_null() -> None:
    raw = merged()
    doc = FleetFrontier.parse(raw)
    assert doc.to_dict() == raw  # what --json prints
    [summary] = doc.summary
    assert summary.host == "*" and summary.hosts == ["a", "b"] and summary.comparable is False
    assert summary.joules_total is None and summary.energy_source == "not comparable"
    assert [(d.host, d.counted_on, d.task_id) for d in doc.duplicates] == [("b", "a", "s/x")]
    assert [h.checkpoint.size for h in doc.hosts] == [3, 3]


def test_the_table_names_the_unsummed_energy_the_retry_and_the_host_left_out() -> None:
    buf = io.StringIO()
    render_fleet.fleet_frontier_table(
        FleetFrontier.parse(merged()), console=Console(file=buf, width=200, color_system=None)
    )
    out = buf.getvalue()
    summary = next(line for line in out.splitlines() if "all (2)" in line)
    assert "not comparable" in summary and "~" not in summary
    assert "s/x on b is a retry of an attempt counted on a (key k1): counted once" in out
    assert "c: not merged (down)" in out
