"""What a run's outcomes say: the expected ids a baseline fixes, the integrity level a
run is held to, and the checks of a log against the run it claims to describe.

The evaluation pipeline (`evaluate`) runs the tests; this module judges what came
back, with no sandbox, meter or ledger of its own.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jouled.contracts.contract import Contract, Verdict
from jouled.errors import BrokenEnvironmentError
from jouled.pipeline import envcheck, pytest_run
from jouled.pipeline.limits import RunResult
from jouled.pipeline.testreport import ERROR as TEST_ERROR
from jouled.pipeline.testreport import FAILED, PASSED, SKIPPED, Grade, grade


@dataclass(frozen=True)
class Expected:
    """What grading a contract checks, fixed once per task digest."""

    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    valid: bool  # False: the tests did not fail before the fix; attempts are `invalid`
    reason: str = ""
    seq: int | None = None  # the baseline ledger entry
    # "broken-environment": the environment cannot run the tests; attempts are refused
    code: str = ""
    evidence: str = ""  # the baseline output's excerpt that shows why
    # Expected ids that skipped or xfailed in the baseline run; None: not recorded (a
    # baseline signed by an older daemon), so PASS_TO_PASS tests are not judged by it
    skipped_before: tuple[str, ...] | None = ()

    @property
    def broken(self) -> bool:
        return self.code == envcheck.BROKEN_ENVIRONMENT

    def refusal(self, contract: Contract) -> BrokenEnvironmentError:
        where = f" (baseline entry {self.seq})" if self.seq is not None else ""
        return BrokenEnvironmentError(
            f"{contract.task_id}: not graded, the environment cannot run its tests: "
            f"{self.reason}{where}; the baseline's log:\n{self.evidence}",
            evidence=self.evidence,
            hint="rebuild the instance's environment (`jouled swebench prepare --force`, "
            "docs/swebench.md) and submit again: the next attempt runs the baseline anew",
        )


@dataclass(frozen=True)
class CheckRun:
    result: RunResult
    outcomes: dict[str, str]  # the task's own tests (canaries left out)
    # "channel" (the daemon's pytest runner), "rA" (pytest's summary in the output),
    # "output" (the output read by the contract's own parser) or "none"
    report: str
    exit: int | None  # the exit status graded: the planted must-fail canaries discounted
    forged: str = ""  # why the run's report cannot be genuine; "" when nothing says so
    canaries: int = 0  # canary tests planted
    level: str = "none"  # report integrity (documents.INTEGRITY_LEVELS)


def integrity_level(plan: pytest_run.Plan | None, version: tuple[int, int] | None) -> str:
    """How far a run's outcomes hold against the code under test (documents.INTEGRITY_LEVELS).

    Through the daemon's runner: "monitor" where the interpreter has audit hooks
    (3.8+), "reduced" where it has not; any other command: "none".
    """
    if plan is None:
        return "none"
    if plan.level:
        return plan.level
    return "monitor" if (version or sys.version_info[:2]) >= (3, 8) else "reduced"


def sealed_level(level: str, isolation: Mapping[str, Any]) -> str:
    """A monitor holds only where no process of the run can write the test process's
    memory (the launcher's seal: `isolation.memory` "sealed"); elsewhere it is `reduced`."""
    if level == "monitor" and isolation.get("memory") != "sealed":
        return "reduced"
    return level


def summary(graded: Grade) -> str:
    s = graded.summary()
    return f"{s['passed']}/{s['expected']} expected tests passed, {s['missing']} missing"


def exit_contradicts(exit_code: int | None, outcomes: Mapping[str, str]) -> str:
    """Why a run's output cannot describe it: a failing exit with no failing test in it.

    A test runner exits nonzero because something failed, and says what; a log
    that reports tests and not one failure, from a run that exited nonzero,
    was written by something other than the runner. "" when nothing says so.
    """
    if exit_code in (0, None) or not outcomes:
        return ""
    if any(o in (FAILED, TEST_ERROR) for o in outcomes.values()):
        return ""
    return f"the command exited {exit_code} but its output reports no failing test"


def unseen_passes(official: Verdict, outcomes: Mapping[str, str]) -> str:
    """Why the log the official rules read cannot be the run's: an expected test they count
    as passed that the runner's channel did not see pass (or xfail). "" when none.

    The log is written by the process under test, and anything in it can print
    the lines a parser reads as passes; the channel is the runner's own word.
    """
    for kind, split in official.tests.items():
        for test_id in split.get("success", ()):
            seen = outcomes.get(test_id)
            if seen not in (PASSED, SKIPPED):
                return (
                    f"the log reports {kind} test {test_id} passed "
                    f"but the runner saw it {seen or 'not run'}"
                )
    return ""


def ended_unrun(outcomes: Mapping[str, str], expected: Expected) -> str:
    """Why a run the official rules resolve did not show the fix: an expected test that ran
    before the patch and skipped or xfailed after it. "" when none did.

    Those rules count an xfailed test as passed and leave a skipped one out of
    both rates, so a patch that ends the tests it would fail that way (raising
    pytest's `skip`/`xfail` or unittest's `SkipTest` from the code under test,
    or breaking what a test imports so that it skips) is resolved by them
    without fixing anything. A test that skipped before the patch too (a
    PASS_TO_PASS test marked xfail) is not the patch's doing; a FAIL_TO_PASS
    test never skips in a baseline that grades (`envcheck`).
    """
    before = set(expected.skipped_before or ())
    judged = [("FAIL_TO_PASS", expected.fail_to_pass)]
    if expected.skipped_before is not None:  # unknown for a baseline signed without it
        judged.append(("PASS_TO_PASS", expected.pass_to_pass))
    for kind, ids in judged:
        for test_id in ids:
            if outcomes.get(test_id) == SKIPPED and test_id not in before:
                return (
                    f"{kind} test {test_id} skipped or xfailed after the patch and ran before "
                    "the patch: the official rules would not count it as failed"
                )
    return ""


def verdict_wire(
    official: Verdict, strict: Grade, expected: Expected, check: CheckRun
) -> dict[str, Any]:
    """The contract's verdict as signed, with the project's stricter checks beside it.

    Those checks never change it: only a forged run (`tampered`) or a timeout
    gives the result another status. `agrees` says whether the strict grading
    came out the same way.
    """
    return {
        **official.to_wire(),
        "strict": {
            "resolved": strict.resolved,
            "agrees": strict.resolved == official.resolved,
            "exit_code": check.result.exit_code,
            "output": "truncated" if check.result.output_dropped else "complete",
        },
        "baseline": {"valid": expected.valid, "reason": expected.reason},
    }


def graded_exit(contract: Contract, exit_code: int | None) -> int | None:
    """The exit status grading holds the run to.

    A run must exit 0 as well as pass every expected id, unless the contract's
    policy leaves "some test failed" (1) to the ids alone (SWE-bench's own
    harness ignores pytest's status, and real test modules hold tests that fail
    before and after the fix and are in neither list); interrupted, internal,
    usage and collection failures (2-5) and killed runs still fail.
    """
    if contract.grading.failing_exit_judged_by_ids and exit_code == 1:
        return 0
    return exit_code


def derive_expected(contract: Contract, before: CheckRun, after: CheckRun | None) -> Expected:
    """Fix the expected ids: given by the task, or the ids the reference flips."""
    if before.result.timed_out:
        return Expected((), (), False, "the baseline run timed out")
    if contract.fail_to_pass is not None and contract.pass_to_pass is not None:
        f2p, p2p = contract.fail_to_pass, contract.pass_to_pass
    else:
        assert after is not None
        if after.forged:
            return Expected((), (), False, f"the reference run was not genuine: {after.forged}")
        if after.exit != 0:
            return Expected((), (), False, "the reference solution does not pass its tests")
        f2p = tuple(
            sorted(
                t
                for t, o in after.outcomes.items()
                if o == PASSED and before.outcomes.get(t) != PASSED
            )
        )
        p2p = tuple(
            sorted(
                t
                for t, o in after.outcomes.items()
                if o == PASSED and before.outcomes.get(t) == PASSED
            )
        )
    if not f2p:
        return Expected(f2p, p2p, False, "no test fails before the fix")
    if before.forged:
        return Expected(f2p, p2p, False, f"the baseline run was not genuine: {before.forged}")
    skipped = tuple(t for t in (*f2p, *p2p) if before.outcomes.get(t) == SKIPPED)
    rules = contract.grading.verdict
    if rules is not None:
        broken = envcheck.diagnose(
            before.result.output, before.result.exit_code, before.outcomes, rules, f2p, p2p
        )
        if broken is not None:
            return Expected(f2p, p2p, False, broken.reason, None, broken.code, broken.evidence)
    still = grade(before.outcomes, f2p, p2p, graded_exit(contract, before.exit))
    if still.resolved:
        return Expected(f2p, p2p, False, "the tests already pass on the buggy tree")
    if any(before.outcomes.get(t) == PASSED for t in f2p):
        return Expected(f2p, p2p, False, "some fail_to_pass tests pass before the fix")
    if any(before.outcomes.get(t) != PASSED for t in p2p):
        return Expected(
            f2p, p2p, False, "some pass_to_pass tests fail before the fix", skipped_before=skipped
        )
    return Expected(f2p, p2p, True, skipped_before=skipped)
