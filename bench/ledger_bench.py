"""Ledger benchmark: durable appends, export verification, proofs and the frontier query.

What is measured, side by side in one run (wall-clock, `time.perf_counter`):

1. Durable append throughput. `Ledger.append` one entry at a time against
   `Ledger.append_many` in batches of 10 and 100, and `Ledger.append` from 16
   threads at once (the daemon's case: it may commit several callers'
   entries in one write), on a fresh data dir. Every call signs its
   entries and a checkpoint, extends the Merkle tree and writes them to the
   ledger's tail with one fdatasync, so one call is one durable unit; every
   512 entries the tail moves into DuckDB (note replaced, one transaction),
   inside the call that fills the batch. Bodies have the shape
   `jouled.pipeline.evaluate` writes; each attempt is entered in the journal
   first (untimed), as the daemon does.
2. Verification of an N-entry export (default 1,000,000). The export is
   generated once with `make_entry` (signing on a process pool) and cached in
   bench/out/, then `verify_export` is timed reading it line by line from the
   page cache: Merkle-only, signatures on all cores, signatures on one core.
3. Proofs at N leaves: `merkle.inclusion_proof` / `consistency_proof` over the
   cached leaf hashes, and `Ledger.inclusion_proof` / `consistency_proof` on
   the ledger of (1) and on the N-entry ledger of (4).
4. The frontier query over the N-entry ledger: `Ledger.result_bodies()` out
   of DuckDB, then `frontier.frontier_rows` over those bodies in memory (a
   full rescan), and the daemon's running totals (`frontier.Frontier`):
   building them, adding one result, and `rows()`, its query. The
   DuckDB file is filled from the cached export with DuckDB's own JSON reader
   (real signed payloads, no re-signing): loading is not what is measured.
   The daemon's start rebuilds the same totals from the ledger's query
   columns (`Ledger.frontier()`), timed beside them and checked equal.

bench/scale_bench.py measures the issue-12 aims (daemon start, the offline
frontier, verification, appends, `jb-client tasks --json`) against an
earlier revision, side by side.

How to read it: every figure is a median over `--repeats` runs unless the
table says "1 run"; "vs aim" is measured / aim, so for throughput >= 1 meets
the aim and for durations <= 1 does. Nothing here asserts: it is a
measurement, not a test. With `--profile`, one extra untimed pass of each
measured operation runs under cProfile (at most 100,000 entries for the
verify and frontier passes) and the hottest functions are listed at the end;
the full listings go to bench/out/profile-*.txt.

Run: .venv/bin/python bench/ledger_bench.py [--quick | --entries N] [--profile]
The Markdown goes to stdout and bench/out/ledger.md; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import gc
import hashlib
import io
import itertools
import json
import os
import platform
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import cryptography
import duckdb
from cryptography.hazmat.backends.openssl import backend as openssl_backend
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from jouled import __version__, frontier
from jouled.ledger import merkle
from jouled.ledger.checkpoint import Checkpoint, parse_note, sign_note, write_atomic
from jouled.ledger.columns import ALL_NAMES, derived_select
from jouled.ledger.entry import Entry, Signature, make_entry
from jouled.ledger.schema import SCHEMA
from jouled.ledger.signing import Signer, raw_public
from jouled.ledger.store import Ledger
from jouled.ledger.verify import verify_export, verify_file

T = TypeVar("T")

OUT = Path(__file__).resolve().parent / "out"
ORIGIN = "jouled/bench/ledger"
# Bump when the generated export changes shape, so stale caches are rebuilt.
EXPORT_FORMAT = 1

AIM_APPENDS_PER_S = 1_000.0
AIM_MERKLE_VERIFY_S = 15.0
AIM_FRONTIER_S = 1.0

# One-core signature verification beyond this is extrapolated from a prefix.
ONE_CORE_LIMIT_S = 120.0
ONE_CORE_PREFIX = 100_000
PROFILE_CAP = 100_000

SUITES = ("swe-lite", "polyglot", "smoke")
TASKS_PER_SUITE = 300
SOLVERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reference", ("",)),
    ("noop", ("",)),
    ("claude-code", ("claude-sonnet-4", "claude-opus-4")),
    ("aider", ("gpt-5", "qwen3-coder")),
    ("openhands", ("gpt-5", "claude-sonnet-4")),
    ("swe-agent", ("llama-4", "qwen3-coder")),
)
DAEMON_SOLVERS = frozenset({"reference", "noop"})
STATUSES = ("resolved", "unresolved", "timeout", "error", "invalid")
STATUS_WEIGHTS = (34, 46, 8, 5, 7)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def bench_signer() -> Signer:
    # A fixed key, so a cached export verifies against the key of a later run.
    return Signer(Ed25519PrivateKey.from_private_bytes(hashlib.sha256(ORIGIN.encode()).digest()))


# -- realistic bodies --------------------------------------------------------------------


class Bodies:
    """`result` bodies shaped like `Evaluator._body`, drawn from a seeded RNG."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.digests = {
            f"{suite}/task-{k:04d}": hashlib.sha256(f"{suite}/{k}".encode()).hexdigest()
            for suite in SUITES
            for k in range(TASKS_PER_SUITE)
        }
        self.n = 0

    def _window(self, phase: str) -> dict[str, Any]:
        rng = self.rng
        wall_ms = rng.randint(150, 600_000) if phase != "grade" else rng.randint(150, 90_000)
        if rng.random() < 0.01:
            # A failed read: the figures are null, never zero (meter/window.py).
            return {
                "gross_mj": None,
                "idle_mj": None,
                "marginal_mj": None,
                "source": "rapl+nvml",
                "reliable": False,
                "attribution": "exclusive",
                "wall_ms": wall_ms,
                "valid": False,
                "domains": {},
                "reasons": ["package-0: read failed"],
                "calibration_seq": 1,
            }
        idle_mj = 9_000 * wall_ms // 1000
        marginal_mj = rng.randint(0, 40_000) * wall_ms // 1000
        gross_mj = idle_mj + marginal_mj
        gpu = gross_mj // rng.randint(3, 6)
        window: dict[str, Any] = {
            "gross_mj": gross_mj,
            "idle_mj": idle_mj,
            "marginal_mj": marginal_mj,
            "source": "rapl+nvml",
            "reliable": wall_ms >= 100 and rng.random() > 0.1,
            "attribution": "exclusive",
            "wall_ms": wall_ms,
            "valid": True,
            "domains": {"package-0": gross_mj - gpu, "nvml:0": gpu},
            "calibration_seq": 1,
        }
        if not window["reliable"]:
            window["reasons"] = ["marginal energy within idle noise"]
        return window

    def __call__(self) -> dict[str, Any]:
        rng = self.rng
        i = self.n
        self.n += 1
        task_id = f"{rng.choice(SUITES)}/task-{rng.randrange(TASKS_PER_SUITE):04d}"
        suite = task_id.split("/", 1)[0]
        solver, models = rng.choice(SOLVERS)
        status = rng.choices(STATUSES, STATUS_WEIGHTS)[0]
        expected = rng.randint(1, 40)
        failed = 0 if status == "resolved" else rng.randint(0, expected)
        missing = 0 if status == "resolved" else rng.randint(0, expected - failed)
        energy: dict[str, Any] = {}
        if rng.random() < 0.03:
            energy["baseline"] = self._window("baseline")
        if solver in DAEMON_SOLVERS:
            energy["solve"] = self._window("solve")
        if status != "error" or rng.random() < 0.5:
            energy["grade"] = self._window("grade")
        claimed: dict[str, int] = {}
        if solver not in DAEMON_SOLVERS:
            claimed = {
                "tokens_in": rng.randint(2_000, 2_000_000),
                "tokens_out": rng.randint(200, 200_000),
                "usd_micros": rng.randint(1_000, 20_000_000),
            }
            if rng.random() < 0.2:
                claimed["joules_mj"] = rng.randint(10_000, 50_000_000)
        run_id = f"run-{i // 1000:05d}"
        rollout = rng.randrange(5)
        attempt_id = f"{rng.getrandbits(128):032x}"
        body: dict[str, Any] = {
            "task_id": task_id,
            "suite": suite,
            "task_digest": self.digests[task_id],
            "patch_sha256": f"{rng.getrandbits(256):064x}",
            "status": status,
            "resolved": status == "resolved",
            "tests": {
                "expected": expected,
                "passed": expected - failed - missing,
                "failed": failed,
                "missing": missing,
            },
            "solver": solver,
            "model": rng.choice(models),
            "agent": "" if solver in DAEMON_SOLVERS else f"{solver}/1.{rng.randrange(9)}",
            "run_id": run_id,
            "rollout": rollout,
            "energy": energy,
            "claimed": claimed,
            "sandbox": "process+netns+uid",
            "restored": ["tests/conftest.py"] if rng.random() < 0.05 else [],
            "idempotency_key": f"{run_id}:{task_id}:{rollout}:{attempt_id[:8]}",
            "attempt_id": attempt_id,
            "version": __version__,
        }
        if failed or missing:
            names = [
                f"tests/test_{task_id[-4:]}.py::test_case_{k}" for k in range(failed + missing)
            ]
            body["tests_failed"] = names[:failed][:50]
            body["tests_missing"] = names[failed:][:50]
        if status == "error":
            body["error"] = "sandbox: the check exited 137 (killed: out of memory)"
        return body


def genesis_body(signer: Signer) -> dict[str, Any]:
    return {
        "version": __version__,
        "host": platform.node(),
        "public_key": base64.b64encode(raw_public(signer.public)).decode("ascii"),
        "keyid": signer.keyid,
        "origin": ORIGIN,
    }


CALIBRATION_BODY: dict[str, Any] = {
    "source": "rapl+nvml",
    "seconds": 30,
    "domains": {
        "nvml:0": {"idle_mw": 3_000, "stddev_mw": 120},
        "package-0": {"idle_mw": 6_000, "stddev_mw": 340},
    },
}


# -- timing helpers ----------------------------------------------------------------------


@dataclass
class Timing:
    runs: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def spread(self) -> str:
        if len(self.runs) == 1:
            return "1 run"
        return f"{seconds(min(self.runs))} – {seconds(max(self.runs))} over {len(self.runs):,}"


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def repeat(fn: Callable[[], object], repeats: int) -> Timing:
    return Timing([timed(fn)[0] for _ in range(repeats)])


def seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def verdict(measured: float, aim: float, higher_is_better: bool) -> tuple[str, bool]:
    ratio = measured / aim
    met = ratio >= 1 if higher_is_better else ratio <= 1
    return f"{ratio:.3g}× aim, {'met' if met else 'MISSED'}", met


@dataclass
class Profiles:
    enabled: bool
    summaries: dict[str, list[str]] = field(default_factory=dict)

    def run(self, name: str, fn: Callable[[], object]) -> None:
        """One untimed pass under cProfile; the full listing goes to bench/out."""
        if not self.enabled:
            return
        log(f"profiling {name}")
        prof = cProfile.Profile()
        prof.enable()
        fn()
        prof.disable()
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(30)
        (OUT / f"profile-{name}.txt").write_text(buf.getvalue())
        raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
        total = sum(v[2] for v in raw.values()) or 1.0
        top = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:6]
        self.summaries[name] = [
            f"{v[2]:.2f} s ({v[2] / total:.0%}) {v[1]:,} calls  {_where(k)}" for k, v in top
        ]


def _where(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func
    parts = Path(filename).parts
    short = "/".join(parts[parts.index("jouled") :]) if "jouled" in parts else Path(filename).name
    return f"{short}:{line} {func}"


# -- 1. durable appends ------------------------------------------------------------------


@dataclass(frozen=True)
class AppendMode:
    method: str  # the Ledger method called
    batch: int  # entries per call
    threads: int  # concurrent callers
    count: int  # entries per repeat

    @property
    def name(self) -> str:
        return f"{self.method}-b{self.batch}-t{self.threads}"


# One caller at a time is the aim's literal reading; the threaded row is the
# daemon's situation (concurrent attempts finishing), where `append` may
# commit several callers' entries together.
APPEND_MODES = (
    AppendMode("append", 1, 1, 200),
    AppendMode("append_many", 10, 1, 500),
    AppendMode("append_many", 100, 1, 2_000),
    AppendMode("append", 1, 16, 2_000),
)


@dataclass
class AppendRow:
    mode: AppendMode
    timing: Timing  # seconds per repeat
    per_commit: float  # entries per DuckDB transaction, over all repeats

    @property
    def rate(self) -> float:
        return self.mode.count / self.timing.median

    @property
    def per_call(self) -> float:
        """Median wall time of one call, as its caller waits for it."""
        calls_per_thread = self.mode.count / self.mode.batch / self.mode.threads
        return self.timing.median / calls_per_thread


def open_ledger(data: Path, signer: Signer) -> Ledger:
    return Ledger(
        data / "ledger.duckdb",
        signer,
        origin=ORIGIN,
        checkpoint_path=data / "checkpoint.note",
        genesis={"version": __version__, "host": platform.node()},
    )


def bench_appends(
    data: Path, signer: Signer, repeats: int, profiles: Profiles
) -> tuple[list[AppendRow], Ledger]:
    data.mkdir(parents=True)
    ledger = open_ledger(data, signer)
    bodies = Bodies(seed=1)
    runs: dict[AppendMode, list[float]] = {mode: [] for mode in APPEND_MODES}
    commits: dict[AppendMode, int] = {mode: 0 for mode in APPEND_MODES}

    def prepared(count: int) -> list[dict[str, Any]]:
        out = [bodies() for _ in range(count)]
        for body in out:
            ledger.journal_accept(
                body["attempt_id"], body["idempotency_key"], body["task_id"], {"bench": True}
            )
        return out

    def run(mode: AppendMode, items: list[dict[str, Any]]) -> None:
        if mode.threads > 1:
            with ThreadPoolExecutor(mode.threads) as pool:
                for _ in pool.map(partial(ledger.append, "result"), items):
                    pass
        elif mode.batch == 1:
            for body in items:
                ledger.append("result", body)
        else:
            for start in range(0, len(items), mode.batch):
                ledger.append_many([("result", b) for b in items[start : start + mode.batch]])

    # Modes interleave within each repeat, so a drift (ledger growth, disk
    # state) spreads over all of them instead of favouring one.
    for rep in range(repeats):
        for mode in APPEND_MODES:
            items = prepared(mode.count)
            # Every commit stores one checkpoint row, so the history counts commits.
            before = len(ledger.checkpoint_history())
            runs[mode].append(timed(partial(run, mode, items))[0])
            commits[mode] += len(ledger.checkpoint_history()) - before
        log(f"appends: repeat {rep + 1}/{repeats}, ledger at {ledger.size} entries")
    for mode in APPEND_MODES:
        # cProfile sees only the calling thread, which here would only wait.
        if mode.threads == 1:
            profiles.run(mode.name, partial(run, mode, prepared(mode.count // 2)))
    rows = [
        AppendRow(mode, Timing(runs[mode]), mode.count * repeats / max(1, commits[mode]))
        for mode in APPEND_MODES
    ]
    return rows, ledger


def bench_durability_floor(data: Path, note: str, repeats: int) -> list[tuple[str, Timing]]:
    """What one durable call costs before any ledger work: the syncs it must wait for."""
    count = 20 * repeats
    path = data / "floor.note"
    note_write = repeat(partial(write_atomic, path, note), count)
    db = duckdb.connect(str(data / "floor.duckdb"))
    try:
        db.execute("CREATE TABLE t (a BIGINT, b VARCHAR)")

        def commit_one() -> None:
            db.execute("BEGIN TRANSACTION")
            db.execute("INSERT INTO t VALUES (1, 'x')")
            db.execute("COMMIT")

        commit = repeat(commit_one, count)
    finally:
        db.close()
    fd = os.open(data / "floor.tail", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:

        def sync_one() -> None:
            os.write(fd, b"x" * 2047 + b"\n")
            os.fdatasync(fd)

        tail_sync = repeat(sync_one, count)
    finally:
        os.close(fd)
    return [
        ("`fdatasync` of a 2 KiB append to the tail (what one append waits for)", tail_sync),
        (
            "`checkpoint.write_atomic` of a note (fsync file, rename, fsync dir; per batch)",
            note_write,
        ),
        ("DuckDB commit of one small row (WAL sync; per batch)", commit),
    ]


# -- 2. the cached export ----------------------------------------------------------------


@dataclass
class Export:
    n: int
    lines: Path
    leaves: Path
    notes: dict[int, str]  # checkpoint notes by tree size
    generated_s: float
    cached: bool  # read from bench/out/ rather than generated by this run
    bytes: int


_worker_signer: Signer | None = None


def _sign_chunk(private: bytes, chunk: list[tuple[int, bytes, bytes]]) -> list[str]:
    """Export lines for (seq, payload, leaf hash) items, signed in a worker process."""
    global _worker_signer
    if _worker_signer is None:
        _worker_signer = Signer(Ed25519PrivateKey.from_private_bytes(private))
    signer = _worker_signer
    return [
        Entry(seq, payload, (Signature(signer.keyid, signer.sign(payload)),), leaf).export_line()
        + "\n"
        for seq, payload, leaf in chunk
    ]


def _export_items(n: int, signer: Signer) -> Iterator[tuple[int, str, dict[str, Any]]]:
    yield 0, "genesis", genesis_body(signer)
    if n > 1:
        yield 1, "calibration", CALIBRATION_BODY
    bodies = Bodies(seed=2)
    for seq in range(2, n):
        yield seq, "result", bodies()


def generate_export(n: int, signer: Signer, lines: Path, leaves_path: Path) -> list[bytes]:
    # Payloads are built in order with make_entry because each one's `prev` is
    # the previous leaf hash; signing does not depend on the chain, so it runs
    # on the pool (and so does the export line's own canonical encoding).
    private = signer.private.private_bytes_raw()
    workers = max(1, (os.cpu_count() or 1) - 1)
    chunk_size = 2_000
    leaves: list[bytes] = []
    pending: deque[Future[list[str]]] = deque()
    prev = b""
    tmp = lines.with_suffix(".tmp")
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool, tmp.open("w", encoding="utf-8") as fh:
        chunk: list[tuple[int, bytes, bytes]] = []
        for seq, kind, body in _export_items(n, signer):
            entry = make_entry(seq, kind, prev, body, [])
            prev = entry.leaf_hash
            leaves.append(prev)
            chunk.append((seq, entry.payload, prev))
            if len(chunk) == chunk_size or seq == n - 1:
                pending.append(pool.submit(_sign_chunk, private, chunk))
                chunk = []
                while len(pending) > 2 * workers + 1:
                    fh.writelines(pending.popleft().result())
            if seq and seq % 100_000 == 0:
                rate = seq / (time.perf_counter() - start)
                log(f"export: {seq:,}/{n:,} entries ({rate:,.0f}/s)")
        while pending:
            fh.writelines(pending.popleft().result())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, lines)
    leaves_path.write_bytes(b"".join(leaves))
    return leaves


def ensure_export(n: int, signer: Signer) -> Export:
    lines = OUT / f"export-{n}.jsonl"
    leaves_path = OUT / f"export-{n}.leaves"
    meta_path = OUT / f"export-{n}.json"
    want = {"format": EXPORT_FORMAT, "n": n, "keyid": signer.keyid, "origin": ORIGIN}
    if meta_path.exists() and lines.exists() and leaves_path.exists():
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in want} == want:
            log(f"export: using the cached {lines}")
            return Export(
                n,
                lines,
                leaves_path,
                {int(k): v for k, v in meta["notes"].items()},
                float(meta["generated_s"]),
                True,
                lines.stat().st_size,
            )
    log(f"export: generating {n:,} entries into {lines} (cached for later runs)")
    meta_path.unlink(missing_ok=True)
    generated_s, leaves = timed(lambda: generate_export(n, signer, lines, leaves_path))
    notes: dict[int, str] = {}
    for size in sorted({n, min(n, ONE_CORE_PREFIX), min(n, PROFILE_CAP)}):
        cp = Checkpoint(origin=ORIGIN, size=size, root=merkle.root_from_leaves(leaves[:size]))
        notes[size] = sign_note(cp, [(ORIGIN, signer)])
    # The meta file is written last: its presence marks a complete cache.
    meta_path.write_text(
        json.dumps(
            {**want, "notes": {str(k): v for k, v in notes.items()}, "generated_s": generated_s}
        )
    )
    log(f"export: generated in {generated_s:.0f} s")
    return Export(n, lines, leaves_path, notes, generated_s, False, lines.stat().st_size)


def read_leaves(export: Export) -> list[bytes]:
    raw = export.leaves.read_bytes()
    return [raw[i : i + merkle.HASH_SIZE] for i in range(0, len(raw), merkle.HASH_SIZE)]


def warm_page_cache(path: Path) -> None:
    # The first timed pass would otherwise also measure the disk.
    with path.open("rb") as fh:
        while fh.read(1 << 24):
            pass


# -- 2. verification ---------------------------------------------------------------------


@dataclass
class VerifyRow:
    label: str
    entries: int
    timing: Timing
    note: str = ""

    @property
    def rate(self) -> float:
        return self.entries / self.timing.median


def verify_once(export: Export, size: int, signer: Signer, signatures: bool, workers: int) -> None:
    if size == export.n:
        # The whole file: what `jb-client verify` runs, ranges parsed on `workers` processes.
        report = verify_file(
            export.lines,
            [signer.public],
            [export.notes[size]],
            signatures=signatures,
            workers=workers,
        )
    else:
        with export.lines.open(encoding="utf-8") as fh:
            report = verify_export(
                itertools.islice(fh, size),
                [signer.public],
                [export.notes[size]],
                signatures=signatures,
            )
    if report.entries != size:
        raise RuntimeError(f"verified {report.entries} entries, expected {size}")


def bench_verify(
    export: Export, signer: Signer, repeats: int, profiles: Profiles
) -> list[VerifyRow]:
    n = export.n
    cores = os.cpu_count() or 1
    warm_page_cache(export.lines)
    rows: list[VerifyRow] = []

    def once(size: int, sigs: bool, workers: int) -> Callable[[], None]:
        return lambda: verify_once(export, size, signer, sigs, workers)

    log(f"verify: Merkle-only, {n:,} entries x {repeats}")
    rows.append(
        VerifyRow(
            f"Merkle-only (`signatures=False`), `workers={cores}` (all cores)",
            n,
            repeat(once(n, False, cores), repeats),
        )
    )
    rows.append(
        VerifyRow(
            "Merkle-only (`signatures=False`), `workers=1`", n, repeat(once(n, False, 1), repeats)
        )
    )
    log(f"verify: signatures on {cores} workers")
    rows.append(
        VerifyRow(f"signatures, `workers={cores}` (all cores)", n, repeat(once(n, True, cores), 1))
    )
    prefix = min(n, ONE_CORE_PREFIX)
    log(f"verify: signatures on one core, first {prefix:,} entries")
    small = repeat(once(prefix, True, 1), 1)
    estimate = small.median * n / prefix
    if prefix == n:
        rows.append(VerifyRow("signatures, `workers=1`", n, small))
    elif estimate <= ONE_CORE_LIMIT_S:
        log(f"verify: signatures on one core, all {n:,} entries")
        rows.append(VerifyRow("signatures, `workers=1`", n, repeat(once(n, True, 1), 1)))
    else:
        rows.append(
            VerifyRow(
                "signatures, `workers=1`",
                n,
                Timing([estimate]),
                f"extrapolated ×{n / prefix:g} from {seconds(small.median)} measured on the "
                f"first {prefix:,} entries",
            )
        )
    cap = min(n, PROFILE_CAP)
    profiles.run("verify-merkle", once(cap, False, 1))
    profiles.run("verify-signatures-1core", once(cap, True, 1))
    return rows


# -- 3. proofs ---------------------------------------------------------------------------


@dataclass
class ProofRow:
    label: str
    size: int
    timing: Timing
    proof_len: int = 0


def bench_merkle_proofs(leaves: list[bytes], repeats: int) -> list[ProofRow]:
    n = len(leaves)
    rows: list[ProofRow] = []
    indices = sorted({0, n // 2, n - 1})
    runs: list[float] = []
    proof: list[bytes] = []
    for _ in range(repeats):
        for index in indices:
            dt, proof = timed(partial(merkle.inclusion_proof, leaves, index, n))
            runs.append(dt)
    rows.append(
        ProofRow(f"`merkle.inclusion_proof` (leaves {indices})", n, Timing(runs), len(proof))
    )
    root = merkle.root_from_leaves(leaves)
    rows.append(
        ProofRow(
            "`merkle.verify_inclusion` of that proof",
            n,
            repeat(lambda: merkle.verify_inclusion(leaves[-1], n - 1, n, proof, root), 5 * repeats),
            len(proof),
        )
    )
    olds = sorted({max(1, n // 3), max(1, n - 1)})
    runs = []
    for _ in range(repeats):
        for old in olds:
            dt, proof = timed(partial(merkle.consistency_proof, leaves, old, n))
            runs.append(dt)
    rows.append(
        ProofRow(f"`merkle.consistency_proof` (from sizes {olds})", n, Timing(runs), len(proof))
    )
    rows.append(
        ProofRow(
            "`merkle.root_from_leaves` (what the stateless proofs above rehash)",
            n,
            repeat(lambda: merkle.root_from_leaves(leaves), repeats),
        )
    )
    return rows


def bench_ledger_proofs(ledger: Ledger, repeats: int, where: str) -> list[ProofRow]:
    n = ledger.size
    rows: list[ProofRow] = []
    runs: list[float] = []
    proof: dict[str, Any] = {}
    for _ in range(repeats):
        for seq in sorted({0, n // 2, n - 1}):
            dt, proof = timed(partial(ledger.inclusion_proof, seq))
            runs.append(dt)
    rows.append(
        ProofRow(f"`Ledger.inclusion_proof` ({where})", n, Timing(runs), len(proof["hashes"]))
    )
    timing = repeat(lambda: ledger.consistency_proof(max(1, n // 3)), repeats)
    rows.append(ProofRow(f"`Ledger.consistency_proof` ({where})", n, timing))
    return rows


# -- 4. the frontier query ---------------------------------------------------------------


@dataclass
class FrontierResult:
    results: int
    groups: int
    load_s: float
    open_s: float
    bodies: Timing
    rows: Timing
    totals_build_s: float  # frontier.Frontier(bodies), 1 run
    columns_build_s: float  # Ledger.frontier(): the same totals from the query columns, 1 run
    totals_rows: Timing  # Frontier.rows() on those totals
    totals_add: Timing  # Frontier.add per result
    db_bytes: int


def load_ledger_db(export: Export, db_path: Path, note_path: Path) -> None:
    """Fill `entries` from the export with DuckDB's JSON reader, as the store would have."""
    db = duckdb.connect(str(db_path))
    try:
        db.execute(SCHEMA)
        src = str(export.lines).replace("'", "''")
        # The query columns come from the store's own derivation, the one its
        # open-time check compares them with.
        columns = ", ".join(ALL_NAMES)
        source = (
            f"(SELECT seq, from_base64(payload) AS payload, signatures::VARCHAR AS signatures, "
            f"leaf_hash FROM read_json('{src}', format = 'newline_delimited', columns = {{"
            "seq: 'BIGINT', payload: 'VARCHAR', signatures: 'JSON', leaf_hash: 'VARCHAR'}))"
        )
        derived = derived_select(source, "decode(payload)", "seq, payload, signatures, leaf_hash")
        db.execute(
            f"INSERT INTO entries (seq, kind, time, payload, signatures, leaf_hash, {columns}) "
            f"SELECT seq, kind, time, payload, signatures, leaf_hash, {columns} "
            f"FROM ({derived}) ORDER BY seq"
        )
        note = export.notes[export.n]
        db.execute(
            "INSERT INTO checkpoints VALUES (?, ?, ?, ?)",
            [export.n, parse_note(note)[0].root.hex(), note, datetime.now(UTC).isoformat()],
        )
    finally:
        db.close()
    note_path.write_text(note, encoding="utf-8")


def bench_frontier(
    export: Export, signer: Signer, tmp: Path, repeats: int, profiles: Profiles
) -> tuple[FrontierResult, list[ProofRow]]:
    data = tmp / "frontier"
    data.mkdir()
    log(f"frontier: loading {export.n:,} entries into DuckDB")
    load_s, _ = timed(
        lambda: load_ledger_db(export, data / "ledger.duckdb", data / "checkpoint.note")
    )
    gc.collect()
    log("frontier: opening the ledger (every leaf rehashed and checked against the note)")
    open_s, ledger = timed(lambda: open_ledger(data, signer))
    if ledger.size != export.n:
        raise RuntimeError(f"the ledger holds {ledger.size} entries, expected {export.n}")
    log("frontier: rebuilt from the query columns (as the daemon starts)")
    columns_s, from_columns = timed(ledger.frontier)
    log("frontier: proofs on the ledger")
    proofs = bench_ledger_proofs(ledger, repeats, f"DuckDB ledger, {export.n:,} entries")

    runs: list[float] = []
    bodies: list[dict[str, Any]] = []
    for rep in range(repeats):
        bodies = []
        gc.collect()
        dt, bodies = timed(lambda: list(ledger.result_bodies()))
        runs.append(dt)
        log(f"frontier: result_bodies {rep + 1}/{repeats}: {dt:.2f} s")
    log(f"frontier: frontier_rows over {len(bodies):,} bodies x {repeats}")
    out: list[dict[str, Any]] = []
    rows_runs: list[float] = []
    for _ in range(repeats):
        dt, out = timed(partial(frontier.frontier_rows, bodies))
        rows_runs.append(dt)
    # The daemon keeps running totals instead: built once at start, then one
    # add per signed result, and a query only turns the totals into rows.
    log("frontier: running totals (frontier.Frontier)")
    build_s, totals = timed(partial(frontier.Frontier, bodies))
    if from_columns.rows() != totals.rows():
        raise RuntimeError("the frontier from the query columns differs from the parsed one")
    totals_rows = repeat(totals.rows, 5 * repeats)
    extra = bodies[: min(len(bodies), 10_000)]
    adds = [timed(partial(totals.add, body))[0] for body in extra]
    result = FrontierResult(
        results=len(bodies),
        groups=len(out),
        load_s=load_s,
        open_s=open_s,
        bodies=Timing(runs),
        rows=Timing(rows_runs),
        totals_build_s=build_s,
        columns_build_s=columns_s,
        totals_rows=totals_rows,
        totals_add=Timing(adds),
        db_bytes=(data / "ledger.duckdb").stat().st_size,
    )
    del totals, extra
    cap = min(len(bodies), PROFILE_CAP)
    profiles.run("frontier-rows", partial(frontier.frontier_rows, bodies[:cap]))
    del bodies
    gc.collect()
    profiles.run("result-bodies", lambda: list(ledger.result_bodies()))
    ledger.close()
    return result, proofs


# -- the report --------------------------------------------------------------------------


def machine_facts(tmp: Path) -> list[tuple[str, str]]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "jouled"], capture_output=True, text=True
        ).stdout.strip()
        commit = f"{rev}{' + uncommitted changes under jouled/' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return [
        ("nproc", f"{os.cpu_count()} ({len(os.sched_getaffinity(0))} usable)"),
        ("CPU", cpu),
        ("memory", mem),
        ("Python", platform.python_version()),
        ("duckdb", duckdb.__version__),
        (
            "cryptography / OpenSSL",
            f"{cryptography.__version__} / {openssl_backend.openssl_version_text()}",
        ),
        ("jouled", f"{__version__} (commit {commit})"),
        ("data dir filesystem", f"{filesystem_of(tmp)} ({tmp})"),
        ("kernel", platform.release()),
        ("load average at start (1/5/15 min)", " / ".join(f"{x:.2f}" for x in os.getloadavg())),
        ("run at", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")),
    ]


def filesystem_of(path: Path) -> str:
    best, fstype = "", "unknown"
    resolved = str(path.resolve())
    with open("/proc/mounts") as fh:
        for line in fh:
            _, mount, kind, *_ = line.split()
            if (resolved == mount or resolved.startswith(mount.rstrip("/") + "/")) and len(
                mount
            ) > len(best):
                best, fstype = mount, kind
    return fstype


def render(
    n: int,
    repeats: int,
    facts: list[tuple[str, str]],
    appends: list[AppendRow],
    floor: list[tuple[str, Timing]],
    export: Export,
    verify: list[VerifyRow],
    proofs: list[ProofRow],
    front: FrontierResult,
    profiles: Profiles,
) -> str:
    single = appends[0]
    batched = max((r for r in appends if r.mode.batch > 1), key=lambda r: r.rate)
    threaded = [r for r in appends if r.mode.threads > 1]
    merkle_row = verify[0]
    frontier_total = front.bodies.median + front.rows.median
    aims = [
        (
            f"durable appends ≥ {AIM_APPENDS_PER_S:,.0f}/s (`append`, one caller)",
            f"{single.rate:,.0f}/s",
            verdict(single.rate, AIM_APPENDS_PER_S, True)[0],
        ),
        (
            f"durable appends ≥ {AIM_APPENDS_PER_S:,.0f}/s "
            f"(`append_many`, best batch: {batched.mode.batch})",
            f"{batched.rate:,.0f}/s",
            verdict(batched.rate, AIM_APPENDS_PER_S, True)[0],
        ),
        *(
            (
                f"durable appends ≥ {AIM_APPENDS_PER_S:,.0f}/s "
                f"(`append` from {r.mode.threads} threads)",
                f"{r.rate:,.0f}/s",
                verdict(r.rate, AIM_APPENDS_PER_S, True)[0],
            )
            for r in threaded
        ),
        (
            f"Merkle-only verify of {n:,} entries ≤ {AIM_MERKLE_VERIFY_S:g} s",
            seconds(merkle_row.timing.median),
            verdict(merkle_row.timing.median, AIM_MERKLE_VERIFY_S, False)[0],
        ),
        (
            f"frontier over {front.results:,} results ≤ {AIM_FRONTIER_S:g} s, rescanned "
            "(`result_bodies` + `frontier_rows`)",
            seconds(frontier_total),
            verdict(frontier_total, AIM_FRONTIER_S, False)[0],
        ),
        (
            f"frontier over {front.results:,} results ≤ {AIM_FRONTIER_S:g} s, from the "
            "daemon's running totals (`Frontier.rows()`)",
            seconds(front.totals_rows.median),
            verdict(front.totals_rows.median, AIM_FRONTIER_S, False)[0],
        ),
    ]
    out: list[str] = []
    w = out.append
    w(f"## Ledger benchmark ({n:,} entries)\n")
    w(
        f"Medians over {repeats} repeats unless a row says otherwise; the range column gives "
        'min-max of the runs behind each median. "vs aim" is measured / aim.\n'
    )
    w("### Aims\n")
    w("| aim | measured | vs aim |")
    w("|---|---:|---|")
    for aim, measured, ratio in aims:
        w(f"| {aim} | {measured} | {ratio} |")
    w("\n### Machine\n")
    w("| | |")
    w("|---|---|")
    for key, value in facts:
        w(f"| {key} | {value} |")

    w("\n### 1. Durable appends\n")
    w(
        "Each call signs, updates the tree and syncs its entries to the ledger's tail "
        "(one fdatasync); every 512 entries the call that fills the batch also replaces "
        "`checkpoint.note` and commits the batch to DuckDB. `result` bodies as "
        "`jouled.pipeline.evaluate` writes them, each attempt journaled first (untimed). "
        "The range is the wall time of whole repeats.\n"
    )
    w(
        "| mode | callers | entries per call | entries per commit | entries per repeat "
        "| appends/s | wall per call | range | vs aim |"
    )
    w("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for row in appends:
        w(
            f"| `Ledger.{row.mode.method}` | {row.mode.threads} | {row.mode.batch} | "
            f"{row.per_commit:.1f} | {row.mode.count:,} | {row.rate:,.0f} | "
            f"{seconds(row.per_call)} | "
            f"{row.timing.spread} | {verdict(row.rate, AIM_APPENDS_PER_S, True)[0]} |"
        )
    w(
        "\nSpeed-up over one caller appending one at a time: "
        + ", ".join(
            f"×{r.rate / single.rate:.1f} "
            + (f"with {r.mode.threads} threads" if r.mode.threads > 1 else f"at {r.mode.batch}")
            for r in appends[1:]
        )
        + ". With several callers `append` may commit their entries together, so "
        "wall per call is what one caller waits."
    )
    w("\nThe syncs one durable call waits for, measured alone on the same data dir:\n")
    w("| operation | median | range |")
    w("|---|---:|---|")
    for label, t in floor:
        w(f"| {label} | {seconds(t.median)} | {t.spread} |")

    w(f"\n### 2. Verifying a {n:,}-entry export\n")
    made = f"generated in {export.generated_s:.0f} s" + (
        " by an earlier run, read from the cache in bench/out/" if export.cached else " this run"
    )
    w(
        f"Export: {export.bytes / 2**20:,.0f} MiB JSONL ({export.bytes / n:,.0f} B/entry; "
        f"genesis, calibration, then results), {made}. Read line by line from the page "
        "cache; the checkpoint note covers all leaves.\n"
    )
    w("| mode | entries | time | entries/s | range | vs aim |")
    w("|---|---:|---:|---:|---|---|")
    for i, vrow in enumerate(verify):
        aim = verdict(vrow.timing.median, AIM_MERKLE_VERIFY_S, False)[0] if i == 0 else "-"
        w(
            f"| {vrow.label} | {vrow.entries:,} | {seconds(vrow.timing.median)} | "
            f"{vrow.rate:,.0f} | {vrow.timing.spread} | {aim} |"
        )
    for vrow in verify:
        if vrow.note:
            w(f"\n{vrow.label}: {vrow.note}.")

    w("\n### 3. Proofs\n")
    w("| operation | tree size | median | range | proof hashes |")
    w("|---|---:|---:|---|---:|")
    for p in proofs:
        w(
            f"| {p.label} | {p.size:,} | {seconds(p.timing.median)} | {p.timing.spread} | "
            f"{p.proof_len or '-'} |"
        )

    w(f"\n### 4. Frontier over {front.results:,} result entries\n")
    w(
        f"The DuckDB ledger was filled from the cached export with DuckDB's `read_json` "
        f"({seconds(front.load_s)}, {front.db_bytes / 2**20:,.0f} MiB; entries are the "
        "export's signed ones, not re-signed: signing is not measured here). Opening it with "
        f"`Ledger(...)` (which rechecks every stored entry against its leaf hash, "
        "its query columns and the note) took "
        f"{seconds(front.open_s)}, 1 run. {front.groups} frontier rows "
        "(suite, solver, model).\n"
    )
    w("Rescanning, as `jb-client` does over an export and the daemon once at start:\n")
    w("| step | time | per result | range | vs aim |")
    w("|---|---:|---:|---|---|")
    for label, t in (
        ("`Ledger.result_bodies()` (DuckDB → dicts)", front.bodies),
        ("`frontier.frontier_rows(bodies)` (in memory)", front.rows),
    ):
        w(
            f"| {label} | {seconds(t.median)} | {seconds(t.median / front.results)} | "
            f"{t.spread} | - |"
        )
    w(
        f"| total | {seconds(frontier_total)} | {seconds(frontier_total / front.results)} | - | "
        f"{verdict(frontier_total, AIM_FRONTIER_S, False)[0]} |"
    )
    w("\nRunning totals, as the daemon serves the frontier:\n")
    w("| step | time | range | vs aim |")
    w("|---|---:|---|---|")
    w(
        f"| `frontier.Frontier(bodies)` (built once, at daemon start) | "
        f"{seconds(front.totals_build_s)} | 1 run | - |"
    )
    w(
        "| `Ledger.frontier()` (the same totals from the query columns, as the daemon "
        f"starts; rows checked equal) | {seconds(front.columns_build_s)} | 1 run | - |"
    )
    w(
        f"| `Frontier.add(body)` (per signed result) | {seconds(front.totals_add.median)} | "
        f"{front.totals_add.spread} | - |"
    )
    w(
        f"| `Frontier.rows()` (the query) | {seconds(front.totals_rows.median)} | "
        f"{front.totals_rows.spread} | "
        f"{verdict(front.totals_rows.median, AIM_FRONTIER_S, False)[0]} |"
    )

    if profiles.summaries:
        w("\n### Profiles (cProfile, one extra pass, hottest by own time)\n")
        w(
            f"Verify and frontier passes are capped at {PROFILE_CAP:,} entries; cProfile "
            "inflates per-call overhead, so read shares, not absolute times. Full listings: "
            "bench/out/profile-*.txt.\n"
        )
        for name, lines in profiles.summaries.items():
            w(f"**{name}**\n")
            for line in lines:
                w(f"- {line}")
            w("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--entries", type=int, default=1_000_000, help="export / ledger size")
    size.add_argument("--quick", action="store_true", help="100,000 entries")
    parser.add_argument("--repeats", type=int, default=3, help="runs behind each median")
    parser.add_argument("--profile", action="store_true", help="add cProfile passes")
    parser.add_argument(
        "--tmp-dir", type=Path, default=None, help="where the temporary data dirs go"
    )
    args = parser.parse_args(argv)
    n = 100_000 if args.quick else args.entries
    if n < 2:
        parser.error("--entries must be at least 2")
    OUT.mkdir(parents=True, exist_ok=True)
    signer = bench_signer()
    profiles = Profiles(args.profile)

    with tempfile.TemporaryDirectory(prefix="ledger-bench-", dir=args.tmp_dir) as tmp_name:
        tmp = Path(tmp_name)
        facts = machine_facts(tmp)
        log("appends")
        appends, small = bench_appends(tmp / "appends", signer, args.repeats, profiles)
        floor = bench_durability_floor(tmp / "appends", small.checkpoint_note(), args.repeats)
        proofs = bench_ledger_proofs(
            small, 5 * args.repeats, f"append ledger, {small.size:,} entries"
        )
        small.close()

        export = ensure_export(n, signer)
        verify = bench_verify(export, signer, args.repeats, profiles)

        log("proofs")
        leaves = read_leaves(export)
        proofs = bench_merkle_proofs(leaves, args.repeats) + proofs
        del leaves
        gc.collect()

        front, big_proofs = bench_frontier(export, signer, tmp, args.repeats, profiles)
        proofs += big_proofs

    text = render(n, args.repeats, facts, appends, floor, export, verify, proofs, front, profiles)
    (OUT / "ledger.md").write_text(text, encoding="utf-8")
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
