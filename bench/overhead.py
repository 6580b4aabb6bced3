"""Per-attempt overhead of a warm `jouled` daemon on one smoke task.

What it measures, for `smoke/lrucache` graded with its reference patch:

- A1: `jb-client submit --json` as a subprocess against a warm daemon (the
  task's baseline already cached), i.e. what an agent harness shelling out
  to the CLI pays per attempt;
- A2: `jb_client.Client.submit` in-process on an open channel: the same
  attempt without the CLI's interpreter start-up and imports;
- B: the very argv the daemon runs for the task's tests
  (`jouled.pipeline.pytest_run.plain_argv`), started with `subprocess.run` in a tree
  seeded once (before/ with reference/ laid over it), bytecode writing on so
  its `__pycache__` stays warm, as in a developer's checkout;
- B-cold: B in a second such tree with `PYTHONDONTWRITEBYTECODE=1`, as the
  sandbox sets it, so no `__pycache__` is ever reused; the daemon's fresh
  workdir per attempt is in the same position.

A1, A2, B and B-cold are interleaved in one loop so that drift on the host
(thermal, page cache, other tenants) lands on all of them alike. Overhead is
median(A) - median(B): what grading through the daemon costs per attempt
over just running the tests. The ratio median(A)/median(B) says how many
times slower that is.

"Where the time goes" times the library pieces an attempt goes through, in
this process, on the same inputs, and multiplies each median by the number
of times one attempt calls it (`Daemon.submit` seeds the workdir and applies
the patch once, before anything is journalled, and grades that tree). The
sandbox's launch cost is `sandbox.run` of a no-op minus `subprocess.run` of
it. The accounted sum is a reading aid, not an identity: the daemon also
pays for thread hand-offs, protobuf encoding and GIL contention among its
gRPC threads, which no single piece shows. The CLI section splits A1 - A2
into interpreter start, imports and the rest.

Medians resist the odd slow run; the IQR column shows how noisy a row was.
Nothing here asserts on time: a slow host gives bigger numbers, not a
failure.

Run: `.venv/bin/python bench/overhead.py [--repeats N]`. Prints a Markdown
section and writes it to bench/out/overhead.md.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import os
import platform
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from jb_client.api import Client
from jb_client.errors import ClientError

import jouled
from jouled.contracts.contract import IGNORED_NAMES, Contract
from jouled.contracts.task import load_task
from jouled.ledger import merkle
from jouled.ledger.signing import load_or_create_key
from jouled.ledger.store import Ledger
from jouled.patch import parse_patch
from jouled.patch_apply import apply_patch
from jouled.patch_diff import diff_trees
from jouled.pipeline.graded_tree import restore_protected, seed
from jouled.pipeline.limits import Limits
from jouled.pipeline.pytest_run import plain_argv
from jouled.pipeline.sandbox import run as sandbox_run

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "tasks"
TASK_ID = "smoke/lrucache"
TASK_DIR = TASKS / "smoke" / "lrucache"
OUT = REPO / "bench" / "out" / "overhead.md"
OVERHEAD_BUDGET_MS = 150.0
# Synthetic ledger sizes for the inclusion proof: the store keeps no interior
# nodes, so a receipt's proof costs about one hash per entry in the ledger.
PROOF_SIZES = (1_000, 100_000)
PROOF_REPEATS = 5


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


# -- the side-by-side loop ----------------------------------------------------------------


@dataclass
class SideBySide:
    a1: Series
    a2: Series
    b: Series
    b_cold: Series  # B without bytecode caches, as in the daemon's fresh workdir
    grade_phase: Series  # the daemon's own wall time for apply + restore + sandboxed tests
    body: dict[str, Any]  # a real result body, reused for the ledger append
    sandbox_level: str


def side_by_side(daemon: RunningDaemon, patch: bytes, scratch: Scratch, repeats: int) -> SideBySide:
    patch_file = scratch.root / "reference.diff"
    patch_file.write_bytes(patch)
    cli = [*_cli(), "--target", daemon.target, "submit", "--task", TASK_ID]
    cli += ["--patch", str(patch_file), "--json"]

    tree = seeded_fixed_tree(scratch.fresh("direct"))
    argv = plain_argv(load_task(TASK_DIR).test_cmd)

    def a1() -> dict[str, Any]:
        done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"jb-client submit exited {done.returncode}: {done.stderr}")
        return _check_receipt(json.loads(done.stdout), "jb-client submit")

    # Every attempt runs in a fresh tree with PYTHONDONTWRITEBYTECODE=1, so
    # pytest compiles and assertion-rewrites the task's modules each time;
    # B's reused tree keeps its __pycache__. B-cold shows what that costs.
    cold_tree = seeded_fixed_tree(scratch.fresh("direct-cold"))
    warm_env = _bytecode_env(write=True)
    cold_env = _bytecode_env(write=False)

    def direct(cwd: Path, env: dict[str, str]) -> None:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"the direct test run exited {done.returncode}: {done.stdout!r}")

    b = partial(direct, tree, warm_env)
    b_cold = partial(direct, cold_tree, cold_env)
    out = SideBySide(
        Series("A1"), Series("A2"), Series("B"), Series("B-cold"), Series("grade"), {}, ""
    )
    with Client(daemon.target, timeout_s=300) as client:

        def a2() -> dict[str, Any]:
            return _check_receipt(client.submit(TASK_ID, patch).to_dict(), "Client.submit")

        # The first submit runs and signs the task's baseline; the first round
        # after it warms the page cache and the daemon's lazy imports.
        a2()
        a1()
        a2()
        b()
        b_cold()
        for _ in range(repeats):
            ns, receipt = timed(a1)
            out.a1.add(ns)
            ns, receipt = timed(a2)
            out.a2.add(ns)
            out.grade_phase.add(round(receipt["energy"]["grade"]["wall_ms"] * 1e6))
            out.b.add(timed(b)[0])
            out.b_cold.add(timed(b_cold)[0])
        out.body = _entry_body(receipt)
        out.sandbox_level = str(out.body.get("sandbox", ""))
    return out


# -- the breakdown ------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    series: Series
    per_attempt: int  # how many times one attempt pays for it
    note: str = ""

    @property
    def total_ms(self) -> float:
        return self.series.median_ms * self.per_attempt


def _realistic_body(template: dict[str, Any]) -> dict[str, Any]:
    # Fresh keys per entry, as real attempts have: the journal's primary key and
    # the idempotency lookup then see distinct values, not one repeated row.
    return {
        **template,
        "attempt_id": secrets.token_hex(16),
        "idempotency_key": secrets.token_hex(16),
    }


def _receipt_proof(ledger: Ledger, seq: int) -> dict[str, Any]:
    # What `Daemon.receipt` does: read the published note, prove against its size.
    note = ledger.checkpoint_note()
    return ledger.inclusion_proof(seq, int(note.split("\n")[1]))


def ledger_pieces(scratch: Scratch, template: dict[str, Any], repeats: int) -> list[Piece]:
    """The per-attempt ledger work of `Daemon.submit`, on a temp DuckDB of its own."""
    home = scratch.fresh("ledger")
    home.mkdir()
    signer, _ = load_or_create_key(home / "jouled.key", home / "jouled.pub")
    ledger = Ledger(
        home / "ledger.duckdb",
        signer,
        origin="bench/overhead",
        checkpoint_path=home / "checkpoint.note",
        genesis={"version": "bench"},
    )
    try:
        # A handful of earlier results so the first append is not a special case.
        for _ in range(5):
            ledger.append("result", _realistic_body(template))
        lookup = Series("idempotency lookup")
        journal = Series("journal accept")
        append = Series("ledger append")
        receipt = Series("receipt proof")
        for _ in range(repeats):
            body = _realistic_body(template)
            key, attempt_id = body["idempotency_key"], body["attempt_id"]
            lookup.add(timed(partial(ledger.result_for_key, key))[0])
            accept = partial(ledger.journal_accept, attempt_id, key, TASK_ID, {"solver": "remote"})
            journal.add(timed(accept)[0])
            ns, entry = timed(partial(ledger.append, "result", body))
            append.add(ns)
            receipt.add(timed(partial(_receipt_proof, ledger, entry.seq))[0])
        size = ledger.size
    finally:
        ledger.close()
    return [
        Piece(lookup, 1, "`result_for_key`: the client always sends a key"),
        Piece(journal, 1, "`journal_accept`: one DuckDB commit before the run"),
        Piece(append, 1, "sign (Ed25519), commit, checkpoint note with fsync"),
        Piece(receipt, 1, f"checkpoint read + inclusion proof, ledger of ~{size}"),
    ]


def proof_scaling() -> list[tuple[int, Series]]:
    """Inclusion-proof cost at ledger sizes a long-lived daemon reaches (its cached tree)."""
    rows = []
    for size in PROOF_SIZES:
        tree = merkle.MerkleTree()
        for i in range(size):
            tree.append(merkle.leaf_hash(i.to_bytes(8, "big")))
        rows.append(
            (
                size,
                measure(
                    f"proof@{size}",
                    PROOF_REPEATS,
                    partial(tree.inclusion_proof, size - 1, size),
                ),
            )
        )
    return rows


def tree_pieces(contract: Contract, patch: bytes, scratch: Scratch, repeats: int) -> list[Piece]:
    parsed = parse_patch(patch)
    seeding = measure("seed", repeats, lambda: seed(contract, scratch.fresh("seed")))
    parsing = measure("parse", repeats, lambda: parse_patch(patch))
    applying = measure_with_setup(
        "apply",
        repeats,
        lambda: seed(contract, scratch.fresh("apply")),
        lambda t: apply_patch(parsed, t),
    )

    def patched() -> Path:
        tree = seed(contract, scratch.fresh("restore"))
        apply_patch(parsed, tree)
        return tree

    restoring = measure_with_setup(
        "restore", repeats, patched, lambda t: restore_protected(contract, t)
    )
    return [
        Piece(seeding, 1, "`seed`: the attempt's workdir, in `prepared`"),
        Piece(parsing, 1, "`parse_patch` of the submitted diff"),
        Piece(applying, 1, "`apply_patch` into that workdir"),
        Piece(restoring, 1, "`restore_protected`: reads and compares every file"),
    ]


@dataclass
class Launch:
    sandbox: Series
    plain: Series
    level: str

    @property
    def overhead_ms(self) -> float:
        return self.sandbox.median_ms - self.plain.median_ms


def launch_overhead(contract: Contract, scratch: Scratch, repeats: int) -> Launch:
    """`sandbox.run` of a no-op interpreter against a bare `subprocess.run` of it."""
    work = scratch.fresh("launch")
    work.mkdir()
    os.chmod(work, 0o711)
    tree = seed(contract, work / "tree")
    noop = [sys.executable, "-c", "pass"]
    limits = Limits(timeout_s=contract.timeout_s)
    level = sandbox_run(noop, tree, limits=limits).level
    sandboxed, plain = Series("sandbox"), Series("plain")
    for _ in range(repeats):
        sandboxed.add(timed(lambda: sandbox_run(noop, tree, limits=limits))[0])
        plain.add(timed(lambda: subprocess.run(noop, cwd=tree, check=True))[0])
    return Launch(sandboxed, plain, level)


def rpc_round_trips(target: str, repeats: int) -> tuple[Series, Series]:
    with Client(target, timeout_s=30) as client, grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        # Connect both channels first: the warm round trip is what an attempt pays.
        client.tasks()
        stub.Check(request, timeout=5)
        health = measure("RPC round trip", repeats, lambda: stub.Check(request, timeout=5))
        tasks = measure("tasks", repeats, client.tasks)
    return health, tasks


@dataclass
class CliStartup:
    bare: Series  # `python -c pass`
    imported: Series  # `python -c "import jb_client.cli"`, in this environment
    cached: Series  # the same with every module's bytecode cached
    tasks_cli: Series  # `jb-client tasks --json`: a whole CLI run around a trivial RPC
    project_cached: bool  # whether this environment has bytecode for jouled's own sources
    heaviest: list[tuple[str, float]]  # (module, cumulative ms) of that CLI run


@dataclass
class _Import:
    name: str
    cumulative_ms: float
    children: list[_Import] = field(default_factory=list)


def _import_tree(stderr: str) -> list[_Import]:
    """The roots of `-X importtime` output, which lists children before their parent."""
    pending: dict[int, list[_Import]] = {}
    for line in stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3 or not fields[1].strip().isdigit():
            continue  # the header, or the program's own output
        raw = fields[2].rstrip()
        depth = (len(raw) - len(raw.lstrip(" ")) - 1) // 2
        node = _Import(raw.strip(), int(fields[1]) / 1000, pending.pop(depth + 1, []))
        pending.setdefault(depth, []).append(node)
    return pending.get(0, [])


def _outside_jb_client(nodes: list[_Import]) -> Iterator[_Import]:
    """The first module on each import path that is not the client's own, so none overlap."""
    for node in nodes:
        if node.name.partition(".")[0] == "jb_client":
            yield from _outside_jb_client(node.children)
        else:
            yield node


def cli_startup(scratch: Scratch, target: str, repeats: int, top: int = 8) -> CliStartup:
    """What a `jb-client` process pays around the request it sends."""
    bare_argv = [sys.executable, "-c", "pass"]
    import_argv = [sys.executable, "-c", "import jb_client.cli"]
    tasks_args = ["--target", target, "tasks", "--json"]
    # An editable install ships no bytecode for the project's own modules; a
    # private cache prefix shows what compiling them costs without writing
    # __pycache__ into the source tree.
    cached_env = _bytecode_env(write=True, pycache=scratch.fresh("pycache"))
    subprocess.run(import_argv, env=cached_env, check=True)
    bare, imported, cached = Series("bare"), Series("import"), Series("cached")
    tasks_cli = Series("jb-client tasks")
    for _ in range(repeats):
        bare.add(timed(partial(_run_quiet, bare_argv))[0])
        imported.add(timed(partial(_run_quiet, import_argv))[0])
        cached.add(timed(partial(_run_quiet, import_argv, cached_env))[0])
        tasks_cli.add(timed(partial(_run_quiet, [*_cli(), *tasks_args]))[0])
    project_cached = Path(importlib.util.cache_from_source(jouled.__file__)).exists()
    done = subprocess.run(
        [*_cli("-X", "importtime"), *tasks_args],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = sorted(
        _outside_jb_client(_import_tree(done.stderr)),
        key=lambda node: node.cumulative_ms,
        reverse=True,
    )
    heaviest = [(m.name, m.cumulative_ms) for m in modules[:top]]
    return CliStartup(bare, imported, cached, tasks_cli, project_cached, heaviest)


# -- every command's start-up against `import grpc` -------------------------------------

# The aim (issue 24): each command's fixed start-up at most this many times
# `python -c "import grpc"` in the same environment.
STARTUP_AIM = 1.5
GRPC_IMPORT = '`python -c "import grpc"`'
# The libraries every command that calls the daemon needs: gRPC, the generated stubs
# (protobuf) and the CLI's parser.
FLOOR_IMPORTS = "import grpc, typer, jouled.v1.jouled_pb2_grpc"


@dataclass
class Startup:
    rows: list[tuple[str, str, Series]]  # (label, what it pays for, samples)
    baseline: Series  # `python -c "import grpc"`
    bare: Series  # `python -c pass`
    floor: Series  # FLOOR_IMPORTS: what a command that calls the daemon cannot do without
    uncached: Series  # `jb-client tasks --json` compiling the project's modules on every run
    load_before: float
    load_after: float


def _startup_commands(target: str, scratch: Scratch, seq: int) -> list[tuple[str, str, list[str]]]:
    """(label, kind, argv) of each command: one cheap real call each, and --help for the rest.

    "daemon": a whole run of the command against a warm daemon with a one-result
    ledger (the call itself is a few ms of it); "offline": a whole run on small files;
    "help": the command's own `--help`, i.e. parsing and its module's imports.
    """
    cli = _cli()
    t = ["--target", target]
    files = scratch.fresh("startup-files")
    files.mkdir()
    export = files / "ledger.jsonl"
    subprocess.run([*cli, *t, "export", "--out", str(export)], check=True, capture_output=True)
    receipt = files / "receipt.json"
    done = subprocess.run(
        [*cli, *t, "receipt", "--seq", str(seq), "--json"], check=True, capture_output=True
    )
    receipt.write_bytes(done.stdout)
    pubkey = Path(target.removeprefix("unix:")).with_name("jouled.pub")
    work = files / "work"
    daemon_calls = [
        ["tasks", "--json"],
        ["fetch", "--task", TASK_ID, "--out", str(work), "--force", "--json"],
        ["frontier", "--json"],
        ["bestofk", "--json"],
        ["receipt", "--seq", str(seq), "--json"],
        ["logs", "--seq", str(seq), "--json"],
        ["keys", "--json"],
        ["checkpoint", "--json"],
        ["proof", "--seq", str(seq), "--json"],
        ["consistency", "--old", "1", "--json"],
        ["meter", "--json"],
    ]
    offline = [
        ["verify", str(export), "--pubkey", str(pubkey), "--json"],
        ["audit", str(receipt), "--pubkey", str(pubkey), "--json"],
        ["frontier", "--from-export", str(export), "--json"],
    ]
    # Commands whose real run is not start-up (an attempt, a calibration, an export's
    # Parquet snapshot): their --help is what every run of them pays before it works.
    helped = [
        "submit", "run", "compare", "swebench", "export", "verify", "calibrate", "meter-run",
        "report",
    ]  # fmt: skip
    out = [("`jb-client --help`", "help", [*cli, "--help"])]
    for a in daemon_calls:
        label = " ".join([a[0], *(x for x in a[1:] if x in ("--force", "--json"))])
        out.append((f"`jb-client {label}`", "daemon", [*cli, *t, *a]))
    out.append(("`jb-client audit --json`", "offline", [*cli, *offline[1]]))
    # Verifying an export is the command's work, not its start-up: every signature, the
    # Merkle root, and the Parquet snapshot read back through DuckDB (~0.1 s to import).
    out.append(("`jb-client verify --json`", "work", [*cli, *offline[0]]))
    out.append(("`jb-client frontier --from-export --json`", "work", [*cli, *offline[2]]))
    out += [(f"`jb-client {name} --help`", "help", [*cli, name, "--help"]) for name in helped]
    return out


def startup(target: str, scratch: Scratch, seq: int, repeats: int) -> Startup:
    """Each command's whole run against `python -c "import grpc"`, interleaved round by round."""
    commands = _startup_commands(target, scratch, seq)
    # Every module's bytecode cached, as an installed wheel has it (an editable install
    # under PYTHONDONTWRITEBYTECODE=1 compiles the project's sources on every run; the
    # `uncached` row shows what that adds), in a private prefix, not the source tree.
    env = _bytecode_env(write=True, pycache=scratch.fresh("startup-pycache"))
    grpc_argv = [sys.executable, "-c", "import grpc"]
    tasks_argv = next(a for label, _, a in commands if label == "`jb-client tasks --json`")
    floor_argv = [sys.executable, "-c", FLOOR_IMPORTS]
    baseline, bare, floor = Series("import grpc"), Series("pass"), Series("floor")
    uncached = Series("`jb-client tasks --json`, no bytecode for the project's modules")
    series = [Series(label) for label, _, _ in commands]
    load_before = os.getloadavg()[0]
    for argv in [grpc_argv, floor_argv, *(a for _, _, a in commands)]:  # warm every cache
        _run_quiet(argv, env)
    for _ in range(repeats):
        baseline.add(timed(partial(_run_quiet, grpc_argv, env))[0])
        bare.add(timed(partial(_run_quiet, [sys.executable, "-c", "pass"], env))[0])
        floor.add(timed(partial(_run_quiet, floor_argv, env))[0])
        for (_, _, argv), s in zip(commands, series, strict=True):
            s.add(timed(partial(_run_quiet, argv, env))[0])
        uncached.add(timed(partial(_run_quiet, tasks_argv, _bytecode_env(write=False)))[0])
    rows = [(label, kind, s) for (label, kind, _), s in zip(commands, series, strict=True)]
    return Startup(rows, baseline, bare, floor, uncached, load_before, os.getloadavg()[0])


def render_startup(r: Startup, repeats: int) -> str:
    base = r.baseline.median_ms
    lines = [
        "## Every command's start-up against `import grpc`",
        "",
        f"- Host: nproc {len(os.sched_getaffinity(0))} (of {os.cpu_count()} CPUs), "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
        f"load average {r.load_before:.2f} at start, {r.load_after:.2f} at the end",
        f"- Repeats: {repeats} per row, every row once per round (interleaved); medians",
        f"- Baseline: {GRPC_IMPORT} {_ms(base)} ms (IQR {_ms(r.baseline.iqr_ms)}); "
        f'`python -c pass` {_ms(r.bare.median_ms)} ms; `python -c "{FLOOR_IMPORTS}"` '
        f"{_ms(r.floor.median_ms)} ms ({r.floor.median_ms / base:.2f}x): the floor of a "
        "command that calls the daemon, before any of its own code",
        f"- Aim: each command at most {STARTUP_AIM}x the baseline",
        "",
        _row("Command", "Kind", "Median ms", "IQR ms", "Ratio to import grpc", "Aim"),
        _row("---", "---", "---:", "---:", "---:", "---"),
    ]
    for label, kind, s in r.rows:
        ratio = s.median_ms / base
        lines.append(
            _row(
                label,
                kind,
                _ms(s.median_ms),
                _ms(s.iqr_ms),
                f"{ratio:.2f}",
                "(not start-up)"
                if kind == "work"
                else "met"
                if ratio <= STARTUP_AIM
                else f"over by {_ms(s.median_ms - STARTUP_AIM * base)} ms",
            )
        )
    starts = [s for _, kind, s in r.rows if kind != "work"]
    met = sum(s.median_ms <= STARTUP_AIM * base for s in starts)
    tasks = next(s for label, _, s in r.rows if label == "`jb-client tasks --json`")
    lines += [
        "",
        f'- {met} of {len(starts)} start-up rows within {STARTUP_AIM}x. "daemon" rows are '
        "whole runs against a warm daemon with a one-result ledger (the call itself is a few "
        'ms); "offline" a whole `audit` of one receipt; "help" rows the command\'s '
        "`--help`: parsing and its own module's imports, the fixed part of every run of it. "
        '"work" rows verify that ledger\'s export and are not start-up (not counted).',
        f"- Bytecode: every row runs with every module's bytecode cached (a private "
        "`PYTHONPYCACHEPREFIX`), as an installed wheel has it. Without bytecode for the "
        "project's own modules (this editable install under `PYTHONDONTWRITEBYTECODE=1`), "
        f"`jb-client tasks --json` takes {_ms(r.uncached.median_ms)} ms "
        f"({r.uncached.median_ms / base:.2f}x), {_ms(r.uncached.median_ms - tasks.median_ms)} "
        "ms of compiling.",
        "",
    ]
    return "\n".join(lines)


# -- report -------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return f"{value:.1f}"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


@dataclass
class Results:
    repeats: int
    load_before: float  # 1-minute load average when the run began
    sbs: SideBySide
    tree: list[Piece]
    ledger: list[Piece]
    scaling: list[tuple[int, Series]]
    launch: Launch
    cli: CliStartup
    health: Series
    tasks: Series
    elapsed_s: float


def render(r: Results) -> str:
    a1, a2, b, cold = r.sbs.a1, r.sbs.a2, r.sbs.b, r.sbs.b_cold
    grade = r.sbs.grade_phase
    cli = r.cli
    cli_ms = a1.median_ms - a2.median_ms
    fixed_ms = cli.tasks_cli.median_ms - r.tasks.median_ms
    lines = [
        "## Daemon overhead per attempt (warm daemon, `smoke/lrucache`, reference patch)",
        "",
        f"- Host: nproc {len(os.sched_getaffinity(0))} (of {os.cpu_count()} CPUs), "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
        f"load average {r.load_before:.2f} at start, {os.getloadavg()[0]:.2f} at the end",
        f"- Repeats: {r.repeats} per row, A1/A2/B/B-cold interleaved in one loop; "
        f"breakdown rows {r.repeats} each (proof scaling {PROOF_REPEATS}); "
        f"whole run {r.elapsed_s:.0f} s",
        "- Daemon: `jouled serve --energy estimator --calibrate-seconds 0`, baseline cached; "
        f"sandbox level of the graded runs `{r.sbs.sandbox_level}` "
        f"(in-process launch probe `{r.launch.level}`)",
        "",
        "### Side by side",
        "",
        _row("Path", "Median ms", "IQR ms", "Over B ms", "Ratio to B"),
        _row("---", "---:", "---:", "---:", "---:"),
    ]
    for series, name in (
        (a1, "A1 `jb-client submit --json` (subprocess)"),
        (a2, "A2 `Client.submit` (in-process, open channel)"),
        (b, "B the daemon's test argv run directly, seeded tree, warm `__pycache__`"),
        (cold, "B-cold B with `PYTHONDONTWRITEBYTECODE=1`, no `__pycache__`"),
    ):
        lines.append(
            _row(
                name,
                _ms(series.median_ms),
                _ms(series.iqr_ms),
                "-" if series is b else _ms(series.median_ms - b.median_ms),
                f"{series.median_ms / b.median_ms:.2f}",
            )
        )
    lines += [
        "",
        f"- Overhead median(A) - median(B): A1 {_ms(a1.median_ms - b.median_ms)} ms "
        f"(ratio {a1.median_ms / b.median_ms:.2f}), A2 {_ms(a2.median_ms - b.median_ms)} ms "
        f"(ratio {a2.median_ms / b.median_ms:.2f}).",
        f"- The daemon's grade phase (apply + restore + sandboxed tests, the receipt's "
        f"`energy.grade.wall_ms`): {_ms(grade.median_ms)} ms, "
        f"{_ms(grade.median_ms - b.median_ms)} ms over B; A2 spends "
        f"{_ms(a2.median_ms - grade.median_ms)} ms outside that phase.",
        "",
        "### Where the time goes (in-process, medians)",
        "",
        _row("Piece", "Median ms", "IQR ms", "Per attempt", "ms per attempt", "What"),
        _row("---", "---:", "---:", "---:", "---:", "---"),
    ]
    rpc = Piece(r.health, 1, "empty gRPC round trip (health `Check`), warm channel")
    pieces = [*r.tree, *r.ledger, rpc]
    for p in pieces:
        lines.append(
            _row(
                p.series.label,
                _ms(p.series.median_ms),
                _ms(p.series.iqr_ms),
                str(p.per_attempt),
                _ms(p.total_ms),
                p.note,
            )
        )
    launch_ms = r.launch.overhead_ms
    cold_ms = cold.median_ms - b.median_ms
    lines += [
        _row(
            "sandbox launch",
            _ms(launch_ms),
            "-",
            "1",
            _ms(launch_ms),
            f"`sandbox.run` {_ms(r.launch.sandbox.median_ms)} ms minus `subprocess.run` "
            f"{_ms(r.launch.plain.median_ms)} ms, both `python -c pass`",
        ),
        _row(
            "cold bytecode",
            _ms(cold_ms),
            "-",
            "1",
            _ms(cold_ms),
            "B-cold minus B: the fresh workdir recompiles and assertion-rewrites the task",
        ),
    ]
    accounted = sum(p.total_ms for p in pieces) + launch_ms + cold_ms
    overhead_ms = a2.median_ms - b.median_ms
    lines += [
        "",
        f"- Accounted: {_ms(accounted)} ms against the {_ms(overhead_ms)} ms A2 overhead. "
        + (
            f"The other {_ms(overhead_ms - accounted)} ms are thread hand-offs, protobuf and "
            "JSON encoding and GIL contention in the daemon, which no piece shows alone."
            if accounted <= overhead_ms
            else "The pieces sum to more than that: the overhead is a difference of two "
            f"~{b.median_ms:.0f} ms medians, noisier than the pieces; read them as relative "
            "sizes."
        ),
        f"- `Client.tasks()` round trip (7 tasks with prompts): {_ms(r.tasks.median_ms)} ms.",
        "- Inclusion proof vs ledger size (the daemon's tree keeps its perfect subtrees, so "
        "this grows with log n): "
        + ", ".join(f"{n:,} entries {_ms(s.median_ms)} ms" for n, s in r.scaling)
        + ".",
        "",
        "### CLI start-up (A1 - A2)",
        "",
        f"- A1 - A2: {_ms(cli_ms)} ms. A whole `jb-client tasks --json` takes "
        f"{_ms(cli.tasks_cli.median_ms)} ms against {_ms(r.tasks.median_ms)} ms for "
        f"`Client.tasks()`: {_ms(fixed_ms)} ms of fixed cost per CLI run, of which "
        f"interpreter start (`python -c pass`) {_ms(cli.bare.median_ms)} ms, "
        f"`import jb_client.cli` {_ms(cli.imported.median_ms - cli.bare.median_ms)} ms and "
        f"{_ms(fixed_ms - cli.imported.median_ms)} ms of command dispatch, lazy imports, "
        "a new channel's connect and exit. "
        + (
            f"The other {_ms(cli_ms - fixed_ms)} ms are particular to `submit` (reading "
            "the patch, rendering progress on stderr, the indented JSON receipt)."
            if cli_ms - fixed_ms >= 0
            else f"`submit` adds nothing measurable on top ({_ms(cli_ms - fixed_ms)} ms, "
            "within noise)."
        ),
        "- Bytecode for the project's own modules in this environment: "
        f"{'present' if cli.project_cached else 'absent (editable install, nothing compiled)'}"
        f"; `import jb_client.cli` with every module's bytecode cached takes "
        f"{_ms(cli.cached.median_ms)} ms against {_ms(cli.imported.median_ms)} ms here.",
        "- Heaviest imports of one `jb-client tasks --json` run (cumulative ms from "
        "`-X importtime`; the first module outside `jb_client` on each path, so none "
        "overlap): " + ", ".join(f"`{name}` {_ms(ms)}" for name, ms in cli.heaviest) + ".",
        "",
        f"Verdict against a {OVERHEAD_BUDGET_MS:.0f} ms per-attempt budget: "
        + ", ".join(
            f"{name} {_ms(s.median_ms - b.median_ms)} ms "
            f"({'within' if s.median_ms - b.median_ms < OVERHEAD_BUDGET_MS else 'over'})"
            for name, s in (("A2", a2), ("A1", a1))
        )
        + ".",
        "",
    ]
    return "\n".join(lines)


# -- main ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=15, help="samples per row (default 15)")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write the Markdown")
    parser.add_argument(
        "--startup-only",
        action="store_true",
        help="only every command's start-up against `import grpc` (a minute or two)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.startup_only:
        return startup_only(args.repeats, args.out.with_name("startup.md"))

    begin = time.monotonic()
    load_before = os.getloadavg()[0]
    contract = load_task(TASK_DIR)
    with tempfile.TemporaryDirectory(prefix="jb-overhead-") as tmp:
        root = Path(tmp)
        scratch = Scratch(root / "scratch")
        patch = reference_patch(scratch.root)
        with running_daemon(root) as daemon:
            sbs = side_by_side(daemon, patch, scratch, args.repeats)
            health, tasks = rpc_round_trips(daemon.target, args.repeats)
            cli = cli_startup(scratch, daemon.target, args.repeats)
            seq = _check_receipt(
                Client(daemon.target).submit(TASK_ID, patch).to_dict(), "Client.submit"
            )["seq"]
            starts = startup(daemon.target, scratch, seq, args.repeats)
        # The daemon is stopped first so that its idle threads do not share
        # the CPUs with the in-process measurements.
        tree = tree_pieces(contract, patch, scratch, args.repeats)
        ledger = ledger_pieces(scratch, sbs.body, args.repeats)
        scaling = proof_scaling()
        launch = launch_overhead(contract, scratch, args.repeats)
    results = Results(
        args.repeats,
        load_before,
        sbs,
        tree,
        ledger,
        scaling,
        launch,
        cli,
        health,
        tasks,
        time.monotonic() - begin,
    )
    text = render(results) + "\n" + render_startup(starts, args.repeats)
    sys.stdout.write(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    return 0


def startup_only(repeats: int, out: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="jb-startup-") as tmp:
        root = Path(tmp)
        scratch = Scratch(root / "scratch")
        patch = reference_patch(scratch.root)
        with running_daemon(root) as daemon:
            with Client(daemon.target, timeout_s=300) as client:
                seq = _check_receipt(client.submit(TASK_ID, patch).to_dict(), "submit")["seq"]
            starts = startup(daemon.target, scratch, seq, repeats)
    text = render_startup(starts, repeats)
    sys.stdout.write(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
