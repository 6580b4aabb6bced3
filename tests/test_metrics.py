"""What the daemon counts for its metrics endpoint."""

from __future__ import annotations

from typing import Any

from jouled.metrics import OP_WINDOW, OTHER_SOLVER, Counts


def _window(source: str, gross_mj: int | None, valid: bool = True) -> dict[str, Any]:
    return {"source": source, "gross_mj": gross_mj, "marginal_mj": gross_mj, "valid": valid}


def test_results_count_attempts_by_status_and_solver_and_joules_by_source_and_op() -> None:
    counts = Counts(solvers=("alice",))
    counts.result(
        {
            "status": "resolved",
            "solver": "alice",
            "energy": {"seed": _window("rapl", 9), "grade": _window("rapl", 4360)},
        }
    )
    counts.result(
        {
            "status": "unresolved",
            "solver": "alice",
            "energy": {"grade": _window("rapl", 640), "solve": _window("rapl", 1000)},
        }
    )
    counts.result({"status": "resolved", "solver": "alice", "energy": {}})
    snap = counts.snapshot()
    assert snap.attempts == {("resolved", "alice"): 2, ("unresolved", "alice"): 1}
    assert snap.energy_mj == {
        ("rapl", "seed"): 9,
        ("rapl", "grade"): 5000,
        ("rapl", "solve"): 1000,
    }
    assert snap.invalid_windows == {}


def test_a_failed_read_adds_no_joules_and_is_counted_as_invalid() -> None:
    counts = Counts()
    counts.result(
        {
            "status": "resolved",
            "solver": "s",
            "energy": {
                "grade": _window("rapl", 100, valid=False),
                "apply": _window("rapl", None),
                "seed": _window("rapl", 7),
            },
        }
    )
    snap = counts.snapshot()
    assert snap.energy_mj == {("rapl", "seed"): 7}
    assert snap.invalid_windows == {"grade": 1, "apply": 1}


def test_aborts_and_op_windows_are_counted_apart_from_attempts() -> None:
    counts = Counts(solvers=("noop",))
    counts.abort({"solver": "noop"})
    counts.op({"abandoned": True, "energy": _window("estimator", 250), "label": "free text"})
    counts.op({"abandoned": False, "energy": _window("estimator", 50)})
    snap = counts.snapshot()
    assert snap.attempts == {}
    assert snap.aborts == {"noop": 1}
    assert snap.op_windows == {True: 1, False: 1}
    # Agents' own labels never become label values: one op label for every window.
    assert snap.energy_mj == {("estimator", OP_WINDOW): 300}


def test_a_snapshot_does_not_move_with_later_counts() -> None:
    counts = Counts(solvers=("s",))
    before = counts.snapshot()
    counts.result({"status": "error", "solver": "s"})
    assert before.attempts == {}
    assert counts.snapshot().attempts == {("error", "s"): 1}


def test_solvers_the_daemon_does_not_know_share_one_label() -> None:
    counts = Counts(solvers=("reference", "noop", "alice"))
    for i in range(1000):
        counts.result({"status": "resolved", "solver": f"bob/{i}"})
        counts.abort({"solver": f"bob/{i}"})
    counts.result({"status": "resolved", "solver": "alice"})
    counts.result({"status": "resolved", "solver": ["not", "a", "name"]})
    snap = counts.snapshot()
    assert snap.attempts == {("resolved", OTHER_SOLVER): 1001, ("resolved", "alice"): 1}
    assert snap.aborts == {OTHER_SOLVER: 1000}
