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
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from _overhead_fixtures import (
    REPO,
    TASK_DIR,
    TASK_ID,
    RunningDaemon,
    Scratch,
    Series,
    _bytecode_env,
    _check_receipt,
    _cli,
    _entry_body,
    _ms,
    _row,
    reference_patch,
    running_daemon,
    seeded_fixed_tree,
    timed,
)
from _overhead_pieces import (
    PROOF_REPEATS,
    CliStartup,
    Launch,
    Piece,
    cli_startup,
    launch_overhead,
    ledger_pieces,
    proof_scaling,
    rpc_round_trips,
    tree_pieces,
)
from _overhead_startup import render_startup, startup
from jb_client.api import Client

from jouled.contracts.task import load_task
from jouled.pipeline.pytest_run import plain_argv

OUT = REPO / "bench" / "out" / "overhead.md"
OVERHEAD_BUDGET_MS = 150.0


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


# -- report -------------------------------------------------------------------------------


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
