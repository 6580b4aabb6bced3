"""Paired comparison of two solvers: the statistics against hand-computed values."""

from __future__ import annotations

from typing import Any

import pytest

from jouled.compare import (
    MIN_PAIRS,
    bootstrap_mean_interval,
    compare,
    mcnemar_exact,
    quantile,
    summary,
)
from jouled.documents.comparison import Comparison
from jouled.errors import UsageError


def result(
    solver: str,
    task: str,
    resolved: bool,
    *,
    model: str = "",
    grade_mj: int | None = 1000,
    solve_mj: int | None = None,
    usd_micros: int = 0,
    rollout: int = 0,
    digest: str = "",
    status: str = "",
    reliable: bool = True,
) -> dict[str, Any]:
    def window(mj: int | None) -> dict[str, Any]:
        return {
            "gross_mj": mj,
            "marginal_mj": mj,
            "valid": mj is not None,
            "reliable": reliable,
            "source": "rapl",
            "wall_ms": 100,
        }

    energy = {"grade": window(grade_mj)}
    if solve_mj is not None:
        energy["solve"] = window(solve_mj)
    return {
        "task_id": f"s/{task}",
        "suite": "s",
        "task_digest": digest or f"digest-{task}",
        "status": status or ("resolved" if resolved else "unresolved"),
        "resolved": resolved,
        "solver": solver,
        "model": model,
        "rollout": rollout,
        "claimed": {"usd_micros": usd_micros} if usd_micros else {},
        "energy": energy,
    }


# -- the statistics, by hand -------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_only", "b_only", "p"),
    [
        # 2 * (C(10,0) + C(10,1) + C(10,2)) / 2**10 = 2 * 56 / 1024
        (8, 2, 0.109375),
        (2, 8, 0.109375),
        (10, 0, 2 / 1024),
        (6, 0, 2 / 64),  # 0.03125: the smallest all-one-way count under 0.05
        (5, 0, 2 / 32),  # 0.0625: five one-way discordant pairs are not enough
        (5, 5, 1.0),  # the doubled tail passes 1 and is capped
        (1, 0, 1.0),
        (0, 0, 1.0),
        # 2 * (1 + 20 + 190) / 2**20
        (18, 2, 422 / 1048576),
    ],
)
def test_mcnemar_exact_matches_the_binomial_tail(a_only: int, b_only: int, p: float) -> None:
    assert mcnemar_exact(a_only, b_only) == p


def test_mcnemar_refuses_negative_counts() -> None:
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def test_quantiles_interpolate_between_order_statistics() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert quantile(values, 0.25) == 1.75
    assert quantile(values, 0.5) == 2.5
    assert quantile(values, 0.75) == 3.25
    assert quantile(values, 0.0) == 1.0 and quantile(values, 1.0) == 4.0
    assert quantile([7.0], 0.3) == 7.0
    s = summary([4.0, 1.0, 3.0, 2.0])
    assert s is not None and s.to_dict() == {
        "n": 4,
        "mean": 2.5,
        "min": 1.0,
        "q1": 1.75,
        "median": 2.5,
        "q3": 3.25,
        "max": 4.0,
    }
    assert summary([]) is None


def test_bootstrap_of_a_constant_difference_is_that_difference() -> None:
    assert bootstrap_mean_interval([3.0] * 12) == (3.0, 3.0)


def test_bootstrap_of_two_pairs_spans_every_resampled_mean() -> None:
    # Resampling [0, 1] twice gives means 0, 0.5, 1 with odds 1/4, 1/2, 1/4: the
    # 2.5th and 97.5th percentiles of 10,000 such means are the extremes.
    assert bootstrap_mean_interval([0.0, 1.0]) == (0.0, 1.0)


def test_bootstrap_is_deterministic_and_brackets_the_mean() -> None:
    diffs = [float(x) for x in (-3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8)]
    first = bootstrap_mean_interval(diffs)
    assert first == bootstrap_mean_interval(diffs)
    # Pinned: the seed fixes every resample, so a ledger always gives the same interval.
    assert first == pytest.approx((2.0, 67 / 12))
    low, high = first
    assert low < sum(diffs) / len(diffs) < high
    assert min(diffs) < low and high < max(diffs)


# -- pairing -------------------------------------------------------------------------------


def paired_suite(a_wins: int, b_wins: int, both: int, neither: int) -> list[dict[str, Any]]:
    out = []
    kinds = [(True, False)] * a_wins + [(False, True)] * b_wins
    kinds += [(True, True)] * both + [(False, False)] * neither
    for i, (ra, rb) in enumerate(kinds):
        out.append(result("a", f"t{i}", ra, grade_mj=2000 + i, usd_micros=3000))
        out.append(result("b", f"t{i}", rb, grade_mj=1000 + i, usd_micros=1000))
    return out


def test_eight_against_two_discordant_is_not_enough() -> None:
    doc = compare(paired_suite(8, 2, 3, 2), "a", "b").to_dict()
    res = doc["resolution"]
    assert doc["paired_tasks"] == 15 and doc["enough_pairs"]
    assert res["first_rollout"] == {"both": 3, "a_only": 8, "b_only": 2, "neither": 2}
    assert res["p_value"] == 0.109375
    assert res["a_rate"] == 11 / 15 and res["b_rate"] == 5 / 15
    assert res["difference"] == pytest.approx(6 / 15)
    assert not res["conclusive"]
    assert "no difference in resolution the test can detect" in res["verdict"]
    assert [r["task_id"] for r in doc["disagreements"]] == sorted(f"s/t{i}" for i in range(10))


def test_the_comparison_reads_back_into_its_class_unchanged() -> None:
    # Too few pairs leaves intervals and a side's model null; they are written, not left out.
    for doc in (
        compare(paired_suite(8, 2, 3, 2), "a", "b"),
        compare([result("a", "x", True), result("b", "x", False)], "a", "b"),
    ):
        sent = doc.to_dict()
        back = Comparison.parse(sent)
        assert back == doc
        assert list(back.to_dict().items()) == list(sent.items())
    assert sent["a"]["model"] is None and sent["resolution"]["ci_low"] is None
    assert sent["usd"]["a"] is None and sent["pairs"][0]["a"]["usd"] is None


def test_a_clear_win_is_called_with_its_p_value() -> None:
    doc = compare(paired_suite(10, 0, 2, 0), "a", "b").to_dict()
    res = doc["resolution"]
    assert res["p_value"] == 2 / 1024 and res["conclusive"]
    assert res["verdict"].startswith("A resolves more tasks")
    assert doc["conclusive"]


def test_energy_and_dollars_are_paired_per_task() -> None:
    doc = compare(paired_suite(5, 5, 2, 0), "a", "b").to_dict()
    joules, usd = doc["joules"], doc["usd"]
    # Every task: A spent 1 J more and claimed 0.002 $ more.
    assert joules["tasks"] == 12 and joules["difference"]["median"] == pytest.approx(1.0)
    assert (joules["ci_low"], joules["ci_high"]) == pytest.approx((1.0, 1.0))
    assert joules["conclusive"] and joules["verdict"].startswith("A used more energy per task")
    assert joules["a"]["min"] == 2.0 and joules["b"]["max"] == 1.011
    assert usd["tasks"] == 12 and usd["usd_source"] == "claimed"
    assert (usd["ci_low"], usd["ci_high"]) == pytest.approx((0.002, 0.002))
    assert usd["verdict"].startswith("A claimed more dollars per task than B")
    assert doc["resolution"]["p_value"] == 1.0


def test_too_few_pairs_says_so() -> None:
    doc = compare(paired_suite(3, 0, 1, 0), "a", "b").to_dict()
    assert doc["paired_tasks"] == 4 < MIN_PAIRS
    assert not doc["enough_pairs"] and not doc["conclusive"]
    assert doc["resolution"]["verdict"].startswith("too few paired tasks")
    assert doc["joules"]["verdict"].startswith("too few paired tasks")
    assert doc["joules"]["ci_low"] is None
    assert any("only 4 paired task(s)" in n for n in doc["notes"])


def test_no_discordant_pairs_says_so() -> None:
    doc = compare(paired_suite(0, 0, 6, 6), "a", "b").to_dict()
    res = doc["resolution"]
    assert res["p_value"] == 1.0 and not res["conclusive"]
    assert res["verdict"].startswith("no discordant pairs")
    assert doc["disagreements"] == []


def test_only_tasks_both_graded_at_one_digest_are_paired() -> None:
    bodies = [
        result("a", "x", True),
        result("b", "x", False),
        result("a", "y", True, digest="old"),
        result("b", "y", True, digest="new"),
        result("a", "z", True),
        result("b", "w", True),
        result("b", "x", True, status="error"),  # an infrastructure fault: not counted
    ]
    doc = compare(bodies, "a", "b").to_dict()
    assert doc["paired_tasks"] == 1
    assert [r["task_id"] for r in doc["pairs"]] == ["s/x"]
    assert doc["pairs"][0]["b"]["attempts"] == 1
    assert doc["digest_changed"] == ["s/y"]
    assert (doc["only_a"], doc["only_b"]) == (2, 2)
    assert any("different digests" in n for n in doc["notes"])


def test_rollouts_give_rates_and_the_first_rollout_is_tested() -> None:
    bodies = [
        result("a", "x", False, rollout=1),
        result("a", "x", True, rollout=0),
        result("a", "x", True, rollout=2),
        result("b", "x", False, rollout=0),
    ]
    doc = compare(bodies, "a", "b").to_dict()
    pair = doc["pairs"][0]
    assert pair["a"]["rate"] == 2 / 3 and pair["a"]["first_resolved"] is True
    assert doc["resolution"]["first_rollout"]["a_only"] == 1
    assert any("several rollouts per task" in n for n in doc["notes"])


def test_energy_leaves_out_tasks_with_a_failed_read_and_dollars_without_claims() -> None:
    bodies = [
        result("a", "x", True, grade_mj=None, usd_micros=5),
        result("b", "x", True, usd_micros=5),
        result("a", "y", True, solve_mj=500),
        result("b", "y", True),
    ]
    doc = compare(bodies, "a", "b").to_dict()
    assert doc["joules"]["tasks"] == 1 and doc["joules"]["left_out"] == 1
    # The frontier's cost: solve + grade.
    assert doc["joules"]["difference"]["mean"] == pytest.approx(0.5)
    assert doc["usd"]["tasks"] == 1 and doc["usd"]["left_out"] == 1
    assert any("claim dollars on every rollout" in n for n in doc["notes"])


def test_sides_may_name_a_model() -> None:
    bodies = [
        result("agent", "x", True, model="big"),
        result("agent", "x", False, model="small"),
    ]
    doc = compare(bodies, "agent@big", "agent@small").to_dict()
    assert doc["a"]["models"] == ["big"] and doc["b"]["model"] == "small"
    assert doc["resolution"]["first_rollout"]["a_only"] == 1
    with pytest.raises(UsageError, match="select some of the same attempts"):
        compare(bodies, "agent", "agent@small")


def test_a_solver_whose_name_holds_an_at_sign_is_taken_whole() -> None:
    bodies = [result("me@host", "x", True), result("b", "x", False)]
    assert compare(bodies, "me@host", "b").a.solver == "me@host"


def test_an_unknown_side_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no counted attempts by 'nobody'"):
        compare([result("a", "x", True)], "a", "nobody")
