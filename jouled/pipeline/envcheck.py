"""Whether a baseline run shows an environment that cannot run the instance's tests.

A SWE-bench instance's PASS_TO_PASS tests passed before the fix in the
official environment, and its log named tests there. A baseline run (the
buggy tree with the test patch) in which no test ran at all, the test
framework could not be imported or started, or a PASS_TO_PASS test did not
pass (by the official rules) says the environment is broken, not the patch:
an attempt graded there would be signed `unresolved` whatever it did, so it
is refused with `broken-environment` instead. So is one in which a
FAIL_TO_PASS test skipped or xfailed: the official rules would resolve any
patch that left it so.

Only contracts graded by official rules are judged this way; a task of the
project's own keeps its `invalid` status for a baseline that did not fail.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from jouled.contracts.contract import VerdictRules
from jouled.errors import BrokenEnvironmentError
from jouled.pipeline.testreport import SKIPPED

BROKEN_ENVIRONMENT = BrokenEnvironmentError.code

# How much of the baseline's output a diagnosis carries as its evidence.
EVIDENCE_CHARS = 2000
EVIDENCE_TAIL_LINES = 20
_NAMED_FAILURES = 5
_BLOCK_LINES = 12

# A test framework (or the runner it starts) that is not there to run.
_FRAMEWORK = re.compile(
    r"No module named '?(?:pytest|_pytest|pluggy|tox|nose)\b"
    r"|(?:pytest|tox|py\.test): (?:command )?not found"
)
# A module the run withheld (jouled_monitor.Withheld): ctypes or cffi, which the
# daemon loads only under `--memory-modules allow`.
_WITHHELD = re.compile(r"jouled: (\S+) is withheld from graded runs")
# The shell's status for a command it could not find or execute.
_NOT_FOUND_EXITS = (126, 127)


@dataclass(frozen=True)
class Diagnosis:
    """Why the environment cannot run the tests, and the baseline's output that shows it."""

    reason: str
    evidence: str
    code: str = BROKEN_ENVIRONMENT


def evidence(output: str, needles: Sequence[str] = ()) -> str:
    """What a baseline's output shows: where each needle first appears, then its last lines.

    A needle's block is its line and the few after it (a traceback's start), so a
    failing test's own message is kept; the whole is at most EVIDENCE_CHARS.
    """
    lines = output.splitlines()
    blocks: list[str] = []
    for needle in needles:
        at = next((i for i, line in enumerate(lines) if needle in line), None)
        if at is not None:
            blocks.append("\n".join(lines[at : at + _BLOCK_LINES]))
    head = "\n...\n".join(blocks)[: EVIDENCE_CHARS // 2]
    tail = "\n".join(lines[-EVIDENCE_TAIL_LINES:])
    text = f"{head}\n...\n{tail}" if head else tail
    return text[-EVIDENCE_CHARS:]


def _names(test_ids: Sequence[str]) -> list[str]:
    """Where a failing test shows in a log: its id, and its function's name (pytest sections)."""
    out: list[str] = []
    for test_id in test_ids:
        out.append(test_id)
        bare = test_id.rsplit("::", 1)[-1].split("[", 1)[0]
        if bare != test_id:
            out.append(f" {bare} ")
    return out


def diagnose(
    output: str,
    exit_code: int | None,
    outcomes: dict[str, str],
    rules: VerdictRules,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
) -> Diagnosis | None:
    """The broken environment a baseline run shows, None when it could run the tests.

    A log that names tests is judged by its PASS_TO_PASS tests alone: a
    repository's own tests may print a framework's import error as data. A
    diagnosis of a log in which the run withheld a memory module says so.
    """
    found = _diagnose(output, exit_code, outcomes, rules, fail_to_pass, pass_to_pass)
    withheld = _WITHHELD.search(output)
    if found is None or withheld is None:
        return found
    return Diagnosis(
        f"{found.reason}; the run withheld {withheld.group(1)}, which its tests may need "
        "(jouled serve --memory-modules allow loads it, its results signed reduced)",
        found.evidence
        if withheld.group(0) in found.evidence
        else evidence(output, [withheld.group(0)]),
    )


def _diagnose(
    output: str,
    exit_code: int | None,
    outcomes: dict[str, str],
    rules: VerdictRules,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
) -> Diagnosis | None:
    if not outcomes:
        found = _FRAMEWORK.search(output)
        if found is not None:
            return Diagnosis(
                f"no test ran: the test framework cannot run here ({found.group(0)!r})",
                evidence(output, [found.group(0)]),
            )
        if exit_code in _NOT_FOUND_EXITS:
            return Diagnosis(
                f"no test ran: the test command could not be started (exit {exit_code})",
                evidence(output),
            )
        return Diagnosis("no test ran: the baseline's log names no test", evidence(output))
    verdict = rules(output, fail_to_pass, pass_to_pass)
    failing = list(verdict.tests.get("PASS_TO_PASS", {}).get("failure", ()))
    if not failing:
        return _not_run(output, outcomes, fail_to_pass)
    return _naming(output, failing, f"of {len(pass_to_pass)} PASS_TO_PASS tests fail", "")


def _naming(output: str, ids: Sequence[str], what: str, why: str) -> Diagnosis:
    """A diagnosis naming the first few of `ids`, with their lines of the log as evidence."""
    shown = list(ids[:_NAMED_FAILURES])
    more = f" and {len(ids) - len(shown)} more" if len(ids) > len(shown) else ""
    return Diagnosis(
        f"{len(ids)} {what} before the patch ({', '.join(shown)}{more}){why}",
        evidence(output, _names(shown)),
    )


def _not_run(
    output: str, outcomes: dict[str, str], fail_to_pass: Sequence[str]
) -> Diagnosis | None:
    """FAIL_TO_PASS tests that skipped (or xfailed) before the patch.

    Such a test cannot show the bug here, and the official rules leave a skipped
    test out of both rates (an xfailed one counts as passed): any patch that
    leaves it so would be resolved. No verdict is made from it.
    """
    skipped = [t for t in fail_to_pass if outcomes.get(t) == SKIPPED]
    if not skipped:
        return None
    what = f"of {len(fail_to_pass)} FAIL_TO_PASS tests were skipped or xfailed"
    return _naming(output, skipped, what, ": this environment does not run them")
