"""The isolation's cost per attempt: bare, the previous launcher, and the bwrap sandbox.

Side by side in one run, interleaved round by round so that machine noise
lands on all three alike, on one bundled task's fixed tree:

- bare: the task's test command as a person runs it (`subprocess.run`);
- launcher: the process sandbox this project used before bubblewrap (its own
  session, rlimits, a private network namespace and a uid drop where the host
  allowed), loaded from the git history (REFERENCE below) so it is measured
  as it was, not kept in the package;
- bwrap: what the daemon runs now for that command: the bwrap sandbox, the
  daemon's pytest runner with the pristine configuration, read-only tests,
  canaries and the authenticated report channel, under the integrity monitor
  (`Evaluator.run_check`);
- bwrap, no monitor: the same, with the pytest runner as it was before the
  integrity monitor (loaded from the git history, RUNNER_BEFORE below), so the
  monitor's own cost is the difference between the two columns (both sealed);
- bwrap, sealed no-op: the no-op launched as a graded run is, its memory sealed
  (seccomp and Landlock), so the seal's own cost is its difference from the no-op;
- with `--monitor-from COMMIT`, bwrap tests with the monitor's files as they were
  at COMMIT, so a change to the monitor is measured against what it replaced.

Each configuration is also timed on a no-op command (`python -c pass`) to
show the launch cost alone. Prints a Markdown section; medians over repeats.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from jouled.contracts.task import load_task
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.metering import Metering
from jouled.patch import parse_patch
from jouled.pipeline import pytest_run, runners
from jouled.pipeline.evaluate import Evaluator
from jouled.pipeline.graded_tree import prepare_tree, seed
from jouled.pipeline.limits import Limits
from jouled.pipeline.pytest_run import plain_argv
from jouled.pipeline.sandbox import Sandbox, sandbox_level
from jouled.pipeline.taskcheck import _NoStore

REPO = Path(__file__).resolve().parents[1]
TASK_DIR = REPO / "tasks" / "smoke" / "lrucache"
# The last commit whose launcher (then jouled/sandbox.py, with jouled/testreport.py
# for its pytest command) ran every attempt.
REFERENCE = "5886ce9"
# The last commit whose pytest runner ran without the integrity monitor.
RUNNER_BEFORE = "1c26758"


def _from_git(path: str, name: str) -> ModuleType:
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{REFERENCE}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(source, f"{REFERENCE}:{path}", "exec"), module.__dict__)
    return module


def without_monitor(ro_marker: str = "jouled_pytest.py") -> Callable[..., object]:
    """`pytest_run.plan` as it ran before the monitor: the old runner, imported from the
    read-only directory, its key alone on fd 3, its canaries on the command line."""
    old_runner = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{RUNNER_BEFORE}:jouled/pipeline/jouled_pytest.py"],
        capture_output=True,
        check=True,
    ).stdout
    current = pytest_run.plan

    def plan(test_cmd, tree, ro_dir, layout, expected=(), **kw):  # type: ignore[no-untyped-def]
        made = current(test_cmd, tree, ro_dir, layout, expected, **kw)
        assert made is not None
        (ro_dir / ro_marker).write_bytes(old_runner)
        trusted = json.loads((ro_dir / "trusted.json").read_text())
        files = sorted({*trusted["protected"], *made.canaries.files})
        (ro_dir / "protected.json").write_text(json.dumps({"root": layout.workdir, "files": files}))
        os.chmod(ro_dir / "protected.json", 0o644)
        argv = list(made.argv)
        at = argv.index("-c") + 1
        argv[at] = (
            "import sys; sys.path[:] = [p for p in sys.path if p]; "
            f"sys.path.insert(0, {layout.ro!r}); import jouled_pytest; jouled_pytest.main()"
        )
        argv += list(made.canaries.files)
        return dataclasses.replace(made, argv=argv, setup=made.key)

    return plan


def monitor_from(commit: str, scratch: Path) -> tuple[tuple[Path, ...], Path]:
    """The monitor's files as they were at `commit`, and the pytest runner then, written
    under `scratch` (for `runners.MONITOR` and `pytest_run.RUNNER`, which the runner's
    install copies from); the files of the monitor's list it did not have yet are left
    out (their code was then in the others)."""
    folder = scratch / f"monitor-{commit}"
    folder.mkdir()
    files = []
    for path in (*runners.MONITOR, pytest_run.RUNNER):
        rel = path.relative_to(REPO).as_posix()
        shown = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{commit}:{rel}"], capture_output=True
        )
        if shown.returncode == 0:
            (folder / path.name).write_bytes(shown.stdout)
            files.append(folder / path.name)
    return tuple(
        f for f in files if f.name != pytest_run.RUNNER.name
    ), folder / pytest_run.RUNNER.name


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--monitor-from",
        metavar="COMMIT",
        help="also time the graded run with the monitor's files as they were at COMMIT",
    )
    args = parser.parse_args()

    old_sandbox = _from_git("jouled/sandbox.py", "old_sandbox")
    old_report = _from_git("jouled/testreport.py", "old_testreport")
    contract = load_task(TASK_DIR, suite="smoke")
    fix = parse_patch(contract.reference_patch or b"")
    scratch = Path(tempfile.mkdtemp(prefix="jb-sandbox-bench-"))
    os.chmod(scratch, 0o711)
    box = Sandbox()
    evaluator = Evaluator(
        Metering(EstimatorMeter(), None, "exclusive"), _NoStore(), scratch / "work", sandbox=box
    )
    limits = Limits(timeout_s=contract.timeout_s)
    ids = (*(contract.fail_to_pass or ()), *(contract.pass_to_pass or ()))

    def tree(name: str) -> Path:
        work = scratch / name
        if work.exists():
            shutil.rmtree(work)
        work.mkdir()
        os.chmod(work, 0o711)
        t = seed(contract, work / "tree")
        prepare_tree(contract, t, fix)
        return t

    # pytest as the graded runs start it: no plugin of the environment's loaded unasked
    # (the development environment's hypothesis plugin alone costs more than the run)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env = {"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    bare_argv = plain_argv(contract.test_cmd)
    noop = [sys.executable, "-c", "pass"]

    def bare(cmd: list[str]) -> None:
        done = subprocess.run(cmd, cwd=tree("bare"), env=env, capture_output=True)
        assert done.returncode in (0, 1), done.stdout

    def launcher(test: bool) -> None:
        t = tree("launcher")
        report = t.parent / "report"
        report.mkdir()
        cmd = old_report.pytest_argv(contract.test_cmd, report / "junit.xml") if test else noop
        result = old_sandbox.run(cmd, t, limits=old_sandbox.Limits(60), writable=(t, report))
        assert result.exit_code == 0, result.output

    def bwrapped(test: bool) -> None:
        t = tree("bwrap")
        if test:
            check = evaluator.run_check(contract, t, ids)
            assert check.exit == 0 and not check.forged, check.result.output
            assert check.level == "monitor"
        else:
            assert box.run(noop, t, limits=limits).exit_code == 0

    def sealed() -> None:  # a no-op launched as a graded run is: its memory sealed
        result = box.run(noop, tree("sealed"), limits=limits, channel_out=True)
        assert result.exit_code == 0 and result.isolation.get("memory") == "sealed", result

    old_plan = without_monitor()

    def unmonitored() -> None:
        t = tree("unmonitored")
        current, pytest_run.plan = pytest_run.plan, old_plan  # type: ignore[assignment]
        try:
            check = evaluator.run_check(contract, t, ids)
        finally:
            pytest_run.plan = current  # type: ignore[assignment]
        assert check.exit == 0, check.result.output

    earlier, earlier_runner = (
        monitor_from(args.monitor_from, scratch) if args.monitor_from else ((), pytest_run.RUNNER)
    )

    def earlier_monitor() -> None:
        current, runners.MONITOR = runners.MONITOR, earlier  # type: ignore[misc]
        runner, pytest_run.RUNNER = pytest_run.RUNNER, earlier_runner  # type: ignore[misc]
        try:
            bwrapped(True)
        finally:
            runners.MONITOR = current  # type: ignore[misc]
            pytest_run.RUNNER = runner  # type: ignore[misc]

    runs: dict[str, Callable[[], None]] = {
        "bare tests": lambda: bare(bare_argv),
        "launcher tests": lambda: launcher(True),
        "bwrap tests": lambda: bwrapped(True),
        "unmonitored tests": unmonitored,
        "bare no-op": lambda: bare(noop),
        "launcher no-op": lambda: launcher(False),
        "bwrap no-op": lambda: bwrapped(False),
        "bwrap sealed no-op": sealed,
    }
    if earlier:
        runs["earlier monitor tests"] = earlier_monitor
    for fn in runs.values():  # warm the page cache and the lazy imports once
        fn()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            times[name].append(timed(fn))
    shutil.rmtree(scratch, ignore_errors=True)
    med = {name: statistics.median(values) for name, values in times.items()}

    def spread(name: str) -> str:
        values = sorted(times[name])
        q = len(values) // 4
        return f"{values[q]:.1f}–{values[-1 - q]:.1f}"

    print("## Issue 7: the isolation's cost per attempt\n")
    print(
        f"Task `{contract.task_id}` (its reference fix applied), {args.repeats} interleaved "
        f"rounds, medians in ms with the interquartile range; {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, sandbox level `{sandbox_level()}`.\n"
    )
    print("| run | bare | previous launcher | bwrap sandbox |")
    print("|---|---|---|---|")
    for what in ("tests", "no-op"):
        cells = [
            f"{med[f'{k} {what}']:.1f} ({spread(f'{k} {what}')})"
            for k in ("bare", "launcher", "bwrap")
        ]
        print(f"| {what} | " + " | ".join(cells) + " |")
    over_bare = med["bwrap tests"] - med["bare tests"]
    over_launcher = med["bwrap tests"] - med["launcher tests"]
    monitor = med["bwrap tests"] - med["unmonitored tests"]
    unmonitored_cell = f"{med['unmonitored tests']:.1f} ({spread('unmonitored tests')})"
    print(f"| tests, runner before the monitor | | | {unmonitored_cell} |")
    sealed_cell = f"{med['bwrap sealed no-op']:.1f} ({spread('bwrap sealed no-op')})"
    print(f"| no-op, memory sealed (as a graded run) | | | {sealed_cell} |")
    seal = med["bwrap sealed no-op"] - med["bwrap no-op"]
    print(
        f"\nThe memory seal (seccomp and Landlock, loaded by the launcher of every graded "
        f"run, both test columns above included): {seal:+.1f} ms per attempt, "
        f"{100 * seal / med['bare tests']:+.1f}% of the bare test run."
    )
    # Each round runs both columns back to back, so the median of the rounds' own
    # differences sheds the drift a shared machine adds between rounds.
    paired = sorted(
        a - b for a, b in zip(times["bwrap tests"], times["unmonitored tests"], strict=True)
    )
    paired_med = statistics.median(paired)
    q = len(paired) // 4
    print(
        f"\nThe integrity monitor: {monitor:+.1f} ms per attempt, "
        f"{100 * monitor / med['bare tests']:+.1f}% of the bare test run (difference of the "
        f"columns' medians); the median of the {len(paired)} rounds' own differences: "
        f"{paired_med:+.1f} ms ({paired[q]:+.1f} to {paired[-1 - q]:+.1f}), "
        f"{100 * paired_med / med['bare tests']:+.1f}% of the bare test run."
    )
    if earlier:
        now_vs = sorted(
            a - b for a, b in zip(times["bwrap tests"], times["earlier monitor tests"], strict=True)
        )
        q = len(now_vs) // 4
        print(
            f"\nThe monitor now against its files at {args.monitor_from}: "
            f"{med['bwrap tests']:.1f} against {med['earlier monitor tests']:.1f} ms "
            f"({spread('earlier monitor tests')}); the median of the rounds' own differences: "
            f"{statistics.median(now_vs):+.1f} ms ({now_vs[q]:+.1f} to {now_vs[-1 - q]:+.1f}), "
            f"{100 * statistics.median(now_vs) / med['bare tests']:+.1f}% of the bare test run."
        )
    print(
        f"\nbwrap over bare: {over_bare:+.1f} ms per attempt "
        f"({med['bwrap tests'] / med['bare tests']:.2f}x); over the previous launcher: "
        f"{over_launcher:+.1f} ms ({med['bwrap tests'] / med['launcher tests']:.2f}x). "
        f"Launch alone (no-op): bwrap {med['bwrap no-op'] - med['bare no-op']:+.1f} ms, "
        f"launcher {med['launcher no-op'] - med['bare no-op']:+.1f} ms over bare."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
