"""Which baselines show a broken environment, read by the official rules, and which
runs those rules resolve without showing the fix (`ended_unrun`).

The daemon-level attacks (a real Flask release in an environment without
pytest, a PASS_TO_PASS test that needs a system tool the host lacks) are in
tests/integration/test_swebench_daemon.py; these hold the reading of logs.
"""

from __future__ import annotations

import functools

from jouled.contracts import swebench_harness as harness
from jouled.pipeline.envcheck import EVIDENCE_CHARS, diagnose
from jouled.pipeline.verdicts import Expected, ended_unrun, unseen_passes

RULES = functools.partial(harness.official_verdict, "pytest")
F2P = ["tests/test_a.py::test_new"]
P2P = ["tests/test_a.py::test_old"]


def test_a_log_that_names_no_test_is_a_broken_environment() -> None:
    log = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'pytest'\n"
    found = diagnose(log, 1, {}, RULES, F2P, P2P)
    assert found is not None and found.code == "broken-environment"
    assert "test framework" in found.reason and "No module named 'pytest'" in found.evidence
    missing = diagnose("sh: 1: tox: not found\n", 127, {}, RULES, F2P, P2P)
    assert missing is not None and "no test ran" in missing.reason
    silent = diagnose("py39 run-test: commands[0]\n" * 5000, 0, {}, RULES, F2P, P2P)
    assert silent is not None and "names no test" in silent.reason
    assert len(silent.evidence) <= EVIDENCE_CHARS


def test_a_pass_to_pass_test_that_fails_before_the_patch_is_named_with_its_traceback() -> None:
    log = (
        "_____ test_old _____\n    def test_old():\n>       assert dot()\n"
        "E       FileNotFoundError: 'dot'\n"
        "FAILED tests/test_a.py::test_new - assert 1 == 2\n"
        "FAILED tests/test_a.py::test_old - FileNotFoundError\n"
    )
    outcomes = {F2P[0]: "failed", P2P[0]: "failed"}
    found = diagnose(log, 1, outcomes, RULES, F2P, P2P)
    assert found is not None and "1 of 1 PASS_TO_PASS" in found.reason
    assert P2P[0] in found.reason and "FileNotFoundError: 'dot'" in found.evidence


def test_a_baseline_failing_where_a_memory_module_was_withheld_says_so() -> None:
    log = (
        "_____ test_old _____\n    import threadpoolctl\n"
        "E   ImportError: jouled: _ctypes is withheld from graded runs (it hands Python "
        "code the process's memory); a daemon run with --memory-modules allow loads it\n"
        "FAILED tests/test_a.py::test_new - assert 1 == 2\n"
        "FAILED tests/test_a.py::test_old - ImportError\n"
    )
    found = diagnose(log, 1, {F2P[0]: "failed", P2P[0]: "failed"}, RULES, F2P, P2P)
    assert found is not None and "1 of 1 PASS_TO_PASS" in found.reason
    assert "withheld _ctypes" in found.reason and "--memory-modules allow" in found.reason
    assert "import threadpoolctl" in found.evidence
    # A sound baseline that withheld a module its tests did without is no diagnosis.
    sound = "ImportError: jouled: _ctypes is withheld from graded runs\nPASSED " + P2P[0]
    assert diagnose(sound, 1, {F2P[0]: "failed", P2P[0]: "passed"}, RULES, F2P, P2P) is None


def test_a_sound_baseline_and_a_framework_error_printed_as_data_are_not() -> None:
    # pytest-dev/pytest's own tests print import errors as data; tests ran and P2P passed.
    log = (
        "E   No module named 'pytest'\n"
        "FAILED tests/test_a.py::test_new - assert 1 == 2\n"
        "PASSED tests/test_a.py::test_old\n"
    )
    outcomes = {F2P[0]: "failed", P2P[0]: "passed"}
    assert diagnose(log, 1, outcomes, RULES, F2P, P2P) is None
    # No PASS_TO_PASS at all, and the new test fails: sound.
    assert diagnose(log, 1, {F2P[0]: "failed"}, RULES, F2P, []) is None


def test_a_fail_to_pass_test_that_skips_or_xfails_before_the_patch_is_a_broken_environment() -> (
    None
):
    # The official rules count an xfailed test as passed and leave a skipped one out: an
    # empty patch would be resolved by a baseline like these.
    for status in ("XFAIL", "SKIPPED"):
        log = f"{status} {F2P[0]} - needs a tool\nPASSED {P2P[0]}\n"
        outcomes = {F2P[0]: "skipped", P2P[0]: "passed"}
        found = diagnose(log, 0, outcomes, RULES, F2P, P2P)
        assert found is not None and found.code == "broken-environment", status
        assert "1 of 1 FAIL_TO_PASS tests were skipped or xfailed" in found.reason
        assert F2P[0] in found.reason and "needs a tool" in found.evidence


def test_a_target_test_that_ran_before_and_skips_after_the_patch_is_named() -> None:
    expected = Expected(tuple(F2P), tuple(P2P), True, skipped_before=())
    assert ended_unrun({F2P[0]: "passed", P2P[0]: "passed"}, expected) == ""
    found = ended_unrun({F2P[0]: "skipped", P2P[0]: "passed"}, expected)
    assert found.startswith(f"FAIL_TO_PASS test {F2P[0]} skipped or xfailed after the patch")
    found = ended_unrun({F2P[0]: "passed", P2P[0]: "skipped"}, expected)
    assert found.startswith(f"PASS_TO_PASS test {P2P[0]}")
    # A PASS_TO_PASS test that xfailed in the baseline too (marked xfail) is not the patch's.
    marked = Expected(tuple(F2P), tuple(P2P), True, skipped_before=(P2P[0],))
    assert ended_unrun({F2P[0]: "passed", P2P[0]: "skipped"}, marked) == ""
    # A baseline signed without the list: its FAIL_TO_PASS tests are still judged.
    older = Expected(tuple(F2P), tuple(P2P), True, skipped_before=None)
    assert ended_unrun({F2P[0]: "passed", P2P[0]: "skipped"}, older) == ""
    assert ended_unrun({F2P[0]: "skipped", P2P[0]: "passed"}, older) != ""


def test_a_pass_the_log_reports_and_the_channel_did_not_see_is_named() -> None:
    log = f"FAILED {F2P[0]} - assert 1 == 2\nPASSED {P2P[0]}\nPASSED {F2P[0]}\n"
    verdict = RULES(log, F2P, P2P)
    assert verdict.resolved  # the last line the parser reads wins
    found = unseen_passes(verdict, {F2P[0]: "failed", P2P[0]: "passed"})
    assert (
        found == f"the log reports FAIL_TO_PASS test {F2P[0]} passed but the runner saw it failed"
    )
    assert "not run" in unseen_passes(verdict, {P2P[0]: "passed"})
    assert unseen_passes(verdict, {F2P[0]: "passed", P2P[0]: "passed"}) == ""
    # an xfail counts as passed by the official rules and is a skip on the channel
    xfailed = RULES(f"XFAIL {F2P[0]} - reason\nPASSED {P2P[0]}\n", F2P, P2P)
    assert unseen_passes(xfailed, {F2P[0]: "skipped", P2P[0]: "passed"}) == ""
