"""What the overhead benchmark's parts share: the task, wall-clock series and their
Markdown cells, scratch trees, a running daemon, and the CLI's argv and environment."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from jb_client.api import Client
from jb_client.errors import ClientError

from jouled.contracts.contract import IGNORED_NAMES
from jouled.patch_diff import diff_trees

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "tasks"
TASK_ID = "smoke/lrucache"
TASK_DIR = TASKS / "smoke" / "lrucache"


# -- timing -------------------------------------------------------------------------------


@dataclass
class Series:
    """Wall-clock samples of one measured thing, in nanoseconds."""

    label: str
    samples: list[int] = field(default_factory=list)

    def add(self, ns: int) -> None:
        self.samples.append(ns)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) / 1e6

    @property
    def iqr_ms(self) -> float:
        if len(self.samples) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return (q3 - q1) / 1e6


def timed(fn: Callable[[], Any]) -> tuple[int, Any]:
    start = time.perf_counter_ns()
    value = fn()
    return time.perf_counter_ns() - start, value


def measure(label: str, repeats: int, fn: Callable[[], Any]) -> Series:
    series = Series(label)
    for _ in range(repeats):
        series.add(timed(fn)[0])
    return series


def measure_with_setup(
    label: str, repeats: int, setup: Callable[[], Any], fn: Callable[[Any], Any]
) -> Series:
    """Time `fn(setup())`, leaving the setup out of the sample."""
    series = Series(label)
    for _ in range(repeats):
        series.add(timed(partial(fn, setup()))[0])
    return series


def _ms(value: float) -> str:
    return f"{value:.1f}"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


# -- fixtures -----------------------------------------------------------------------------


def _copy_tree(src: Path, dest: Path) -> None:
    shutil.copytree(
        src, dest, symlinks=True, ignore=shutil.ignore_patterns(*IGNORED_NAMES, "*.pyc")
    )


def reference_patch(scratch: Path) -> bytes:
    """The reference fix as the git-style diff an agent would submit."""
    before, fixed = scratch / "patch-before", scratch / "patch-fixed"
    _copy_tree(TASK_DIR / "before", before)
    _copy_tree(before, fixed)
    shutil.copytree(TASK_DIR / "reference", fixed, dirs_exist_ok=True)
    raw = diff_trees(before, fixed)
    shutil.rmtree(before)
    shutil.rmtree(fixed)
    return raw


def seeded_fixed_tree(dest: Path) -> Path:
    _copy_tree(TASK_DIR / "before", dest)
    shutil.copytree(TASK_DIR / "reference", dest, dirs_exist_ok=True)
    return dest


class Scratch:
    """Fresh numbered directories under one root, laid out like the daemon's work dirs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        # The daemon's scratch dirs are 0711 so the sandbox's uid could enter
        # them; matching it gives the sandbox here the same plan as there.
        os.chmod(self.root, 0o711)
        self._n = 0

    def fresh(self, name: str = "d") -> Path:
        self._n += 1
        return self.root / f"{name}-{self._n}"


# -- the daemon ---------------------------------------------------------------------------


@dataclass
class RunningDaemon:
    proc: subprocess.Popen[bytes]
    data_dir: Path
    log: Path

    @property
    def target(self) -> str:
        return f"unix:{self.data_dir / 'jouled.sock'}"


def _wait_serving(daemon: RunningDaemon, timeout_s: float = 60) -> None:
    try:
        with Client(daemon.target) as client:
            client.wait_ready(timeout_s, alive=lambda: daemon.proc.poll() is None)
    except ClientError as err:
        raise RuntimeError(f"{err.message}:\n{daemon.log.read_text()}") from None


@contextmanager
def running_daemon(root: Path) -> Iterator[RunningDaemon]:
    data_dir = root / "data"
    data_dir.mkdir(parents=True)
    log = root / "jouled.log"
    argv = [
        sys.executable,
        "-m",
        "jouled",
        "serve",
        "--data-dir",
        str(data_dir),
        "--tasks",
        str(TASKS),
        "--energy",
        "estimator",
        "--calibrate-seconds",
        "0",
    ]
    with log.open("ab") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT)
    daemon = RunningDaemon(proc, data_dir, log)
    try:
        _wait_serving(daemon)
        yield daemon
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _check_receipt(receipt: dict[str, Any], how: str) -> dict[str, Any]:
    # A fast wrong answer would make the overhead look small: insist on a real grade.
    if receipt.get("status") != "resolved":
        raise RuntimeError(f"{how}: the reference patch was not resolved: {receipt}")
    return receipt


def _entry_body(receipt: dict[str, Any]) -> dict[str, Any]:
    payload = base64.b64decode(receipt["entry"]["payload"])
    body: dict[str, Any] = json.loads(payload)["body"]
    return body


def _bytecode_env(*, write: bool, pycache: Path | None = None) -> dict[str, str]:
    """This environment with bytecode writing forced on or off, whatever the caller set."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE",)}
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if pycache is not None:
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _cli(*python_options: str) -> list[str]:
    """The `jb-client` console script, run as installed unless interpreter options are given."""
    script = Path(sys.executable).with_name("jb-client")
    if not script.exists():
        return [sys.executable, *python_options, "-m", "jb_client"]
    return [sys.executable, *python_options, str(script)] if python_options else [str(script)]


def _run_quiet(argv: Sequence[str], env: dict[str, str] | None = None) -> None:
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
