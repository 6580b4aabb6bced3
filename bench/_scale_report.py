"""A scale run's results, side by side per tree, and their Markdown."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ledger_bench as lb
from _scale_trees import Tree

# -- timing ------------------------------------------------------------------------------


@dataclass
class Runs:
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def spread(self, unit: Callable[[float], str]) -> str:
        if len(self.values) == 1:
            return "1 run"
        return f"{unit(min(self.values))} – {unit(max(self.values))} over {len(self.values)}"


def seconds(s: float) -> str:
    return lb.seconds(s)


def millis(s: float) -> str:
    return f"{s * 1000:.0f} ms"


# Each start's CPU time (all threads), by tree, as start_daemon measures it.
CPU_S: dict[str, list[float]] = {}


@dataclass
class Side:
    start: Runs = field(default_factory=Runs)
    start_unsealed: Runs = field(default_factory=Runs)
    frontier: Runs = field(default_factory=Runs)
    frontier_payloads: Runs = field(default_factory=Runs)
    merkle: Runs = field(default_factory=Runs)
    audit: Runs = field(default_factory=Runs)
    appends: Runs = field(default_factory=Runs)
    tasks: Runs = field(default_factory=Runs)
    imports: list[tuple[str, float]] = field(default_factory=list)


def render(
    n: int, args: argparse.Namespace, facts: list[tuple[str, str]], sides: dict[str, Side],
    notes: dict[str, Any], before: Tree,
) -> str:  # fmt: skip
    b, a = sides["before"], sides["after"]
    out: list[str] = []
    w = out.append
    rev = (before.root / ".complete").read_text().strip()
    w(f"## Scale: {n:,} entries, {rev} (before) against this tree (after)\n")
    w(
        f"Medians over {args.repeats} repeats (the audit: {args.audit_repeats}; "
        f"`tasks --json`: {args.cli_repeats}), the trees taking turns; ranges are min – max. "
        "Ratios are before / after.\n"
    )
    w("| aim | before | after | ratio | after's range | aim met |")
    w("|---|---:|---:|---:|---|---|")

    def row(aim: str, rb: Runs, ra: Runs, unit: Callable[[float], str], limit: float,
            higher: bool = False) -> None:  # fmt: skip
        if not ra.values:
            return
        ratio = (ra.median / rb.median) if higher else (rb.median / ra.median)
        met = ra.median >= limit if higher else ra.median <= limit
        before_text = unit(rb.median) if rb.values else "-"
        w(
            f"| {aim} | {before_text} | {unit(ra.median)} | ×{ratio:.1f} | "
            f"{ra.spread(unit)} | {'met' if met else '**not met**'} |"
        )

    def rate(x: float) -> str:
        return f"{x:,.0f}/s"

    row("daemon start, N entries, after a clean stop (< 10 s)", b.start, a.start, seconds, 10)
    if CPU_S:
        row("  its CPU time, all threads (2 cores: wall ≥ CPU / 2)",
            Runs(CPU_S.get("before", [])), Runs(CPU_S.get("after", [])), seconds, 20)  # fmt: skip
    row("  the same after a crash (no seal: every column checked)", b.start, a.start_unsealed,
        seconds, 10)  # fmt: skip
    if CPU_S:
        row("  its CPU time, all threads", Runs(CPU_S.get("before", [])),
            Runs(CPU_S.get("after, no seal", [])), seconds, 20)  # fmt: skip
    row("`frontier --from-export`, N results (< 2 s)", b.frontier, a.frontier, seconds, 2)
    row("  the same without a Parquet snapshot (payloads)", b.frontier, a.frontier_payloads,
        seconds, 2)  # fmt: skip
    row("Merkle-only verification, all cores (< 5 s)", b.merkle, a.merkle, seconds, 5)
    row("full signature audit, all cores (< 60 s)", b.audit, a.audit, seconds, 60)
    row("one caller's durable appends (≥ 1,000/s)", b.appends, a.appends, rate, 1000, True)
    row("`jb-client tasks --json`, process start to exit (< 100 ms)", b.tasks, a.tasks,
        millis, 0.1)  # fmt: skip
    w("")
    if "frontier_identical" in notes:
        w(
            f"`frontier --from-export` printed the same {notes['frontier_rows']} rows in all "
            f"three runs: {'yes' if notes['frontier_identical'] else '**no**'}. "
            f"`tasks --json` printed the same bytes before and after: "
            f"{'yes' if notes.get('tasks_identical') else '**no**'}.\n"
        )
    if "parts" in notes:
        w(
            "Where this tree's start goes (in-process, one run each; the column check runs on "
            "DuckDB's threads while this thread rehashes, so the parts overlap):\n"
        )
        w("| part | after a clean stop | no seal |")
        w("|---|---:|---:|")
        sealed, unsealed = notes["parts"], notes.get("parts_unsealed", {})
        order = [
            "columns present and filled", "column check (DuckDB, beside the rehash)",
            "  the seal's digest", "  every column from its payload",
            "rehash payloads and build the tree", "open (all of the above)",
            "frontier rebuild (aggregate queries)", "close (flush, fill, seal the columns)",
        ]  # fmt: skip
        for name in dict.fromkeys([*order, *sealed, *unsealed]):
            if name in ("rows", "columns") or (name not in sealed and name not in unsealed):
                continue
            cells = [seconds(p[name]) if name in p else "-" for p in (sealed, unsealed)]
            w(f"| {name} | {cells[0]} | {cells[1]} |")
        w(
            f"\nHow the columns were vouched for: {sealed.get('columns')} (clean stop), "
            f"{unsealed.get('columns', '-')} (no seal)."
        )
        w(
            f"\nMigrating the earlier ledger (adding the frontier columns and filling them "
            f"from {n:,} payloads) took {seconds(notes['migrate_s'])}, once.\n"
        )
    if "floor" in notes:
        w(
            "What one durable append waits for (medians of 300): a DuckDB transaction per "
            "entry, as the earlier store made (BEGIN, the entry's INSERT, its checkpoint "
            "row's, COMMIT), against the `fdatasync` of this tree's tail:\n"
        )
        w("| operation | median |")
        w("|---|---:|")
        for name, value in notes["floor"].items():
            what, where = name.split(" ", 1)
            label = (
                "DuckDB transaction of one entry and its checkpoint row"
                if what == "duckdb"
                else "`fdatasync` of a 2 KiB append"
            )
            fs = lb.filesystem_of(Path(where))
            w(f"| {label}, {where} ({fs}) | {seconds(value)} |")
        w("")
    if a.imports:
        w(
            f"`tasks --json` imports (cumulative ms, `-X importtime`, one run; an empty "
            f"interpreter starts in {millis(notes['python_bare'])}):\n"
        )
        w("| before | ms | after | ms |")
        w("|---|---:|---|---:|")
        for i in range(max(len(b.imports), len(a.imports))):
            nb, vb = b.imports[i] if i < len(b.imports) else ("", 0.0)
            na, va = a.imports[i] if i < len(a.imports) else ("", 0.0)
            w(f"| {nb} | {vb:.0f} | {na} | {va:.0f} |")
        w("")
    w("Machine:\n")
    w("| | |")
    w("|---|---|")
    for key, value in facts:
        w(f"| {key} | {value} |")
    if "fs" in notes:
        w(f"| appends' file system | {notes['fs']} |")
    return "\n".join(out).rstrip() + "\n"
