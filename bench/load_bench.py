"""Latency of health `Check` and `ListTasks` on an idle daemon and under a 64-client load.

One daemon (`--workers 2 --queue-limit 8`, estimator energy, the smoke tasks)
serves both phases of every repeat, side by side:

- idle: nothing else talks to the daemon;
- load: 64 clients in a separate process (its own interpreter, so its GIL is
  not the prober's) submit `smoke/lrucache` with its reference patch, each with
  a fresh idempotency key, back to back; a refused call (`RESOURCE_EXHAUSTED`:
  the queue is full) is retried after 50 ms. Probing starts once the loader has
  seen the queue full, and the loader stops (finishing the calls it has in
  flight) before the next idle phase, so each idle phase starts drained.

In each phase the prober, on one warm channel in this process, alternates a
health `Check` and a `ListTasks` for the given number of samples each, and the
phase's p50 and p99 are taken; the table shows the median of those over the
repeats, and load / idle ratios of the medians. Nothing here asserts on time.

Run: `.venv/bin/python bench/load_bench.py [--repeats N] [--samples N]`. Prints a
Markdown section and writes it to bench/out/load.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from grpc_health.v1 import health_pb2, health_pb2_grpc
from jb_client.api import Client, ClientError

from jouled.contracts.task import reference_patch

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "tasks"
TASK_ID = "smoke/lrucache"
TASK_DIR = TASKS / "smoke" / "lrucache"
OUT = REPO / "bench" / "out" / "load.md"
CLIENTS = 64
WORKERS = 2
QUEUE_LIMIT = 8

# The load generator, run as `python -c LOADER TARGET PATCH_FILE`: 64 threads submit
# until a line arrives on stdin; prints "full" once a call was refused, and at exit
# "accepted N refused M".
LOADER = textwrap.dedent(
    """
    import sys, threading, time, uuid
    from jb_client.api import Client, ClientError
    from jouled.errors import Kind

    target, patch = sys.argv[1], open(sys.argv[2], "rb").read()
    stop, lock = threading.Event(), threading.Lock()
    counts = {"accepted": 0, "refused": 0, "other": 0}

    def client():
        with Client(target, timeout_s=600) as c:
            while not stop.is_set():
                try:
                    c.submit(%(task)r, patch, idempotency_key=uuid.uuid4().hex)
                    kind = "accepted"
                except ClientError as err:
                    kind = "refused" if err.kind == Kind.RESOURCE_EXHAUSTED else "other"
                with lock:
                    counts[kind] += 1
                    if kind == "refused" and counts["refused"] == 1:
                        print("full", flush=True)
                if kind != "accepted":
                    time.sleep(0.05)

    threads = [threading.Thread(target=client) for _ in range(%(clients)d)]
    for t in threads:
        t.start()
    sys.stdin.readline()
    stop.set()
    for t in threads:
        t.join()
    print("accepted %%(accepted)d refused %%(refused)d other %%(other)d" %% counts, flush=True)
    """
) % {"task": TASK_ID, "clients": CLIENTS}


@dataclass
class Phase:
    """One phase's samples, in nanoseconds, per probe."""

    samples: dict[str, list[int]] = field(default_factory=lambda: {"Check": [], "ListTasks": []})

    def pct(self, probe: str, q: int) -> float:
        """The q-th percentile in ms (nearest rank)."""
        xs = sorted(self.samples[probe])
        rank = max(0, min(len(xs) - 1, round(q / 100 * len(xs)) - 1))
        return xs[rank] / 1e6


@contextmanager
def running_daemon(root: Path) -> Iterator[str]:
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
        "--workers",
        str(WORKERS),
        "--queue-limit",
        str(QUEUE_LIMIT),
    ]
    target = f"unix:{data_dir / 'jouled.sock'}"
    with log.open("ab") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT)
    try:
        try:
            with Client(target) as c:
                c.wait_ready(60, alive=lambda: proc.poll() is None)
        except ClientError as err:
            raise RuntimeError(f"{err.message}:\n{log.read_text()}") from None
        yield target
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def load(target: str, patch_file: Path, counts: list[str]) -> Iterator[None]:
    """64 submitting clients in another process, from the queue's first refusal to exit."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LOADER, target, str(patch_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = proc.stdout.readline().strip()
        if line != "full":
            raise RuntimeError(f"the load generator did not fill the queue: {line!r}")
        yield
    finally:
        proc.stdin.write("stop\n")
        proc.stdin.close()
        counts.append(proc.stdout.read().strip())
        if proc.wait(timeout=600) != 0:
            raise RuntimeError("the load generator failed")


def probe(client: Client, samples: int) -> Phase:
    health = health_pb2_grpc.HealthStub(client._channel)
    request = health_pb2.HealthCheckRequest(service="jouled.v1.Jouled")
    calls: dict[str, Callable[[], object]] = {
        "Check": lambda: health.Check(request, timeout=120),
        "ListTasks": client.tasks,
    }
    phase = Phase()
    for _ in range(samples):
        for name, call in calls.items():
            start = time.perf_counter_ns()
            call()
            phase.samples[name].append(time.perf_counter_ns() - start)
    return phase


def _median(values: list[float]) -> float:
    return statistics.median(values)


def report(
    idle: list[Phase], loaded: list[Phase], counts: list[str], repeats: int, samples: int
) -> str:
    lines = [
        "| probe | idle p50 ms | load p50 ms | p50 ratio | idle p99 ms | load p99 ms | p99 ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    summary = []
    for name in ("Check", "ListTasks"):
        row = []
        for q in (50, 99):
            i = _median([p.pct(name, q) for p in idle])
            ld = _median([p.pct(name, q) for p in loaded])
            row += [i, ld, ld / i]
            summary.append(f"{name} p{q} ×{ld / i:.1f}")
        lines.append(
            f"| {'health `Check`' if name == 'Check' else '`ListTasks`'} | {row[0]:.2f} | "
            f"{row[1]:.2f} | {row[2]:.1f} | {row[3]:.2f} | {row[4]:.2f} | {row[5]:.1f} |"
        )
    per_repeat = [
        f"{i.pct('Check', 50):.2f}/{ld.pct('Check', 50):.2f}"
        for i, ld in zip(idle, loaded, strict=True)
    ]
    load1, load5, _ = os.getloadavg()
    return "\n".join(
        [
            "## Health and reads under load",
            "",
            f"`python bench/load_bench.py --repeats {repeats} --samples {samples}`:",
            "",
            f"- Host: nproc {os.cpu_count()}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}; load average {load1:.2f} / {load5:.2f} "
            "(1/5 min) at the end",
            f"- Daemon: `jouled serve --workers {WORKERS} --queue-limit {QUEUE_LIMIT} "
            "--energy estimator`; load: "
            f"{CLIENTS} clients in another process submitting `{TASK_ID}` (reference patch) "
            "back to back, a refused call retried after 50 ms",
            f"- Each phase: {samples} samples of each probe, alternating, one warm "
            f"channel; medians over {len(idle)} repeats of each phase's percentile",
            "",
            *lines,
            "",
            f"- Load / idle: {', '.join(summary)}.",
            f"- Check p50 idle/load per repeat (ms): {', '.join(per_repeat)}.",
            f"- Loader, per load phase: {'; '.join(counts)}.",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="load-bench-"))
    try:
        patch = reference_patch(TASK_DIR / "before", TASK_DIR / "reference")
        assert patch is not None
        patch_file = root / "reference.diff"
        patch_file.write_bytes(patch)
        idle: list[Phase] = []
        loaded: list[Phase] = []
        counts: list[str] = []
        with running_daemon(root) as target, Client(target, timeout_s=600) as client:
            client.submit(TASK_ID, patch)  # the baseline, once
            probe(client, 20)  # warm the channel and the daemon's code paths
            for n in range(args.repeats):
                print(f"repeat {n + 1}/{args.repeats}: idle", file=sys.stderr, flush=True)
                idle.append(probe(client, args.samples))
                print(f"repeat {n + 1}/{args.repeats}: load", file=sys.stderr, flush=True)
                with load(target, patch_file, counts):
                    loaded.append(probe(client, args.samples))
        text = report(idle, loaded, counts, args.repeats, args.samples)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
