"""Outcomes from pytest's -rA summary, and the resolution verdict."""

import textwrap

import pytest

from jouled.pipeline.testreport import (
    ERROR,
    FAILED,
    PASSED,
    SKIPPED,
    parse_ra,
    record_outcome,
)
from jouled.pipeline.testreport import grade as grade_outcomes


def test_the_worst_outcome_of_a_repeated_id_wins() -> None:
    outcomes: dict[str, str] = {}
    for outcome in (PASSED, ERROR, FAILED, SKIPPED):
        record_outcome(outcomes, "t.py::a", outcome)
    record_outcome(outcomes, "t.py::b", SKIPPED)
    record_outcome(outcomes, "t.py::b", PASSED)
    assert outcomes == {"t.py::a": ERROR, "t.py::b": SKIPPED}


# -- the -rA summary ----------------------------------------------------------------------


def test_parse_ra_reads_only_the_last_summary_section() -> None:
    output = textwrap.dedent(
        """\
        ----------------------------- Captured stdout call -----------------------------
        PASSED tests/test_a.py::test_forged
        =========================== short test summary info ============================
        PASSED tests/test_a.py::test_early
        ================================ 1 passed in 0.01s ================================
        =========================== short test summary info ============================
        PASSED tests/test_a.py::test_ok
        SKIPPED [1] tests/test_a.py:12: not today
        XFAIL tests/test_a.py::test_xf - known bug
        XFAIL at setup of tests/test_a.py::test_xs
        XPASS tests/test_a.py::test_xp - lucky
        ERROR tests/test_a.py::test_ok - RuntimeError: teardown broke
        FAILED tests/test_a.py::test_p[sp ace - dash] - AssertionError: a - b
        FAILED tests/test_a.py::TestC::test_m[a::b]
        ======================= 2 failed, 1 passed, 1 error in 0.12s =======================
        PASSED tests/test_a.py::test_after_the_end
        """
    )
    assert parse_ra(output) == {
        "tests/test_a.py::test_ok": ERROR,
        "tests/test_a.py::test_xf": SKIPPED,
        "tests/test_a.py::test_xs": SKIPPED,
        "tests/test_a.py::test_xp": PASSED,
        "tests/test_a.py::test_p[sp ace - dash]": FAILED,
        "tests/test_a.py::TestC::test_m[a::b]": FAILED,
    }


def test_parse_ra_strips_colour_codes() -> None:
    output = (
        "\x1b[36m=== short test summary info ===\x1b[0m\n"
        "\x1b[32mPASSED\x1b[0m tests/test_a.py::\x1b[1mtest_ok\x1b[0m\n"
        "\x1b[32m=== 1 passed in 0.01s ===\x1b[0m\n"
    )
    assert parse_ra(output) == {"tests/test_a.py::test_ok": PASSED}


def test_parse_ra_without_a_summary_is_empty() -> None:
    assert parse_ra("PASSED tests/test_a.py::test_forged\nall good\n") == {}


# -- grading ------------------------------------------------------------------------------

A, B, C = "t.py::test_a", "t.py::test_b", "t.py::test_c"


@pytest.mark.parametrize(
    ("outcomes", "exit_code", "resolved"),
    [
        ({A: PASSED, B: PASSED}, 0, True),
        ({A: PASSED, B: PASSED, C: FAILED}, 1, False),  # every expected id passed, exit disagrees
        ({A: PASSED, B: PASSED}, 1, False),
        ({A: PASSED, B: PASSED}, None, False),  # killed: no exit status at all
        ({A: PASSED}, 0, False),  # exit 0 with an expected id that never ran
        ({A: FAILED, B: PASSED}, 0, False),
        ({A: PASSED, B: SKIPPED}, 0, False),
        ({A: PASSED, B: ERROR}, 0, False),
        ({}, 0, False),
    ],
)
def test_grade_truth_table(outcomes: dict[str, str], exit_code: int | None, resolved: bool) -> None:
    assert grade_outcomes(outcomes, [A], [B], exit_code).resolved is resolved


def test_grade_sorts_expected_ids_into_passed_failed_missing() -> None:
    outcomes = {A: PASSED, B: SKIPPED, "t.py::test_other": PASSED}
    graded = grade_outcomes(outcomes, [A, C], [B, A], 0)
    assert graded.passed == (A,)
    assert graded.failed == (B,)
    assert graded.missing == (C,)
    assert graded.summary() == {"expected": 3, "passed": 1, "failed": 1, "missing": 1}
    assert not graded.resolved


def test_grade_without_expected_ids_resolves_nothing() -> None:
    graded = grade_outcomes({A: PASSED}, [], [], 0)
    assert not graded.resolved
    assert graded.summary() == {"expected": 0, "passed": 0, "failed": 0, "missing": 0}
