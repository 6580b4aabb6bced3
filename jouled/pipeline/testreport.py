"""Test ids, test outcomes and the resolution verdict.

A test id is exactly pytest's node id, e.g.
`tests/test_x.py::TestClass::test_m[param-1]`. Outcomes of pytest runs come
from the daemon's runner over its authenticated channel (`pytest_run`); pytest's
`-rA` short summary (`parse_ra`) reads the output of commands that are not run
through it, and is kept in every run's output for people to read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jouled.documents.vocabulary import SEVERITY, Outcome

PASSED, FAILED, SKIPPED, ERROR = (
    Outcome.PASSED.value,
    Outcome.FAILED.value,
    Outcome.SKIPPED.value,
    Outcome.ERROR.value,
)


def record_outcome(outcomes: dict[str, str], test_id: str, outcome: str) -> None:
    """Record `outcome` for `test_id`, keeping the worse one when it is already there."""
    previous = outcomes.get(test_id)
    if previous is None or SEVERITY[Outcome(outcome)] > SEVERITY[Outcome(previous)]:
        outcomes[test_id] = outcome


# -- the -rA short summary ----------------------------------------------------------------

_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+$")
_FINAL_LINE = re.compile(r"^=+ .* =+$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SUMMARY_WORDS = {
    "PASSED": PASSED,
    "FAILED": FAILED,
    "ERROR": ERROR,
    "SKIPPED": SKIPPED,
    "XFAIL": SKIPPED,
    "XPASS": PASSED,
}
_PHASE_PREFIX = re.compile(r"^at (setup|call|teardown) of ")


def _summary_lines(output: str) -> list[str]:
    """The lines of the last short test summary section, [] when there is none.

    Only that section counts: captured output printed elsewhere can contain
    lines that look like summary lines.
    """
    lines = _ANSI.sub("", output).splitlines()
    starts = [i for i, line in enumerate(lines) if _SUMMARY_HEADER.match(line)]
    if not starts:
        return []
    section: list[str] = []
    for line in lines[starts[-1] + 1 :]:
        if _FINAL_LINE.match(line):
            break
        section.append(line)
    return section


def _summary_id(rest: str) -> str | None:
    """The node id at the start of a summary line's remainder ("<id>" or "<id> - <message>")."""
    rest = _PHASE_PREFIX.sub("", rest)
    if not rest or rest.startswith("["):  # "SKIPPED [1] file:line: reason" names no test
        return None
    # The message follows " - ", which a parameter id may contain too: take the
    # shortest prefix whose brackets are complete.
    pieces = rest.split(" - ")
    for n in range(1, len(pieces) + 1):
        candidate = " - ".join(pieces[:n])
        if "[" not in candidate or candidate.endswith("]"):
            return candidate.rstrip()
    return rest.rstrip()


def parse_ra(output: str) -> dict[str, str]:
    """Test id -> outcome from pytest's `-rA` short test summary in `output`.

    Lines without a test id (folded `SKIPPED [n] file:line` lines) are ignored,
    so skipped tests are absent here, not "skipped". Ids are relative to the
    directory pytest ran in, which equals the junit ids when that is the rootdir.
    """
    outcomes: dict[str, str] = {}
    for line in _summary_lines(output):
        word, _, rest = line.partition(" ")
        outcome = _SUMMARY_WORDS.get(word)
        test_id = _summary_id(rest) if outcome else None
        if outcome and test_id:
            record_outcome(outcomes, test_id, outcome)
    return outcomes


# -- grading ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grade:
    resolved: bool
    expected: int
    passed: tuple[str, ...]  # expected ids that ran and passed
    failed: tuple[str, ...]  # expected ids that ran and did not pass
    missing: tuple[str, ...]  # expected ids that never ran (deselected, not collected, renamed)

    def summary(self) -> dict[str, int]:
        return {
            "expected": self.expected,
            "passed": len(self.passed),
            "failed": len(self.failed),
            "missing": len(self.missing),
        }


def grade(
    outcomes: Mapping[str, str],
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    exit_code: int | None,
) -> Grade:
    """Resolved iff every expected id ran and passed and the command exited 0.

    Neither signal is trusted alone: exit 0 with an expected id missing is
    unresolved, and so is every id passing under a nonzero (or no) exit status.
    With no expected ids at all nothing is resolved: there is nothing to check.
    Skipped and xfailed tests did not pass.
    """
    expected = list(dict.fromkeys([*fail_to_pass, *pass_to_pass]))
    passed = tuple(t for t in expected if outcomes.get(t) == PASSED)
    failed = tuple(t for t in expected if t in outcomes and outcomes[t] != PASSED)
    missing = tuple(t for t in expected if t not in outcomes)
    resolved = bool(expected) and not failed and not missing and exit_code == 0
    return Grade(resolved, len(expected), passed, failed, missing)
