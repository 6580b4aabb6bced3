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

With `--hostile`, the 64 clients are 64 agents (a bearer token each) and a third
phase adds one hostile agent to the load, in its own process, trying every
exhaustion at once: submissions numbered rollout 1,000,000; as many
submissions as it can get in; `BestOfK` and `Frontier` from 8 threads back to
back; a whole-host op window reopened the moment it ends (`--op-window-max-s
2` here). At the end every accepted submission (a receipt came back) is looked
up in the ledger's export: an accepted submission without a result is lost.

Run: `.venv/bin/python bench/load_bench.py [--repeats N] [--samples N] [--hostile]`.
Prints a Markdown section and writes it to bench/out/load.md (load-hostile.md).
"""

from __future__ import annotations

import argparse
import base64
import json
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
from jb_client.api import Client
from jb_client.errors import ClientError

from jouled.auth import add_token
from jouled.contracts.task import reference_patch

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "tasks"
TASK_ID = "smoke/lrucache"
TASK_DIR = TASKS / "smoke" / "lrucache"
OUT = REPO / "bench" / "out" / "load.md"
OUT_HOSTILE = REPO / "bench" / "out" / "load-hostile.md"
CLIENTS = 64
WORKERS = 2
QUEUE_LIMIT = 8

# The load generator, run as `python -c LOADER TARGET PATCH_FILE`: 64 threads submit
# until a line arrives on stdin; prints "full" once a call was refused, and at exit
# "accepted N refused M".
LOADER = textwrap.dedent(
    """
    import sys, threading, time, uuid
    from jb_client.api import Client
    from jb_client.errors import ClientError
    from jouled.errors import Kind

    target, patch = sys.argv[1], open(sys.argv[2], "rb").read()
    tokens = open(sys.argv[3]).read().split() if len(sys.argv) > 3 else [""] * %(clients)d
    keys = open(sys.argv[4], "a") if len(sys.argv) > 4 else None
    stop, lock = threading.Event(), threading.Lock()
    counts = {"accepted": 0, "refused": 0, "other": 0}

    def client(token):
        with Client(target, timeout_s=600, token=token or None) as c:
            while not stop.is_set():
                key = uuid.uuid4().hex
                try:
                    c.submit(%(task)r, patch, idempotency_key=key)
                    kind = "accepted"
                except ClientError as err:
                    kind = "refused" if err.kind == Kind.RESOURCE_EXHAUSTED else "other"
                with lock:
                    counts[kind] += 1
                    if kind == "accepted" and keys is not None:
                        keys.write(key + "\\n")
                    if kind == "refused" and counts["refused"] == 1:
                        print("full", flush=True)
                if kind != "accepted":
                    time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(t,)) for t in tokens]
    for t in threads:
        t.start()
    sys.stdin.readline()
    stop.set()
    for t in threads:
        t.join()
    if keys is not None:
        keys.close()
    print("accepted %%(accepted)d refused %%(refused)d other %%(other)d" %% counts, flush=True)
    """
) % {"task": TASK_ID, "clients": CLIENTS}

# The hostile agent, run as `python -c HOSTILE TARGET PATCH_FILE TOKEN KEYS_FILE`: every
# exhaustion at once until a line arrives on stdin; prints "started", then its counts.
HOSTILE = textwrap.dedent(
    """
    import collections, sys, threading, uuid
    from jb_client.api import Client
    from jb_client.errors import ClientError

    target, patch, token = sys.argv[1], open(sys.argv[2], "rb").read(), sys.argv[3]
    keys = open(sys.argv[4], "a")
    stop, lock = threading.Event(), threading.Lock()
    counts = collections.Counter()

    def count(what):
        with lock:
            counts[what] += 1

    def attempt(c, rollout):
        key = uuid.uuid4().hex
        try:
            c.submit(%(task)r, patch, idempotency_key=key, rollout=rollout)
        except ClientError as err:
            count(f"submit rollout={rollout}: {err.kind}")
        else:
            with lock:
                keys.write(key + "\\n")
            count(f"submit rollout={rollout}: accepted")

    def loop(body):
        def run():
            with Client(target, timeout_s=600, token=token) as c:
                while not stop.is_set():
                    body(c)
        return threading.Thread(target=run)

    def read(c):
        for call in (c.best_of_k, c.frontier):
            try:
                call()
                count(f"{call.__name__}: answered")
            except ClientError as err:
                count(f"{call.__name__}: {err.kind}")

    def window(c):
        w = c.open_window("hog")
        count(f"window: {w.attribution}")
        if stop.is_set():
            w.close()
        else:
            w.wait()

    threads = (
        [loop(lambda c: attempt(c, 1_000_000))]
        + [loop(lambda c: attempt(c, 0)) for _ in range(12)]
        + [loop(read) for _ in range(8)]
        + [loop(window)]
    )
    for t in threads:
        t.start()
    print("started", flush=True)
    sys.stdin.readline()
    stop.set()
    for t in threads:
        t.join()
    keys.close()
    print("; ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True)
    """
) % {"task": TASK_ID}


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
def running_daemon(root: Path, *extra: str) -> Iterator[str]:
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
        *extra,
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
def load(
    target: str, patch_file: Path, counts: list[str], *extra: str, ready: str = "full"
) -> Iterator[None]:
    """64 submitting clients in another process, from the queue's first refusal to exit
    (or the hostile agent, from its start)."""
    script = HOSTILE if ready == "started" else LOADER
    proc = subprocess.Popen(
        [sys.executable, "-c", script, target, str(patch_file), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = proc.stdout.readline().strip()
        if line != ready:
            raise RuntimeError(f"the load generator did not start: {line!r}")
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


def hostile_report(
    phases: dict[str, list[Phase]], counts: list[str], lost: tuple[int, int], samples: int
) -> str:
    """The idle, load and load + hostile phases side by side."""
    names = list(phases)

    def med(name: str, probe_name: str, q: int) -> float:
        return _median([p.pct(probe_name, q) for p in phases[name]])

    lines = [
        "| probe | " + " | ".join(f"{n} p50 ms | {n} p99 ms" for n in names) + " |",
        "| --- | " + " | ".join("---: | ---:" for _ in names) + " |",
    ]
    for probe_name in ("Check", "ListTasks"):
        cells = []
        for n in names:
            for q in (50, 99):
                cells.append(f"{med(n, probe_name, q):.2f}")
        label = "health `Check`" if probe_name == "Check" else "`ListTasks`"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    idle, hostile = names[0], names[-1]
    ratios = ", ".join(
        f"{probe_name} p{q} ×{med(hostile, probe_name, q) / med(idle, probe_name, q):.1f}"
        for probe_name in ("Check", "ListTasks")
        for q in (50, 99)
    )
    accepted, found = lost
    load1, load5, _ = os.getloadavg()
    return "\n".join(
        [
            "## Health under 64 agents and one hostile agent",
            "",
            f"`python bench/load_bench.py --hostile --repeats {len(phases[idle])} "
            f"--samples {samples}`:",
            "",
            f"- Host: nproc {os.cpu_count()}, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}; load average {load1:.2f} / {load5:.2f} "
            "(1/5 min) at the end",
            f"- Daemon: `jouled serve --workers {WORKERS} --queue-limit {QUEUE_LIMIT} "
            "--energy estimator --op-window-max-s 2 --tokens ...`; load: "
            f"{CLIENTS} agents (a token each) in another process submitting `{TASK_ID}` "
            "back to back; hostile: one more agent in a third process (rollout 1,000,000 "
            "submissions, 12 submitting threads, 8 threads reading `BestOfK` and "
            "`Frontier`, a whole-host op window reopened as soon as it ends)",
            f"- Each phase: {samples} samples of each probe, alternating, one warm "
            f"channel; medians over {len(phases[idle])} repeats of each phase's percentile",
            "",
            *lines,
            "",
            f"- {hostile} / {idle}: {ratios}.",
            f"- Accepted submissions (a receipt came back): {accepted}; with a result in "
            f"the ledger's export: {found}; lost: {accepted - found}.",
            f"- Generators, per phase: {'; '.join(counts)}.",
        ]
    )


def lost_submissions(target: str, keys_file: Path, out: Path) -> tuple[int, int]:
    """(accepted, found): accepted keys, and how many of them have a result in the export."""
    keys = set(keys_file.read_text().split()) if keys_file.exists() else set()
    with Client(target, timeout_s=600) as c:
        c.export(out)
    results = set()
    for line in out.read_text().splitlines():
        doc = json.loads(base64.b64decode(json.loads(line)["payload"]))
        if doc["kind"] == "result":
            results.add(doc["body"].get("idempotency_key", ""))
    return len(keys), len(keys & results)


def run_hostile(root: Path, patch: bytes, patch_file: Path, repeats: int, samples: int) -> str:
    tokens_file = root / "tokens.toml"
    agents = [add_token(tokens_file, f"agent-{i:02d}", ["agent"], None) for i in range(CLIENTS)]
    mallory = add_token(tokens_file, "mallory", ["agent"], None)
    agents_file = root / "agents.txt"
    agents_file.write_text("\n".join(agents) + "\n")
    keys_file = root / "accepted.txt"
    phases: dict[str, list[Phase]] = {"idle": [], "load": [], "load + hostile": []}
    counts: list[str] = []
    extra = ("--tokens", str(tokens_file), "--op-window-max-s", "2")
    with running_daemon(root, *extra) as target, Client(target, timeout_s=600) as client:
        client.submit(TASK_ID, patch)  # the baseline, once
        probe(client, 20)
        for n in range(repeats):
            print(f"repeat {n + 1}/{repeats}: idle", file=sys.stderr, flush=True)
            phases["idle"].append(probe(client, samples))
            print(f"repeat {n + 1}/{repeats}: load", file=sys.stderr, flush=True)
            with load(target, patch_file, counts, str(agents_file), str(keys_file)):
                phases["load"].append(probe(client, samples))
            print(f"repeat {n + 1}/{repeats}: load + hostile", file=sys.stderr, flush=True)
            with (
                load(target, patch_file, counts, str(agents_file), str(keys_file)),
                load(target, patch_file, counts, mallory, str(keys_file), ready="started"),
            ):
                phases["load + hostile"].append(probe(client, samples))
        lost = lost_submissions(target, keys_file, root / "export.jsonl")
    return hostile_report(phases, counts, lost, samples)


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
    parser.add_argument("--hostile", action="store_true", help="add the hostile agent's phase")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="load-bench-"))
    try:
        patch = reference_patch(TASK_DIR / "before", TASK_DIR / "reference")
        assert patch is not None
        patch_file = root / "reference.diff"
        patch_file.write_bytes(patch)
        if args.hostile:
            text = run_hostile(root, patch, patch_file, args.repeats, args.samples)
            OUT_HOSTILE.parent.mkdir(parents=True, exist_ok=True)
            OUT_HOSTILE.write_text(text + "\n")
            print(text)
            return 0
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
