"""Frontier aggregation, Pareto flags, best-of-k and the statistics beneath them."""

from __future__ import annotations

import itertools
import json
import math
import random
from fractions import Fraction
from typing import Any

import pytest

from jouled.best_of_k import best_of_k
from jouled.errors import UsageError
from jouled.frontier import frontier_rows, pareto, pass_at_k, wilson_interval
from jouled.frontier_attempts import digest_set_id


def window(
    gross: int | None,
    marginal: int | None = None,
    *,
    wall_ms: int = 100,
    source: str = "estimator",
    reliable: bool = True,
    valid: bool = True,
) -> dict[str, Any]:
    if marginal is None and gross is not None:
        marginal = gross // 2
    return {
        "gross_mj": gross,
        "marginal_mj": marginal,
        "idle_mj": None if gross is None or marginal is None else gross - marginal,
        "source": source,
        "reliable": reliable,
        "attribution": "exclusive",
        "wall_ms": wall_ms,
        "valid": valid,
    }


def result(
    task: str,
    *,
    solver: str = "reference",
    model: str = "",
    status: str = "resolved",
    resolved: bool | None = None,
    rollout: int = 0,
    energy: dict[str, Any] | None = None,
    claimed: dict[str, int] | None = None,
    suite: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task_id": task,
        "task_digest": "ab" * 32,
        "patch_sha256": "cd" * 32,
        "status": status,
        "resolved": status == "resolved" if resolved is None else resolved,
        "tests": {"expected": 1, "passed": 1, "failed": 0, "missing": 0},
        "solver": solver,
        "model": model,
        "agent": "",
        "run_id": "r1",
        "rollout": rollout,
        "energy": {"grade": window(1000)} if energy is None else energy,
        "claimed": claimed or {},
        "sandbox": "process+netns",
        "version": "0.1.0",
    }
    body["suite"] = suite if suite is not None else task.split("/", 1)[0]
    return body


def only_row(results: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    rows = frontier_rows(results, **kwargs)
    assert len(rows) == 1
    return rows[0]


# -- wilson ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        # z = 1.96, n = 10, so z^2/n = 0.38416. At 0/10 the upper bound is
        # (z^2/n) / (1 + z^2/n) exactly; 5/10 is symmetric about 0.5.
        (0, 10, 0.0, 0.277540),
        (5, 10, 0.236589, 0.763411),
        (10, 10, 0.722460, 1.0),
    ],
)
def test_wilson_matches_hand_computed_values(
    successes: int, n: int, low: float, high: float
) -> None:
    got = wilson_interval(successes, n)
    assert got[0] == pytest.approx(low, abs=1e-6)
    assert got[1] == pytest.approx(high, abs=1e-6)


@pytest.mark.parametrize(("successes", "n"), [(1, 3), (7, 20), (2, 2), (0, 1), (33, 100)])
def test_wilson_bounds_are_roots_of_the_score_equation(successes: int, n: int) -> None:
    # The interval is every p with (p_hat - p)^2 <= z^2 p (1 - p) / n; its ends are the roots.
    z = 1.96
    p_hat = successes / n
    for p in wilson_interval(successes, n, z):
        assert (p_hat - p) ** 2 == pytest.approx(z * z * p * (1 - p) / n, abs=1e-12)


def test_wilson_with_no_trials_is_total_ignorance() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(("successes", "n"), [(-1, 3), (4, 3), (0, -1)])
def test_wilson_rejects_impossible_counts(successes: int, n: int) -> None:
    with pytest.raises(ValueError):
        wilson_interval(successes, n)


# -- pass@k ----------------------------------------------------------------------------


def brute_pass_at_k(n: int, c: int, k: int) -> Fraction:
    subsets = list(itertools.combinations(range(n), k))
    # Samples 0..c-1 are the passing ones.
    hits = sum(any(i < c for i in subset) for subset in subsets)
    return Fraction(hits, len(subsets))


def test_pass_at_k_equals_enumeration_over_subsets() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = float(brute_pass_at_k(n, c, k))
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


def test_pass_at_k_is_stable_for_large_n() -> None:
    n, c, k = 2000, 700, 300
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001, rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_rejects_impossible_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


# -- pareto ----------------------------------------------------------------------------


def test_pareto_drops_dominated_points() -> None:
    points = [(0.9, 10.0), (0.5, 2.0), (0.5, 5.0), (0.4, 20.0), (0.95, 30.0)]
    assert pareto(points) == [True, True, False, False, True]


def test_pareto_keeps_identical_points_but_not_weak_ties() -> None:
    # Two identical points do not dominate each other; equal cost at higher
    # resolution, or equal resolution at lower cost, does dominate.
    points = [(0.5, 3.0), (0.5, 3.0), (0.8, 3.0), (0.8, 3.0), (0.8, 4.0)]
    assert pareto(points) == [False, False, True, True, False]


def test_pareto_never_includes_unbounded_cost() -> None:
    assert pareto([(1.0, math.inf), (0.2, 5.0)]) == [False, True]
    assert pareto([(1.0, math.nan), (0.2, 5.0)]) == [False, True]
    assert pareto([(0.0, math.inf), (0.0, math.inf)]) == [False, False]


def test_pareto_of_nothing_is_empty() -> None:
    assert pareto([]) == []


def test_pareto_rejects_nan_resolution() -> None:
    with pytest.raises(ValueError):
        pareto([(math.nan, 1.0)])


# -- frontier rows ---------------------------------------------------------------------


def smoke_results() -> list[dict[str, Any]]:
    return [
        result(
            "smoke/lrucache",
            energy={
                "baseline": window(50_000, 40_000, wall_ms=9_000),
                "solve": window(1000, 400, wall_ms=100),
                "grade": window(2000, 800, wall_ms=200, reliable=False),
            },
            claimed={"tokens_in": 10, "tokens_out": 5, "usd_micros": 1_500_000, "joules_mj": 7000},
        ),
        result(
            "smoke/parser",
            energy={"grade": window(3000, 1000, wall_ms=500)},
        ),
        result("smoke/lrucache", solver="noop", status="unresolved", energy={"grade": window(500)}),
        result("smoke/parser", solver="noop", status="unresolved", energy={"grade": window(500)}),
    ]


def test_rows_have_exact_figures() -> None:
    rows = frontier_rows(smoke_results())
    low, high = wilson_interval(2, 2)
    assert rows[0] == {
        "suite": "smoke",
        "solver": "reference",
        "model": "",
        "revision": 0,
        "digest_set": digest_set_id([("smoke/lrucache", "ab" * 32), ("smoke/parser", "ab" * 32)]),
        "merged_digests": 0,
        "attempts": 2,
        "tasks": 2,
        "resolved": 2,
        "resolution": 1.0,
        "ci_low": low,
        "ci_high": high,
        "joules_total": 6.0,
        "joules_marginal": 2.2,
        "joules_per_resolved": 3.0,
        "wall_median_s": 0.4,
        # Only the lrucache attempt claimed dollars: the parser one is not $0.
        "usd_total": 1.5,
        "usd_per_resolved": 1.5,
        "usd_claimed_share": 0.5,
        "usd_source": "claimed",
        "claimed_joules": 7.0,
        "energy_source": "estimator",
        "reliable_share": 2 / 3,
        "invalid_windows": 0,
        "invalid": 0,
        "tampered": 0,
        "audit_flagged": 0,
        "integrity": "none",  # the smoke results record no level
        "errors": 0,
        "timeouts": 0,
        "op_joules": 0.0,
        "op_windows": 0,
        "op_reliable_share": None,
        "op_abandoned": 0,
        "pareto": True,
        "pareto_axis": "joules",
    }


def test_solver_that_resolves_nothing_has_null_cost_and_is_off_the_frontier() -> None:
    noop = frontier_rows(smoke_results())[1]
    assert noop["solver"] == "noop"
    assert noop["resolved"] == 0
    assert noop["resolution"] == 0.0
    assert noop["joules_total"] == 1.0
    assert noop["joules_per_resolved"] is None
    assert noop["usd_per_resolved"] is None
    # Cheaper in wall time than the reference, yet it bought nothing.
    for axis in ("joules", "usd", "wall"):
        by_solver = {r["solver"]: r for r in frontier_rows(smoke_results(), axis=axis)}
        assert by_solver["noop"]["pareto"] is False
        # Half the reference's attempts claimed dollars: no verdict on that axis.
        assert by_solver["reference"]["pareto"] is (None if axis == "usd" else True)


def test_rows_serialise_as_the_wire_format() -> None:
    rows = frontier_rows(smoke_results())
    # allow_nan=False: an infinite cost must never leak into JSON.
    decoded = json.loads(json.dumps({"rows": rows}, allow_nan=False))
    required = {
        "suite",
        "solver",
        "model",
        "attempts",
        "tasks",
        "resolved",
        "resolution",
        "joules_total",
        "joules_per_resolved",
        "wall_median_s",
        "usd_total",
        "energy_source",
        "reliable_share",
        "pareto",
    }
    for row in decoded["rows"]:
        assert required <= row.keys()
    assert decoded["rows"][1]["joules_per_resolved"] is None


def test_baseline_energy_is_not_charged_to_attempts() -> None:
    row = only_row(
        [result("smoke/a", energy={"baseline": window(90_000, wall_ms=4000), "grade": window(10)})]
    )
    assert row["joules_total"] == 0.01
    assert row["wall_median_s"] == 0.1

    baseline_only = only_row([result("smoke/a", energy={"baseline": window(90_000)})])
    assert baseline_only["joules_total"] == 0.0
    assert baseline_only["wall_median_s"] is None
    assert baseline_only["energy_source"] == "none"
    assert baseline_only["reliable_share"] is None


def test_invalid_windows_add_no_joules_and_are_counted() -> None:
    row = only_row(
        [
            result(
                "smoke/a",
                energy={
                    "solve": window(4000, 1000, wall_ms=300),
                    "grade": window(None, None, wall_ms=200, valid=False, reliable=False),
                },
            ),
            # Flagged valid, yet its figures are null: still not zero energy.
            result("smoke/b", energy={"grade": window(None, None, wall_ms=100)}),
        ]
    )
    assert row["joules_total"] == 4.0
    assert row["joules_marginal"] == 1.0
    assert row["invalid_windows"] == 2
    assert row["reliable_share"] == pytest.approx(1 / 3)
    # The wall clock still ran through an invalid window.
    assert row["wall_median_s"] == pytest.approx(0.3)


def test_error_attempts_are_left_out_and_counted() -> None:
    row = only_row(
        [
            result("smoke/a"),
            result("smoke/b", status="unresolved"),
            result("smoke/c", status="error", energy={"grade": window(99_000)}),
        ]
    )
    assert row["attempts"] == 2
    assert row["tasks"] == 2
    assert row["resolution"] == 0.5
    assert row["errors"] == 1
    assert row["joules_total"] == 2.0


def test_a_group_of_only_errors_still_shows_up() -> None:
    row = only_row([result("smoke/a", status="error")])
    assert row["attempts"] == 0
    assert row["errors"] == 1
    assert row["resolution"] == 0.0
    assert (row["ci_low"], row["ci_high"]) == (0.0, 1.0)
    assert row["pareto"] is False


def test_invalid_attempts_count_but_never_resolve() -> None:
    row = only_row(
        [
            result("smoke/a"),
            result("smoke/b", status="invalid", resolved=True),
            result("smoke/c", status="timeout"),
        ]
    )
    assert row["attempts"] == 3
    assert row["resolved"] == 1
    assert row["invalid"] == 1
    assert row["timeouts"] == 1
    assert row["joules_total"] == 3.0


def test_tampered_attempts_count_but_never_resolve() -> None:
    # A forged report may well claim success in both fields: it still earns nothing.
    row = only_row(
        [
            result("smoke/a"),
            result("smoke/b", status="tampered", resolved=True),
            result("smoke/c", status="tampered", energy={"grade": window(4000)}),
            result("smoke/d", status="invalid"),
        ]
    )
    assert row["attempts"] == 4
    assert row["tasks"] == 4
    assert row["resolved"] == 1
    assert row["resolution"] == 0.25
    assert row["tampered"] == 2
    assert row["invalid"] == 1
    assert row["joules_total"] == 7.0  # the forged runs' work was done and metered
    assert row["joules_per_resolved"] == 7.0


def test_a_group_of_only_tampered_attempts_is_off_the_frontier() -> None:
    rows = frontier_rows(
        [result("smoke/a", solver="forger", status="tampered", resolved=True), result("smoke/a")]
    )
    by_solver = {r["solver"]: r for r in rows}
    assert by_solver["forger"]["resolved"] == 0
    assert by_solver["forger"]["joules_per_resolved"] is None
    assert by_solver["forger"]["pareto"] is False
    assert by_solver["reference"]["pareto"] is True


def test_tampered_column_survives_the_wire_format() -> None:
    rows = frontier_rows([result("smoke/a", status="tampered")])
    decoded = json.loads(json.dumps({"rows": rows}, allow_nan=False))
    assert decoded["rows"][0]["tampered"] == 1
    assert decoded["rows"][0]["resolved"] == 0


FLAG = {"code": "sys-modules", "path": "pkg/core.py", "line": 3, "detail": "sys.modules"}


def flagged(task: str, audit: list[dict[str, Any]] | None, **kwargs: Any) -> dict[str, Any]:
    body = result(task, **kwargs)
    if audit is not None:
        body["audit"] = audit
    return body


def test_audit_flagged_counts_attempts_with_any_flag() -> None:
    row = only_row(
        [
            flagged("smoke/a", [FLAG, {**FLAG, "line": 9}]),  # two flags, one attempt
            flagged("smoke/b", [FLAG], status="unresolved"),
            flagged("smoke/c", []),
            flagged("smoke/d", None),  # written before results were audited
            flagged("smoke/e", [FLAG], status="error"),  # errors stay out, as everywhere
        ]
    )
    assert row["attempts"] == 4
    assert row["audit_flagged"] == 2
    assert row["errors"] == 1


def test_audit_flags_change_no_verdict_or_cost() -> None:
    plain = [result("smoke/a"), result("smoke/b", status="unresolved")]
    marked = [flagged("smoke/a", [FLAG]), flagged("smoke/b", [FLAG], status="unresolved")]
    a, b = only_row(plain), only_row(marked)
    assert b["audit_flagged"] == 2
    assert {**b, "audit_flagged": 0} == a


def test_best_of_k_counts_tampered_within_k() -> None:
    results = [
        result("s/a", status="tampered", resolved=True, rollout=0),
        result("s/a", status="resolved", rollout=1),
        result("s/b", status="unresolved", rollout=0),
        result("s/b", status="tampered", rollout=1),
    ]
    rows = best_of_k(results)
    assert [r["tampered"] for r in rows] == [1, 2]
    assert [r["resolved_within_k"] for r in rows] == [0, 1]
    assert rows[0]["pass_at_k"] == pytest.approx(0.25)  # a: 1 of 2 samples; b: none


def test_status_and_flag_must_agree_to_resolve() -> None:
    row = only_row([result("smoke/a", resolved=False)])
    assert row["resolved"] == 0


def test_claimed_energy_stays_out_of_attested_columns() -> None:
    row = only_row(
        [result("smoke/a", energy={}, claimed={"joules_mj": 5_000_000, "usd_micros": 20})]
    )
    assert row["joules_total"] == 0.0
    assert row["claimed_joules"] == 5000.0
    assert row["usd_total"] == 0.00002


def test_energy_source_labels() -> None:
    rapl_nvml = window(5, source="rapl+nvml")
    measured = only_row([result("smoke/a", energy={"solve": rapl_nvml, "grade": rapl_nvml})])
    assert measured["energy_source"] == "rapl+nvml"
    mixed = only_row(
        [
            result("smoke/a", energy={"grade": window(5, source="rapl+nvml")}),
            result("smoke/b", energy={"grade": window(5, source="estimator")}),
        ]
    )
    assert mixed["energy_source"] == "mixed:estimator,rapl+nvml"


def test_pareto_is_per_suite_and_rows_sort_by_suite_resolution_cost() -> None:
    results = [
        # suite "big": fast resolves 1/2 cheaply, slow resolves 2/2 dearly, meh is dominated.
        result("big/a", solver="fast", energy={"grade": window(1000)}),
        result("big/b", solver="fast", status="unresolved", energy={"grade": window(1000)}),
        result("big/a", solver="slow", energy={"grade": window(8000)}),
        result("big/b", solver="slow", energy={"grade": window(8000)}),
        result("big/a", solver="meh", energy={"grade": window(3000)}),
        result("big/b", solver="meh", status="unresolved", energy={"grade": window(3000)}),
        # suite "alpha": meh alone is on its own suite's frontier.
        result("alpha/x", solver="meh", energy={"grade": window(3000)}),
    ]
    rows = frontier_rows(results)
    order = [(r["suite"], r["solver"], r["pareto"]) for r in rows]
    assert order == [
        ("alpha", "meh", True),
        ("big", "slow", True),
        ("big", "fast", True),
        ("big", "meh", False),
    ]


def test_axis_changes_the_frontier() -> None:
    results = [
        result("s/a", solver="cheap_wall", energy={"grade": window(9000, wall_ms=100)}),
        result("s/a", solver="cheap_joules", energy={"grade": window(1000, wall_ms=900)}),
    ]
    by_joules = {r["solver"]: r["pareto"] for r in frontier_rows(results, axis="joules")}
    by_wall = {r["solver"]: r["pareto"] for r in frontier_rows(results, axis="wall")}
    assert by_joules == {"cheap_joules": True, "cheap_wall": False}
    assert by_wall == {"cheap_joules": False, "cheap_wall": True}
    assert [r["solver"] for r in frontier_rows(results, axis="wall")] == [
        "cheap_wall",
        "cheap_joules",
    ]


def test_usd_axis_uses_claimed_dollars_per_resolved() -> None:
    results = [
        result("s/a", solver="pricey", claimed={"usd_micros": 900}),
        result("s/a", solver="thrifty", claimed={"usd_micros": 100}),
    ]
    flags = {r["solver"]: r["pareto"] for r in frontier_rows(results, axis="usd")}
    assert flags == {"pricey": False, "thrifty": True}


def test_models_split_rows() -> None:
    rows = frontier_rows(
        [result("s/a", solver="agent", model="m1"), result("s/a", solver="agent", model="m2")]
    )
    assert [(r["solver"], r["model"]) for r in rows] == [("agent", "m1"), ("agent", "m2")]


def test_suite_filter_and_suite_from_task_id() -> None:
    body = result("smoke/a")
    del body["suite"]
    results = [body, result("other/b")]
    assert [r["suite"] for r in frontier_rows(results)] == ["other", "smoke"]
    assert only_row(results, suite="smoke")["attempts"] == 1
    assert frontier_rows(results, suite="absent") == []


def test_output_does_not_depend_on_input_order() -> None:
    results = smoke_results() + [result("smoke/c", solver="x", rollout=r) for r in range(3)]
    shuffled = list(results)
    random.Random(7).shuffle(shuffled)
    assert frontier_rows(shuffled) == frontier_rows(results)
    assert best_of_k(shuffled) == best_of_k(results)


def test_unknown_axis_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        frontier_rows([], axis="carbon")


def test_unknown_status_is_refused_not_guessed() -> None:
    with pytest.raises(UsageError):
        frontier_rows([result("smoke/a", status="skipped")])


# -- best of k -------------------------------------------------------------------------


def rollouts(task: str, outcomes: str, **kwargs: Any) -> list[dict[str, Any]]:
    """One result per character: 'y' resolved, 'n' unresolved, at rollouts 0, 1, ..."""
    return [
        result(
            task,
            status="resolved" if o == "y" else "unresolved",
            rollout=i,
            energy={"grade": window(1000 * (i + 1))},
            claimed={"usd_micros": 250_000},
            **kwargs,
        )
        for i, o in enumerate(outcomes)
    ]


def test_best_of_k_exact_figures() -> None:
    rows = best_of_k(rollouts("s/a", "nyn") + rollouts("s/b", "nnn"))
    assert [r["k"] for r in rows] == [1, 2, 3]
    assert [r["resolved_within_k"] for r in rows] == [0, 1, 1]
    assert [r["resolution_within_k"] for r in rows] == [0.0, 0.5, 0.5]
    # Rollout i costs (i + 1) J on each of two tasks.
    assert [r["joules_cumulative"] for r in rows] == [2.0, 6.0, 12.0]
    assert [r["usd_cumulative"] for r in rows] == [0.5, 1.0, 1.5]
    assert [r["attempts"] for r in rows] == [2, 4, 6]
    # Task a: n=3, c=1 gives 1/3, 2/3, 1; task b never passes.
    assert [r["pass_at_k"] for r in rows] == pytest.approx([1 / 6, 1 / 3, 1 / 2])
    assert all(r["tasks"] == 2 and r["pass_at_k_tasks"] == 2 for r in rows)


def test_best_of_k_is_monotone_in_k() -> None:
    rng = random.Random(11)
    results = []
    for t in range(12):
        outcomes = "".join(rng.choice("yn") for _ in range(6))
        results += rollouts(f"s/t{t}", outcomes)
    rows = best_of_k(results)
    assert len(rows) == 6
    for before, after in itertools.pairwise(rows):
        assert after["resolved_within_k"] >= before["resolved_within_k"]
        assert after["joules_cumulative"] > before["joules_cumulative"]
        assert after["usd_cumulative"] > before["usd_cumulative"]
        assert after["pass_at_k"] >= before["pass_at_k"]
    assert rows[-1]["resolved_within_k"] == sum(
        any(r["resolved"] for r in results if r["task_id"] == t)
        for t in {r["task_id"] for r in results}
    )


def test_repeated_rollout_index_counts_as_two_samples() -> None:
    results = [
        result("s/a", status="unresolved", rollout=0),
        result("s/a", status="resolved", rollout=0),
    ]
    (row,) = best_of_k(results)
    assert row["k"] == 1
    assert row["attempts"] == 2
    assert row["resolved_within_k"] == 1
    assert row["pass_at_k"] == pytest.approx(0.5)


def test_pass_at_k_only_averages_tasks_with_enough_samples() -> None:
    rows = best_of_k(rollouts("s/a", "ny") + rollouts("s/b", "y"))
    assert [r["pass_at_k_tasks"] for r in rows] == [2, 1]
    assert rows[0]["pass_at_k"] == pytest.approx((0.5 + 1.0) / 2)
    assert rows[1]["pass_at_k"] == pytest.approx(1.0)


def test_best_of_k_leaves_errors_out() -> None:
    results = [*rollouts("s/a", "n"), result("s/a", status="error", rollout=4)]
    rows = best_of_k(results)
    assert [r["k"] for r in rows] == [1]
    assert rows[0]["attempts"] == 1
    assert best_of_k([result("s/a", status="error")]) == []


def test_best_of_k_groups_by_solver_and_filters_suite() -> None:
    results = rollouts("s/a", "y", solver="one") + rollouts("s/a", "nn", solver="two")
    results += rollouts("t/a", "y")
    rows = best_of_k(results, suite="s")
    assert [(r["solver"], r["k"]) for r in rows] == [("one", 1), ("two", 1), ("two", 2)]
    assert [r["resolved_within_k"] for r in rows] == [1, 0, 0]


# -- best-of-k without the oracle ----------------------------------------------------------


def _rollout(task: str, rollout: int, resolved: bool, visible: int, patch: str) -> dict:
    return {
        "task_id": f"s/{task}",
        "suite": "s",
        "solver": "agent",
        "model": "m",
        "rollout": rollout,
        "status": "resolved" if resolved else "unresolved",
        "resolved": resolved,
        "patch_sha256": patch,
        "tests": {"expected": 4, "passed": 4 if resolved else visible},
        "tests_visible": {"expected": 2, "passed": visible},
        "energy": {
            "grade": {
                "gross_mj": 1000,
                "marginal_mj": 500,
                "idle_mj": 500,
                "source": "estimator",
                "reliable": True,
                "wall_ms": 10,
            }
        },
        "claimed": {},
    }


def test_the_visible_selector_prefers_visible_passes_then_agreement() -> None:
    results = [
        # a: rollout 1 resolves and passes more visible tests: picked at k=2.
        _rollout("a", 0, False, 1, "p1"),
        _rollout("a", 1, True, 2, "p2"),
        # b: both pass every visible test; the hidden ones decide; two agree on p4.
        _rollout("b", 0, False, 2, "p3"),
        _rollout("b", 1, True, 2, "p4"),
        _rollout("b", 2, True, 2, "p4"),
        # c: the resolving rollout looks worse on visible tests: the selector misses it.
        _rollout("c", 0, False, 2, "p5"),
        _rollout("c", 1, True, 1, "p6"),
    ]
    rows = {r["k"]: r for r in best_of_k(results)}
    assert rows[1]["resolved_within_k"] == 0 and rows[1]["selected_resolved"] == 0
    assert rows[2]["resolved_within_k"] == 3 and rows[2]["selected_resolved"] == 1
    assert rows[3]["resolved_within_k"] == 3 and rows[3]["selected_resolved"] == 2
    assert rows[3]["selected_resolution"] == pytest.approx(2 / 3)
    # The selector never beats the oracle and costs the same rollouts.
    assert all(r["selected_resolved"] <= r["resolved_within_k"] for r in rows.values())
    assert rows[3]["joules_cumulative"] == 7.0


def _graded(task: str, level: str | None, **kw: Any) -> dict[str, Any]:
    body = result(task, **kw)
    if level is not None:
        body["integrity"] = {"report": "channel", "canaries": 2, "level": level}
    return body


def test_a_row_shows_the_weakest_integrity_its_successes_rest_on() -> None:
    rows = {
        r["solver"]: r
        for r in frontier_rows(
            [
                # Monitor-checked successes, and a failure read from output alone: the
                # failure earns nothing, so it does not weaken the row.
                _graded("s/a", "monitor", solver="strong"),
                _graded("s/b", "monitor", solver="strong"),
                _graded("s/c", "none", solver="strong", status="unresolved"),
                # One success checked only from inside the process.
                _graded("s/a", "monitor", solver="mixed"),
                _graded("s/b", "reduced", solver="mixed"),
                # A success that records no level is trusted no further than its output.
                _graded("s/a", "monitor", solver="old"),
                _graded("s/b", None, solver="old"),
                # A level this reader does not know counts as none.
                _graded("s/a", "hypervisor", solver="odd"),
                _graded("s/a", "monitor", solver="failing", status="unresolved"),
            ]
        )
    }
    assert rows["strong"]["integrity"] == "monitor"
    assert rows["mixed"]["integrity"] == "reduced"
    assert rows["old"]["integrity"] == "none"
    assert rows["odd"]["integrity"] == "none"
    assert rows["failing"]["integrity"] is None


def test_pooled_revisions_keep_the_weakest_integrity() -> None:
    first = _graded("s/a", "monitor")
    changed = {**_graded("s/a", "reduced"), "task_digest": "ef" * 32}
    split = frontier_rows([first, changed])
    assert [r["integrity"] for r in split] == ["monitor", "reduced"]
    (merged,) = frontier_rows([first, changed], merge_digests=True)
    assert merged["integrity"] == "reduced"
