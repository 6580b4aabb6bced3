"""The cost of sealing a task's hidden test files, per graded run.

Side by side in one run, interleaved round by round, on a bundled task with hidden tests
(its reference fix applied): the graded run as the daemon makes it (`Evaluator.run_check`,
the hidden test modules sealed: shown unreadable, their text on the runner's setup
descriptor and served from memory), and the same run with nothing sealed. Prints a
Markdown section; medians over repeats, and the median of the rounds' own differences.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

from jouled.contracts.contract import iter_tree
from jouled.contracts.task import load_task
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.metering import Metering
from jouled.patch import parse_patch
from jouled.pipeline import check
from jouled.pipeline.evaluate import Evaluator
from jouled.pipeline.graded_tree import prepare_tree, seed
from jouled.pipeline.sandbox import Sandbox
from jouled.pipeline.taskcheck import _NoStore

REPO = Path(__file__).resolve().parents[1]
TASK_DIR = REPO / "tasks" / "smoke" / "semver"


def graded_evaluator(prefix: str) -> tuple[Path, Evaluator]:
    """A scratch directory the sandbox's user may enter, and an `Evaluator` grading in it
    as the daemon does (bwrap sandbox, the estimator's meter, no baseline store)."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(scratch, 0o711)
    metering = Metering(EstimatorMeter(), None, "exclusive")
    return scratch, Evaluator(metering, _NoStore(), scratch / "work", sandbox=Sandbox())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    contract = load_task(TASK_DIR, suite="smoke")
    fix = parse_patch(contract.reference_patch or b"")
    scratch, evaluator = graded_evaluator("jb-sealed-bench-")
    ids = (*(contract.fail_to_pass or ()), *(contract.pass_to_pass or ()))
    protected = [rel for rel, _ in iter_tree(contract.pristine) if contract.is_protected(rel)]
    hidden = check.secret_tests(contract, protected, ids)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"

    def graded(sealed: bool) -> None:
        work = scratch / "run"
        if work.exists():
            shutil.rmtree(work)
        work.mkdir()
        os.chmod(work, 0o711)
        tree = seed(contract, work / "tree")
        prepare_tree(contract, tree, fix)
        if sealed:
            run = evaluator.run_check(contract, tree, ids)
        else:
            with mock.patch.object(check, "secret_tests", lambda *a: []):
                run = evaluator.run_check(contract, tree, ids)
        assert run.exit == 0 and not run.forged, run.result.output

    runs = {"sealed": lambda: graded(True), "open": lambda: graded(False)}
    for fn in runs.values():  # warm the page cache and the lazy imports once
        fn()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1000)
    shutil.rmtree(scratch, ignore_errors=True)
    med = {name: statistics.median(values) for name, values in times.items()}
    paired = sorted(a - b for a, b in zip(times["sealed"], times["open"], strict=True))
    q = len(paired) // 4
    print("## Issue 20: sealed hidden test files\n")
    print(
        f"Task `{contract.task_id}` ({len(hidden)} hidden test module sealed, its reference "
        f"fix applied), {args.repeats} interleaved rounds, medians in ms; "
        f"{os.cpu_count()} cores, Python {platform.python_version()}.\n"
    )
    print("| graded run | median ms |")
    print("|---|---|")
    for name in runs:
        print(f"| {name} | {med[name]:.1f} |")
    print(
        f"\nSealing: the median of the rounds' own differences {statistics.median(paired):+.1f} "
        f"ms ({paired[q]:+.1f} to {paired[-1 - q]:+.1f}), ratio {med['sealed'] / med['open']:.3f}."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
