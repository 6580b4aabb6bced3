"""Op entries summed into the frontier beside, never into, the attested grade energy."""

from __future__ import annotations

from typing import Any

from jouled.frontier import Frontier, frontier_rows

from .test_frontier import result, window


def op(
    marginal: int | None,
    *,
    agent: str = "alice",
    task: str = "smoke/lrucache",
    run_id: str = "r1",
    rollout: int = 0,
    reliable: bool = True,
    abandoned: bool = False,
) -> dict[str, Any]:
    return {
        "window_id": "00ff",
        "label": "inference",
        "agent": agent,
        "task_id": task,
        "run_id": run_id,
        "rollout": rollout,
        "energy": {
            **window(None if marginal is None else marginal * 2, marginal, reliable=reliable),
            "valid": marginal is not None,
            "attribution": "whole-host",
        },
        "end": "deadline" if abandoned else "closed",
        "abandoned": abandoned,
        "version": "0",
    }


def mine(**kw: Any) -> dict[str, Any]:
    body = result("smoke/lrucache", solver="alice", energy={"grade": window(4000, 2000)}, **kw)
    body["agent"] = "alice"
    return body


def test_op_windows_of_the_rows_attempts_are_summed_beside_the_grade_energy() -> None:
    ops = [
        op(1500),
        op(500, abandoned=True, reliable=False),
        op(None),  # a failed read adds nothing, but is a window
        op(9000, agent="bob"),  # not this agent
        op(9000, run_id="r2"),  # not this run
        op(9000, rollout=3),  # not this rollout
        op(9000, task=""),  # names no task
    ]
    (row,) = frontier_rows([mine()], ops=ops)
    assert row["op_joules"] == 2.0
    assert row["op_windows"] == 3
    assert row["op_abandoned"] == 1
    assert row["op_reliable_share"] == 1 / 3
    # The attested columns are the grade's alone.
    assert row["joules_total"] == 4.0
    assert row["joules_marginal"] == 2.0


def test_ops_count_once_per_attempt_key_in_any_order() -> None:
    late = Frontier()
    late.add(mine())
    late.add(mine())  # a second result for the same run and rollout
    late.add_op(op(1500))
    early = Frontier([mine(), mine()], ops=[op(1500)])
    for f in (late, early):
        (row,) = f.rows()
        assert row["attempts"] == 2
        assert row["op_joules"] == 1.5
        assert row["op_windows"] == 1


def test_error_attempts_earn_no_op_energy() -> None:
    (row,) = frontier_rows([mine(status="error")], ops=[op(1500)])
    assert row["op_joules"] == 0.0 and row["op_windows"] == 0
