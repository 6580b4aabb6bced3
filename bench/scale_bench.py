"""Scale, side by side: this tree against an earlier revision, on the same 1M-entry data.

Each measurement runs in a fresh process for each tree, the trees taking turns
within every repeat, so load from elsewhere on the machine falls on both:

1. Daemon start: `jouled serve` on a data dir holding an N-entry ledger, from
   the process start until its health service answers SERVING. Each tree gets
   the ledger its own store writes (the earlier one's schema, or this one's
   with the frontier columns; migrating is timed once, apart). This tree
   starts twice per repeat: after a clean stop, which sealed the query
   columns, and with the seal removed, as after a crash, when every column is
   compared with its payload. Both are also broken down in-process: opening
   (leaf rehash, column check, tree), the frontier rebuild, and the close
   that seals.
2. `jb-client frontier --from-export FILE --json` over the N-entry export:
   with the Parquet snapshot `jb-client export` writes beside it, and (this
   tree) without one, from the payloads. The printed rows are compared.
3. Merkle-only verification (`verify_file`, `signatures=False`) on all cores.
4. A full audit: every Ed25519 signature, all cores (one run per tree: the
   earlier one takes minutes).
5. One caller appending results one at a time (`Ledger.append`), each durable.
6. `jb-client tasks --json` against a running daemon, end to end (the process
   start to its exit), and the import profile of each.

Run: .venv/bin/python bench/scale_bench.py [--before REV] [--entries N] [--repeats R]
The export and the ledgers are built once and cached in bench/out/; the
Markdown goes to stdout and bench/out/scale.md, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ledger_bench as lb
from _scale_report import CPU_S, Runs, Side, render
from _scale_trees import OUT, REPO, Tree, this_tree, tree_at


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- 1. daemon start ---------------------------------------------------------------------

LOAD = """
import json, sys, time
sys.path.insert(0, "bench")
import ledger_bench as lb
from pathlib import Path
lb.OUT = Path(sys.argv[3])  # the export cached by this checkout's bench
export = lb.ensure_export(int(sys.argv[1]), lb.bench_signer())
data = Path(sys.argv[2])
data.mkdir(parents=True)
start = time.perf_counter()
lb.load_ledger_db(export, data / "ledger.duckdb", data / "checkpoint.note")
print(json.dumps(time.perf_counter() - start))
"""

OPEN = """
import json, sys, time
sys.path.insert(0, "bench")
import ledger_bench as lb
from pathlib import Path
start = time.perf_counter()
ledger = lb.open_ledger(Path(sys.argv[1]), lb.bench_signer())
print(json.dumps(time.perf_counter() - start))
ledger.close()
"""

# This tree's start, broken down: where the time goes.
PARTS = """
import json, sys, time, threading
sys.path.insert(0, "bench")
import ledger_bench as lb
from pathlib import Path
from jouled.ledger import opening
times = {}
def timed(name, fn):
    def wrapper(*a, **k):
        start = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            times[name] = times.get(name, 0) + time.perf_counter() - start
    return wrapper
opening.rehash = timed("rehash payloads and build the tree", opening.rehash)
opening.check_columns = timed(
    "column check (DuckDB, beside the rehash)", opening.check_columns)
opening.seal.digest = timed("  the seal's digest", opening.seal.digest)
opening.column_mismatch = timed("  every column from its payload", opening.column_mismatch)
if sys.argv[2] == "unsealed":
    opening.seal.seal_path(Path(sys.argv[1]) / "ledger.duckdb").unlink(missing_ok=True)
opening.migrate = timed("columns present and filled", opening.migrate)
start = time.perf_counter()
ledger = lb.open_ledger(Path(sys.argv[1]), lb.bench_signer())
times["open (all of the above)"] = time.perf_counter() - start
start = time.perf_counter()
frontier = ledger.frontier(e.body for e in ledger.entries("op"))
times["frontier rebuild (aggregate queries)"] = time.perf_counter() - start
times["rows"] = len(frontier.rows())
times["columns"] = ledger.columns_checked
digest = times.pop("  the seal's digest", None)  # the open's, when it had a seal
start = time.perf_counter()
ledger.close()
times["close (flush, fill, seal the columns)"] = time.perf_counter() - start
times.pop("  the seal's digest", None)  # the close's is part of its line
if digest is not None:
    times["  the seal's digest"] = digest
print(json.dumps(times))
"""


def ledger_dir(tree: Tree, n: int) -> Path:
    """A data dir with the N-entry ledger as `tree`'s store keeps it, and the bench key."""
    data = OUT / f"ledger-{n}-{tree.root.name}"
    if (data / ".complete").exists():
        return data
    shutil.rmtree(data, ignore_errors=True)
    log(f"{tree.name}: loading the {n:,}-entry ledger into {data}")
    tree.python(LOAD, str(n), str(data), str(OUT))
    from cryptography.hazmat.primitives import serialization

    signer = lb.bench_signer()
    key = data / "jouled.key"
    key.write_bytes(
        signer.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key.chmod(0o600)
    (data / "jouled.pub").write_bytes(
        signer.public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    (data / ".complete").write_text("")
    return data


def serving(target: str) -> bool:
    """Whether the daemon's health service answers SERVING, on a channel of its own.

    A fresh channel per try: one that failed to connect backs off for seconds
    before trying again, which would add its backoff to the start measured.
    """
    sys.path.insert(0, str(REPO))
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=2
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_daemon(tree: Tree, data: Path, cpu_key: str = "") -> float:
    """Seconds from `jouled serve` starting to its health service answering SERVING."""
    argv = [
        sys.executable, "-m", "jouled", "serve", "--data-dir", str(data),
        "--tasks", str(REPO / "tasks"), "--energy", "estimator", "--calibrate-seconds", "0",
    ]  # fmt: skip
    log_path = data.parent / f"{data.name}.log"
    socket = data / "jouled.sock"
    socket.unlink(missing_ok=True)
    start = time.perf_counter()
    with log_path.open("ab") as fh:
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, env=tree.env(), cwd=tree.root
        )
    try:
        while not (socket.exists() and serving(f"unix:{socket}")):
            if proc.poll() is not None:
                raise RuntimeError(f"{tree.name}: the daemon exited; see {log_path}")
            time.sleep(0.02)
        elapsed = time.perf_counter() - start
        CPU_S.setdefault(cpu_key or tree.name, []).append(cpu_seconds(proc.pid))
        return elapsed
    finally:
        proc.terminate()
        proc.wait(timeout=600)


# -- 2. frontier from an export ----------------------------------------------------------


def frontier_cli(tree: Tree, export: Path) -> tuple[float, str]:
    argv = [sys.executable, "-m", "jb_client", "frontier", "--from-export", str(export), "--json"]
    start = time.perf_counter()
    done = subprocess.run(
        argv, capture_output=True, text=True, env=tree.env(), cwd=tree.root, timeout=3600
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{tree.name} frontier: {done.stderr[-2000:]}")
    return elapsed, done.stdout


# -- 3, 4. verification ------------------------------------------------------------------

VERIFY = """
import json, os, sys, time
sys.path.insert(0, "bench")
import ledger_bench as lb
from pathlib import Path
from jouled.ledger.verify import verify_file
meta = json.loads(Path(sys.argv[1] + ".meta").read_text())
signer = lb.bench_signer()
start = time.perf_counter()
report = verify_file(Path(sys.argv[1]), [signer.public], [meta["note"]],
                     signatures=sys.argv[2] == "1", workers=os.cpu_count() or 1)
assert report.entries == meta["n"]
print(json.dumps(time.perf_counter() - start))
"""

# -- 5. appends --------------------------------------------------------------------------

APPENDS = """
import json, sys, tempfile, time
sys.path.insert(0, "bench")
import ledger_bench as lb
from pathlib import Path
count = int(sys.argv[1])
with tempfile.TemporaryDirectory(dir=sys.argv[2]) as tmp:
    ledger = lb.open_ledger(Path(tmp), lb.bench_signer())
    bodies = lb.Bodies(seed=1)
    items = [bodies() for _ in range(count + 50)]
    for body in items[:50]:  # warm: the first appends also create the tables' segments
        ledger.append("result", body)
    start = time.perf_counter()
    for body in items[50:]:
        ledger.append("result", body)
    elapsed = time.perf_counter() - start
    ledger.close()
print(json.dumps(count / elapsed))
"""

# What one durable append waits for: a DuckDB transaction of one entry and its checkpoint
# row (the earlier store's path, this tree's schema), against the fdatasync of a small write
# (this tree's tail), on the data dir's file system and on tmpfs, where a sync costs nothing.
FLOOR = """
import json, os, statistics, sys, tempfile, time
import duckdb
from jouled.ledger.columns import NAMES
from jouled.ledger.schema import SCHEMA
def median_s(fn, n=300):
    runs = []
    for _ in range(n):
        start = time.perf_counter(); fn(); runs.append(time.perf_counter() - start)
    return statistics.median(runs)
out = {}
cols = ("seq", "kind", "time", "payload", "signatures", "leaf_hash", *NAMES)
insert = f"INSERT INTO entries ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
row = ["result", "2026-01-01T00:00:00.000Z", b"x" * 1500, "[]", "ab" * 32, "s/t", "s",
       "d" * 64, "solver", "model", "resolved", True, "p" * 64, "key", "run", 3, "a" * 32]
for where in sys.argv[1:]:
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        db = duckdb.connect(os.path.join(tmp, "floor.duckdb"))
        db.execute(SCHEMA)
        seq = iter(range(10**9))
        def one():
            n = next(seq)
            db.execute("BEGIN TRANSACTION")
            db.execute(insert, [n, *row])
            db.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?)", [n, "r" * 64, "n" * 200, "t"])
            db.execute("COMMIT")
        out[f"duckdb {where}"] = median_s(one)
        db.close()
        fd = os.open(os.path.join(tmp, "sync"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        def sync():
            os.write(fd, b"x" * 2048); os.fdatasync(fd)
        out[f"fdatasync {where}"] = median_s(sync)
        os.close(fd)
print(json.dumps(out))
"""

# -- 6. CLI start-up ---------------------------------------------------------------------


def tasks_json(tree: Tree, target: str) -> tuple[float, str]:
    argv = [sys.executable, "-m", "jb_client", "--target", target, "tasks", "--json"]
    start = time.perf_counter()
    done = subprocess.run(
        argv, capture_output=True, text=True, env=tree.env(), cwd=tree.root, timeout=120
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{tree.name} tasks: {done.stderr[-2000:]}")
    return elapsed, done.stdout


def import_profile(tree: Tree, target: str, top: int = 8) -> list[tuple[str, float]]:
    """The heaviest imports of `tasks --json`, two levels deep (cumulative ms, -X importtime)."""
    argv = [sys.executable, "-X", "importtime", "-m", "jb_client", "--target", target]
    done = subprocess.run(
        [*argv, "tasks", "--json"],
        capture_output=True,
        text=True,
        env=tree.env(),
        cwd=tree.root,
        timeout=120,
    )
    rows: list[tuple[str, float]] = []
    total = 0.0
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2][1:]  # after the separator's space, two spaces per level of nesting
        depth = (len(name) - len(name.lstrip(" "))) // 2
        ms = int(parts[1]) / 1000
        if depth == 0:
            total += ms
        if depth <= 1:
            rows.append((("  " * depth) + name.strip(), ms))
    rows.sort(key=lambda r: -r[1])
    return [("all imports", total), *rows[:top]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", default="836e41a", help="the revision to compare with")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--audit-repeats", type=int, default=1)
    parser.add_argument("--cli-repeats", type=int, default=20)
    parser.add_argument("--appends", type=int, default=300, help="appends per repeat")
    parser.add_argument("--skip", default="", help="comma-separated: start,export,verify,...")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    n = args.entries
    OUT.mkdir(parents=True, exist_ok=True)
    before, after = tree_at(args.before), this_tree()
    trees = (before, after)
    sides = {t.name: Side() for t in trees}
    notes: dict[str, Any] = {}
    signer = lb.bench_signer()
    export = lb.ensure_export(n, signer)
    lines = export.lines
    meta = Path(str(lines) + ".meta")
    meta.write_text(json.dumps({"n": n, "note": export.notes[n]}))
    facts = lb.machine_facts(OUT)

    if "start" not in skip:
        dirs = {}
        for tree in trees:
            dirs[tree.name] = ledger_dir(tree, n)
        # This tree's store migrates the earlier one's ledger once: timed apart.
        migrated = OUT / f"ledger-{n}-migrated"
        if not (migrated / ".complete").exists():
            shutil.rmtree(migrated, ignore_errors=True)
            shutil.copytree(dirs["before"], migrated)
            (migrated / ".complete").unlink()
            log("after: migrating the earlier ledger (once)")
            notes["migrate_s"] = after.python(OPEN, str(migrated))
            (migrated / ".complete").write_text(json.dumps(notes["migrate_s"]))
        else:
            notes["migrate_s"] = json.loads((migrated / ".complete").read_text())
        seal = dirs["after"] / "ledger.duckdb.seal"
        if not seal.exists():
            log("after: opening and closing the ledger once, which seals its columns")
            after.python(OPEN, str(dirs["after"]))
        for rep in range(args.repeats):
            for tree in trees:
                dt = start_daemon(tree, dirs[tree.name])
                sides[tree.name].start.values.append(dt)
                log(f"start {rep + 1}/{args.repeats} {tree.name}: {dt:.1f} s")
            seal.unlink()  # as a crash leaves it; this start's clean stop seals again
            dt = start_daemon(after, dirs["after"], cpu_key="after, no seal")
            sides["after"].start_unsealed.values.append(dt)
            log(f"start {rep + 1}/{args.repeats} after, no seal: {dt:.1f} s")
        notes["parts"] = after.python(PARTS, str(dirs["after"]), "sealed")
        notes["parts_unsealed"] = after.python(PARTS, str(dirs["after"]), "unsealed")

    if "export" not in skip:
        snapshot = lines.with_name(lines.name + ".parquet")
        if not snapshot.exists():
            log("writing the export's Parquet snapshot, as `jb-client export` does")
            after.python(
                "import json, sys, time; from pathlib import Path; "
                "from jouled.ledger.snapshot import write_parquet; s = time.perf_counter(); "
                "write_parquet(Path(sys.argv[1]), Path(sys.argv[2])); "
                "print(json.dumps(time.perf_counter() - s))",
                str(lines),
                str(snapshot),
            )
        outputs: dict[str, str] = {}
        bare = OUT / "export-no-snapshot"
        bare.mkdir(exist_ok=True)
        alone = bare / lines.name
        if not alone.exists():
            alone.symlink_to(lines)
        for rep in range(args.repeats):
            for tree in trees:
                dt, out = frontier_cli(tree, lines)
                sides[tree.name].frontier.values.append(dt)
                outputs[tree.name] = out
                log(f"frontier {rep + 1}/{args.repeats} {tree.name}: {dt:.2f} s")
            dt, out = frontier_cli(after, alone)
            sides["after"].frontier_payloads.values.append(dt)
            outputs["after-payloads"] = out
            log(f"frontier {rep + 1}/{args.repeats} after, from the payloads: {dt:.2f} s")
        notes["frontier_identical"] = len(set(outputs.values())) == 1
        notes["frontier_rows"] = len(json.loads(outputs["after"])["rows"])

    if "verify" not in skip:
        lb.warm_page_cache(lines)
        for rep in range(args.repeats):
            for tree in trees:
                dt = tree.python(VERIFY, str(lines), "0")
                sides[tree.name].merkle.values.append(dt)
                log(f"merkle {rep + 1}/{args.repeats} {tree.name}: {dt:.1f} s")

    if "audit" not in skip:
        for rep in range(args.audit_repeats):
            for tree in trees:
                dt = tree.python(VERIFY, str(lines), "1")
                sides[tree.name].audit.values.append(dt)
                log(f"audit {rep + 1}/{args.audit_repeats} {tree.name}: {dt:.1f} s")

    if "appends" not in skip:
        tmp = Path(tempfile.mkdtemp(prefix="scale-appends-"))
        try:
            for rep in range(args.repeats):
                for tree in trees:
                    rate = tree.python(APPENDS, str(args.appends), str(tmp))
                    sides[tree.name].appends.values.append(rate)
                    log(f"appends {rep + 1}/{args.repeats} {tree.name}: {rate:.0f}/s")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        notes["fs"] = lb.filesystem_of(Path(tempfile.gettempdir()))
        places = [tempfile.gettempdir()] + (["/dev/shm"] if Path("/dev/shm").is_dir() else [])
        notes["floor"] = after.python(FLOOR, *places)

    if "cli" not in skip:
        data = Path(tempfile.mkdtemp(prefix="scale-cli-"))
        argv = [
            sys.executable, "-m", "jouled", "serve", "--data-dir", str(data / "d"),
            "--tasks", str(REPO / "tasks"), "--energy", "estimator", "--calibrate-seconds", "0",
        ]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            sys.path.insert(0, str(REPO))
            from jb_client.api import Client

            target = f"unix:{data / 'd' / 'jouled.sock'}"
            with Client(target) as client:
                client.wait_ready(120, alive=lambda: proc.poll() is None)
            answers = {}
            for tree in trees:
                tasks_json(tree, target)  # bytecode compiled, files in the page cache
            for _ in range(args.cli_repeats):
                for tree in trees:
                    dt, out = tasks_json(tree, target)
                    sides[tree.name].tasks.values.append(dt)
                    answers[tree.name] = out
            notes["tasks_identical"] = answers["before"] == answers["after"]
            empty = Runs()
            for _ in range(args.cli_repeats):
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", "pass"], check=True)
                empty.values.append(time.perf_counter() - start)
            notes["python_bare"] = empty.median
            for tree in trees:
                sides[tree.name].imports = import_profile(tree, target)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            shutil.rmtree(data, ignore_errors=True)

    text = render(n, args, facts, sides, notes, before)
    (OUT / "scale.md").write_text(text, encoding="utf-8")
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
