"""`jouled tasks check`: every task's tests must fail before and pass with the reference."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jouled.config import Config
from jouled.contracts import Contract, TaskRegistry
from jouled.errors import JouledError
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.metering import Metering
from jouled.pipeline.evaluate import Evaluator
from jouled.pipeline.testreport import grade
from jouled.pipeline.verdicts import derive_expected, graded_exit


class _NoStore:
    """Checking records nothing: the daemon records baselines when it first grades a task."""

    def load_baseline(self, contract: Contract) -> None:
        return None

    def record_baseline(self, contract: Contract, body: dict[str, Any]) -> int:
        return -1


def check_task(evaluator: Evaluator, contract: Contract, work: Path) -> dict[str, Any]:
    before, after = evaluator.check_pristine(contract, work, reference=True)
    report: dict[str, Any] = {"task_id": contract.task_id, "digest": contract.digest}
    if after is None and not contract.has_expected_ids:
        return {
            **report,
            "ok": False,
            "reason": "no reference/ and no expected test ids",
            "fail_to_pass": [],
            "pass_to_pass": [],
        }
    expected = derive_expected(contract, before, after)
    ok, reason = expected.valid, expected.reason
    if ok and after is not None:
        graded = grade(
            after.outcomes,
            expected.fail_to_pass,
            expected.pass_to_pass,
            graded_exit(contract, after.exit),
        )
        if not graded.resolved:
            ok = False
            reason = (
                f"the reference does not resolve: {len(graded.failed)} failed, "
                f"{len(graded.missing)} missing"
            )
    return {
        **report,
        "ok": ok,
        "reason": reason,
        "fail_to_pass": list(expected.fail_to_pass),
        "pass_to_pass": list(expected.pass_to_pass),
    }


def check_tasks(config: Config, progress: Callable[[str], None] = print) -> list[dict[str, Any]]:
    registry = TaskRegistry.from_dirs(config.task_dirs)
    metering = Metering(EstimatorMeter(), None, "exclusive")
    reports = []
    with tempfile.TemporaryDirectory(prefix="jouled-check-") as tmp:
        evaluator = Evaluator(metering, _NoStore(), Path(tmp))
        for i, contract in enumerate(registry.list(), 1):
            progress(f"[{i}/{len(registry)}] {contract.task_id}")
            with tempfile.TemporaryDirectory(dir=tmp) as work:
                try:
                    reports.append(check_task(evaluator, contract, Path(work)))
                except JouledError as err:  # one broken task must not hide the others
                    reports.append(
                        {
                            "task_id": contract.task_id,
                            "digest": contract.digest,
                            "ok": False,
                            "reason": err.diagnostics(),
                            "fail_to_pass": [],
                            "pass_to_pass": [],
                        }
                    )
    return reports
