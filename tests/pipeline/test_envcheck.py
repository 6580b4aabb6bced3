"""Which baselines show a broken environment, read by the official rules.

The daemon-level attacks (a real Flask release in an environment without
pytest, a PASS_TO_PASS test that needs a system tool the host lacks) are in
tests/integration/test_swebench_daemon.py; these hold the reading of logs.
"""

from __future__ import annotations

import functools

from jouled.contracts import swebench_harness as harness
from jouled.pipeline.envcheck import EVIDENCE_CHARS, diagnose

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
