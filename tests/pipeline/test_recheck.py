"""The recheck of a resolved attempt, through the pipeline on a bundled task with hidden tests.

`smoke/slidingwindow`'s hidden module compares lists of literals, so its reference fix is
rechecked: run again unchanged and changed, at once. The verdict holds only where both
say so, and an error on the way never leaves `resolved` behind.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from jouled.contracts.contract import Contract
from jouled.contracts.task import load_task
from jouled.errors import SandboxError
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.metering import Metering
from jouled.patch import parse_patch
from jouled.pipeline.check import _strips_asserts
from jouled.pipeline.evaluate import Attempt, Evaluator, same_times
from jouled.pipeline.verdicts import CheckRun, Expected

TASK = Path(__file__).resolve().parents[2] / "tasks" / "smoke" / "slidingwindow"


class Baselines:
    def __init__(self) -> None:
        self.expected: Expected | None = None

    def load_baseline(self, contract: Contract) -> Expected | None:
        return None

    def record_baseline(self, contract: Contract, body: dict[str, Any]) -> int:
        return 0


@pytest.fixture
def graded(tmp_path: Path) -> tuple[Evaluator, Attempt]:
    contract = load_task(TASK, suite="smoke")
    evaluator = Evaluator(Metering(EstimatorMeter(), None, "exclusive"), Baselines(), tmp_path)
    fix = parse_patch(contract.reference_patch or b"")
    return evaluator, Attempt(contract, fix, "reference")


def with_runs(
    monkeypatch: pytest.MonkeyPatch,
    evaluator: Evaluator,
    change: Any,
) -> list[str]:
    """Route the evaluator's checks through `change(n, run, mutated)`; returns what ran."""
    real = Evaluator.run_check
    ran: list[str] = []

    def run_check(
        self: Evaluator,
        contract: Contract,
        tree: Path,
        expected: Sequence[str] = (),
        mutated: Mapping[str, bytes] | None = None,
    ) -> CheckRun:
        ran.append("changed" if mutated else "plain")
        return change(len(ran), real(self, contract, tree, expected, mutated), mutated)

    monkeypatch.setattr(Evaluator, "run_check", run_check)
    return ran


def test_a_reference_fix_is_rechecked_and_resolves(graded: tuple[Evaluator, Attempt]) -> None:
    evaluator, attempt = graded
    body = evaluator.evaluate(attempt)
    assert body["status"] == "resolved", body.get("integrity")
    recheck = body["integrity"]["recheck"]
    assert recheck["tests"] >= 1 and recheck["answered"] == [] and recheck["unrepeated"] == []
    assert {"grade", "rerun", "recheck"} <= set(body["logs"])


def test_an_error_in_the_recheck_leaves_the_attempt_in_error_not_resolved(
    graded: tuple[Evaluator, Attempt], monkeypatch: pytest.MonkeyPatch
) -> None:
    evaluator, attempt = graded

    def change(n: int, run: CheckRun, mutated: Any) -> CheckRun:
        if mutated:
            raise SandboxError("the recheck's sandbox failed")
        return run

    ran = with_runs(monkeypatch, evaluator, change)
    body = evaluator.evaluate(attempt)
    assert "changed" in ran  # the graded run resolved, and the recheck was reached
    assert body["status"] == "error" and body["resolved"] is False
    assert "the recheck's sandbox failed" in str(body["error"])


def test_a_test_that_does_not_pass_again_unchanged_leaves_the_attempt_unresolved(
    graded: tuple[Evaluator, Attempt], monkeypatch: pytest.MonkeyPatch
) -> None:
    evaluator, attempt = graded
    plain = 0

    def change(n: int, run: CheckRun, mutated: Any) -> CheckRun:
        nonlocal plain
        if mutated:
            return run
        plain += 1
        if plain < 4:  # the baseline, the reference run and the graded run
            return run
        outcomes = {test: "failed" for test in run.outcomes}  # the run again: it all fails
        return dataclasses.replace(run, outcomes=outcomes)

    with_runs(monkeypatch, evaluator, change)
    body = evaluator.evaluate(attempt)
    recheck = body["integrity"]["recheck"]
    assert body["status"] == "unresolved", recheck
    assert recheck["unrepeated"] and recheck["answered"] == []


def test_a_recheck_that_times_out_leaves_the_attempt_timed_out(
    graded: tuple[Evaluator, Attempt], monkeypatch: pytest.MonkeyPatch
) -> None:
    evaluator, attempt = graded

    def change(n: int, run: CheckRun, mutated: Any) -> CheckRun:
        if not mutated:
            return run
        return dataclasses.replace(run, result=dataclasses.replace(run.result, timed_out=True))

    ran = with_runs(monkeypatch, evaluator, change)
    body = evaluator.evaluate(attempt)
    assert "changed" in ran
    assert body["status"] == "timeout" and body["resolved"] is False


def test_the_twin_trees_times_are_made_the_same_and_keep_their_order(tmp_path: Path) -> None:
    trees = []
    for n, name in enumerate(("one", "two")):
        tree = tmp_path / name
        (tree / "pkg").mkdir(parents=True)
        (tree / "pkg" / "mod.py").write_text("x = 1\n")
        (tree / "seeded.txt").write_text("seeded\n")
        (tree / "link").symlink_to("seeded.txt")
        base = 1_000_000_000 + n * 7  # the second tree made a little later
        os.utime(tree / "seeded.txt", (base, base))
        os.utime(tree / "pkg" / "mod.py", (base + 60, base + 60))  # patched after
        trees.append(tree)
    same_times(trees)
    one, two = trees
    for rel in ("seeded.txt", "pkg/mod.py", "pkg", ".", "link"):
        a, b = os.lstat(one / rel), os.lstat(two / rel)
        assert (a.st_mtime_ns, a.st_atime_ns) == (b.st_mtime_ns, b.st_atime_ns), rel
    assert os.stat(two / "pkg" / "mod.py").st_mtime > os.stat(two / "seeded.txt").st_mtime


@pytest.mark.parametrize(
    ("command", "strips"),
    [
        (("python", "-m", "pytest", "tests"), False),
        (("python", "-O", "-m", "pytest"), True),
        (("/venv/bin/python3.11", "-BOO", "runtests.py"), True),
        (("python", "-m", "pytest", "-O", "x"), False),  # pytest's option, not Python's
        (("bash", "-c", "PYTHONOPTIMIZE=1 pytest"), True),
        (("./tests/runtests.py", "--parallel", "1"), False),
    ],
)
def test_a_command_that_compiles_asserts_away_is_not_rechecked(
    graded: tuple[Evaluator, Attempt], command: tuple[str, ...], strips: bool
) -> None:
    _, attempt = graded
    assert _strips_asserts(dataclasses.replace(attempt.contract, test_cmd=command)) is strips


@pytest.mark.parametrize("run", ["changed", "twin"])
def test_a_finding_counts_in_the_twin_and_not_in_the_changed_run(
    graded: tuple[Evaluator, Attempt], monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    # The changed run's tests fail by design, down paths the monitor judges warily (Django's
    # schema editor swallowing a failure): a finding there is no evidence of tampering.
    evaluator, attempt = graded
    plain = 0

    def change(n: int, result: CheckRun, mutated: Any) -> CheckRun:
        nonlocal plain
        plain += not mutated
        finding = "a failure was caught by a context manager"
        if (run == "changed" and mutated) or (run == "twin" and not mutated and plain == 4):
            return dataclasses.replace(result, forged=finding)
        return result

    with_runs(monkeypatch, evaluator, change)
    body = evaluator.evaluate(attempt)
    assert body["status"] == ("resolved" if run == "changed" else "tampered"), body["integrity"]
