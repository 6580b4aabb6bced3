"""The cost of rechecking a resolved attempt, against the graded run it follows.

On bundled tasks with hidden tests (their reference fix applied), round by round: the
graded run as the daemon makes it (a fresh tree seeded and patched, `run_check`), then
the recheck the daemon adds when that run resolves (`Evaluator._recheck`: two more fresh
trees run at once, one with the sealed tests' compared values changed). Prints a Markdown
section: medians over repeats and the ratio of the two, per task.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import time
from pathlib import Path

from sealed_bench import graded_evaluator

from jouled.contracts.contract import Contract
from jouled.contracts.task import load_task
from jouled.patch import Patch, parse_patch
from jouled.pipeline.evaluate import Evaluator
from jouled.pipeline.graded_tree import prepare_tree, seed
from jouled.pipeline.verdicts import derive_expected

REPO = Path(__file__).resolve().parents[1]
TASKS = ("slidingwindow",)  # semver's one compared string is its input too: no recheck


def one_round(
    evaluator: Evaluator, scratch: Path, contract: Contract, fix: Patch, ids: tuple[str, ...]
) -> tuple[float, float, int]:
    """(the graded run's ms, the recheck's ms, how many tests had to fail in it)."""
    work = scratch / "run"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    os.chmod(work, 0o711)
    start = time.perf_counter()
    tree = seed(contract, work / "tree")
    prepare_tree(contract, tree, fix)
    first = evaluator.run_check(contract, tree, ids)
    graded = time.perf_counter() - start
    assert first.exit == 0 and not first.forged, first.result.output
    start = time.perf_counter()
    recheck = evaluator._recheck(contract, fix, ids, first)
    rechecked = time.perf_counter() - start
    assert recheck is not None and not recheck.forged() and recheck.status() == "resolved"
    return graded * 1000, rechecked * 1000, len(recheck.must_fail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    scratch, evaluator = graded_evaluator("jb-recheck-bench-")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    rows = []
    for name in TASKS:
        contract = load_task(REPO / "tasks" / "smoke" / name, suite="smoke")
        fix = parse_patch(contract.reference_patch or b"")
        base = scratch / "baseline"
        base.mkdir()
        os.chmod(base, 0o711)
        expected = derive_expected(
            contract, *evaluator.check_pristine(contract, base, reference=True)
        )
        shutil.rmtree(base)
        ids = (*expected.fail_to_pass, *expected.pass_to_pass)

        one = (evaluator, scratch, contract, fix, ids)
        one_round(*one)  # warm the page cache and the lazy imports once
        graded_ms, recheck_ms = [], []
        for _ in range(args.repeats):
            graded, rechecked, must_fail = one_round(*one)
            graded_ms.append(graded)
            recheck_ms.append(rechecked)
        g, r = statistics.median(graded_ms), statistics.median(recheck_ms)
        rows.append((contract.task_id, must_fail, g, r))
    shutil.rmtree(scratch, ignore_errors=True)
    print("## Issue 20: the recheck of a resolved attempt\n")
    print(
        f"{args.repeats} rounds per task, its reference fix applied, medians in ms; "
        f"{os.cpu_count()} cores, Python {platform.python_version()}.\n"
    )
    print("| task | tests that must fail | graded run | recheck | recheck / graded |")
    print("|---|---|---|---|---|")
    for task, must_fail, g, r in rows:
        print(f"| {task} | {must_fail} | {g:.1f} | {r:.1f} | {r / g:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
