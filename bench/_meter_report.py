"""The meter benchmark's Markdown: the machine, sections 1-3 and the aims."""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
from pathlib import Path

from _meter_accuracy import (
    ACC_CEILING_W,
    ACC_RANGE_UJ,
    REPLAY_PERIOD_S,
    SNAPSHOT_STRIDE_S,
    TraceRun,
)
from _meter_cost import Overhead, SamplerCost

AIM_WINDOW_US = 100.0
AIM_SAMPLER_PCT = 1.0
AIM_ERROR_PCT = 1.0


def machine_facts(tmp: Path) -> list[tuple[str, str]]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    fs = "?"
    try:
        best = ""
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and str(tmp).startswith(parts[1]) and len(parts[1]) > len(best):
                best, fs = parts[1], parts[2]
    except OSError:
        pass
    return [
        ("nproc", f"{os.cpu_count()} ({len(os.sched_getaffinity(0))} usable)"),
        ("CPU", model or platform.processor() or "?"),
        ("Python", f"{platform.python_version()} ({platform.python_implementation()})"),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("fake tree on", fs),
        ("switch interval", f"{sys.getswitchinterval() * 1000:g} ms (GIL)"),
    ]


def met(ok: bool) -> str:
    return "met" if ok else "**not met**"


def render(
    facts: list[tuple[str, str]],
    overhead: list[Overhead],
    raw: list[tuple[str, float]],
    sampler: list[SamplerCost],
    runs: list[TraceRun],
    args: argparse.Namespace,
) -> str:
    out: list[str] = ["## Meter", ""]
    out += ["| machine | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in facts]
    out += [""]

    meter_read_us = raw[0][1]
    out += [
        "### Per-window overhead",
        "",
        f"Median µs over {args.repeats} repeats of {args.iterations} windows each. A window "
        "is two `snapshot()` calls and one `phase_energy()` (with a calibration); `window` "
        "is timed as one span, `snap + phase` is the sum of one of each. The last column is "
        "`window` as a multiple of the meter's own raw read of one `energy_uj`.",
        "",
        "| meter | domains | snapshot | phase_energy | snap + phase | window | window / raw read |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, us in raw:
        out.append(f"| {name} | 1 | {us:.1f} | – | – | – | {us / meter_read_us:.2f} |")
    for r in overhead:
        out.append(
            f"| {r.name} | {r.domains} | {r.snapshot_us:.1f} | {r.phase_us:.1f} | "
            f"{r.snapshot_us + r.phase_us:.1f} | {r.window_us:.1f} | "
            f"{r.window_us / meter_read_us:.1f} |"
        )
    out += [""]

    out += [
        "### Sampler CPU",
        "",
        "Process CPU time (`time.process_time`, all threads) over wall time while "
        "the main thread sleeps; `polls` counts polls the sampler actually made. The bare "
        "thread is the same `Event.wait` loop without reads: the part of a poll's cost that "
        "is waking a Python thread on this machine, not the meter.",
        "",
        "| configuration | interval | wall s | CPU ms | % of one core | polls | CPU µs / poll |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in sampler:
        interval = "–" if math.isinf(c.interval_s) else f"{c.interval_s * 1000:g} ms"
        per_poll = "–" if c.reads == 0 else f"{1e6 * c.cpu_s / c.reads:.0f}"
        out.append(
            f"| {c.name} | {interval} | {c.wall_s:.2f} | {c.cpu_s * 1000:.1f} | "
            f"{c.pct_core:.3f} | {c.reads} | {per_poll} |"
        )
    out += [""]

    poll_ms = ACC_RANGE_UJ / (ACC_CEILING_W * 1e6) / 4 * 1000
    out += [
        "### Accuracy on replayed traces",
        "",
        f"One package zone, `max_energy_range_uj` {ACC_RANGE_UJ:,} µJ, meter ceiling "
        f"{ACC_CEILING_W:g} W (poll {poll_ms:g} ms, a fault if two reads are more than "
        f"{poll_ms * 4:g} ms apart). The replay publishes the trace's integral, "
        f"sleeping {REPLAY_PERIOD_S * 1000:g} ms between writes; snapshots every "
        f"{SNAPSHOT_STRIDE_S * 1000:g} ms "
        f"for {args.accuracy_seconds:g} s per trace; windows overlap (stride one snapshot). "
        "`meter error` compares with the counter the replay had published at each snapshot "
        "(ground truth for the meter); `vs trace` compares with the trace's exact integral "
        "between the snapshots' timestamps, so it also holds the replay's publishing lag. "
        "|error| in %, median and max over valid windows; `invalid` windows hold a sampler "
        "fault and have no figure (never zero).",
        "",
        "| trace | window | windows | spanning a wrap | invalid | meter error med "
        "| meter error max | vs trace med | vs trace max |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        for a in run.rows:
            out.append(
                f"| {a.trace.name} | {a.window_s * 1000:g} ms | {a.windows} | "
                f"{a.spanning_wrap} | {a.invalid} | "
                f"{a.meter_med_pct:.4f} | {a.meter_max_pct:.4f} | {a.trace_med_pct:.3f} | "
                f"{a.trace_max_pct:.3f} |"
            )
    out += [
        "",
        "| trace | power | mean W | wraps/s | sampler faults | replay writes "
        "| mean ms between writes | longest ms between writes |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        t = run.trace
        out.append(
            f"| {t.name} | {t.about} | {t.mean_w:.0f} | {run.wraps_per_s:.1f} | {run.faults} | "
            f"{run.replay_writes} | {1000 * (run.seconds + 0.1) / run.replay_writes:.2f} | "
            f"{run.replay_max_gap_ms:.1f} |"
        )
    faults = [(run.trace.name, m) for run in runs for m in run.fault_messages]
    if faults:
        out += ["", "Sampler faults (first warning of each episode):", ""]
        out += [f"- {name}: `{m}`" for name, m in faults]
    out += [""]

    worst_window = max(r.window_us for r in overhead)
    worst_sum = max(r.snapshot_us + r.phase_us for r in overhead)
    metered = [c for c in sampler if c.name.startswith(("1 package", "2 packages"))]
    worst_sampler = max(c.pct_core for c in metered)
    default_sampler = max(c.pct_core for c in metered if c.interval_s > 0.01)
    rows = [a for run in runs for a in run.rows]
    worst_error = max(a.meter_max_pct for a in rows)
    invalid = sum(a.invalid for a in rows)
    total = sum(a.windows for a in rows)
    out += [
        "### Aims",
        "",
        "| aim | measured | |",
        "|---|---|---|",
        f"| window under {AIM_WINDOW_US:g} µs | worst full window {worst_window:.1f} µs "
        f"(worst snap + phase {worst_sum:.1f} µs) | {met(worst_window < AIM_WINDOW_US)} |",
        f"| sampler under {AIM_SAMPLER_PCT:g} % of one core | worst {worst_sampler:.3f} % "
        f"(at the default interval {default_sampler:.3f} %) | "
        f"{met(worst_sampler < AIM_SAMPLER_PCT)} |",
        f"| energy error under {AIM_ERROR_PCT:g} % | worst meter error {worst_error:.4f} % "
        f"over valid windows; {invalid} of {total} windows invalid | "
        f"{met(worst_error < AIM_ERROR_PCT)} |",
        "",
    ]
    return "\n".join(out)
