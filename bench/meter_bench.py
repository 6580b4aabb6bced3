"""Meter benchmark: per-window overhead, the sampler's CPU cost, accuracy on synthetic traces.

What is measured, side by side in one run:

1. Per-window overhead (`time.perf_counter_ns`). A window is two
   `snapshot()` calls and one `phase_energy()`; each is timed separately for
   `RaplMeter` over a fake powercap tree (1 package; 2 packages + DRAM), for
   `EstimatorMeter` (wall and cpu modes), beside one raw read of an
   `energy_uj` file done three ways (the meter's own reader, `Path.read_text`,
   and `os.pread` on a kept-open descriptor), so the
   meter's cost is also shown as a multiple of the file read it cannot avoid
   and of the cheaper reads it could use. The RAPL meters' sampler threads run
   at their default interval meanwhile, as in the daemon.
2. The sampler's CPU cost: a `RaplMeter` left alone for a few seconds at its
   default interval and at 10 ms, with the process's CPU time
   (`time.process_time`, every thread) over wall time, as % of one core. The
   main thread only sleeps, so the sampler is what runs.
3. Accuracy against synthetic power traces (constant, a square wave, a load
   whose level changes every 1 ms) replayed in real time through a fake tree
   whose `max_energy_range_uj` is small enough to wrap several times per
   second. The replay thread publishes the exact integral of the trace,
   sleeping 0.5 ms between writes. Each snapshot is taken while holding the replay's lock, so the
   counter cannot move during it and the replay's own unwrapped total at that
   instant is the ground truth: the "meter error" column measures only the
   meter (wraps, sampler, arithmetic). The "vs trace" column compares against
   the ideal integral of the trace between the snapshots' timestamps instead,
   so it also contains the replay's publishing lag (the fake, not the meter).

4. Fault cells: the cases where a meter can sign a wrong figure or none at
   all, each measured the same way on this tree and on an older one
   (`--compare DIR`, DIR holding the older `jouled/`, e.g. from `git archive
   REV jouled | tar -x -C DIR`: both run in one invocation, side by side): a
   50 J counter at 30 W, a counter unreadable for a whole window, a 10 J drop
   and resets to zero (1 kJ, 300 J and 100 J below the top) that are not
   wraps, a wrap 20 ms before a window's close, read timing with a busy Python
   thread in the meter's process (counters produced at the moment of the read
   by another process), shipping parts under turbo (a desktop PBP 125 W / PL2
   253 W part at 253 W, a 28 W laptop part at 60 W), a frozen counter in a busy
   phase, a 10 J step back with and without the sampler thread, two sockets
   whose counters advance identically, and a counter that shows energy in 5 ms
   steps (windows against their stated edges).

Only the hardware boundary is fake (`tests/meter/fakes.FakePowercap`: plain
files, by default on /dev/shm, not sysfs; it replaces `energy_uj` atomically
with `os.replace`). A real `energy_uj` read also goes through the kernel's RAPL
driver and an MSR read, so raw-read figures here are a lower bound and the
meter's own share of a window is what transfers to real hardware.

Nothing here asserts: it is a measurement, not a test. Medians are over
`--repeats` repeats (each repeat's figure is itself a median over its
iterations) unless a table says otherwise.

Run: .venv/bin/python bench/meter_bench.py [--quick] [--tmp DIR] [--cells-only [--json]]
     .venv/bin/python bench/meter_bench.py --compare DIR
The Markdown goes to stdout and bench/out/meter.md; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _meter_accuracy import bench_accuracy
from _meter_cells import bench_cells, render_cells
from _meter_cost import bench_overhead, bench_sampler
from _meter_report import machine_facts, render
from _meter_setup import REPO

OUT = REPO / "bench" / "out"


# `--compare` runs this script once per tree (`--cells-only --json`), so it stays here.
def compare_cells(old_tree: Path, tmp: str | None) -> str:
    """The fault cells run against `old_tree`'s jouled and this tree's, each in
    its own process, one after the other, side by side."""
    import json
    import subprocess

    def run(tree: Path) -> list[dict[str, str]]:
        env = {**os.environ, "METER_BENCH_TREE": str(tree)}
        argv = [sys.executable, __file__, "--cells-only", "--json"]
        argv += ["--tmp", tmp] if tmp else []
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        return list(json.loads(done.stdout))

    before, after = run(old_tree), run(REPO)
    out = ["### Fault cells", "", "| cell | before | after |", "|---|---|---|"]
    for b, a in zip(before, after, strict=True):
        cells = (a["name"], b["result"], a["result"])
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join([*out, ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations, shorter runs")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--sampler-seconds", type=float, default=5.0)
    parser.add_argument("--accuracy-seconds", type=float, default=6.0)
    parser.add_argument(
        "--tmp",
        default="/dev/shm" if os.access("/dev/shm", os.W_OK) else None,
        help="where the fake trees live (default: /dev/shm, in memory like sysfs)",
    )
    parser.add_argument("--cells-only", action="store_true", help="only the fault cells")
    parser.add_argument("--json", action="store_true", help="the fault cells as JSON")
    parser.add_argument(
        "--compare",
        metavar="TREE",
        help="only the fault cells, before (TREE: a directory holding an older jouled/) "
        "and after (this tree), side by side",
    )
    args = parser.parse_args()
    if args.compare:
        print(compare_cells(Path(args.compare).resolve(), args.tmp))
        return
    if args.cells_only:
        with tempfile.TemporaryDirectory(prefix="meter-cells-", dir=args.tmp) as tmp_name:
            cells = bench_cells(Path(tmp_name))
        if args.json:
            import json

            print(json.dumps([{"name": c.name, "result": c.result} for c in cells]))
        else:
            print(render_cells(cells))
        return
    if args.quick:
        args.repeats, args.iterations = 3, 300
        args.sampler_seconds, args.accuracy_seconds = 1.0, 2.5

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="meter-bench-", dir=args.tmp) as tmp_name:
        tmp = Path(tmp_name)
        facts = machine_facts(tmp)
        overhead, raw = bench_overhead(tmp, args.iterations, args.repeats)
        sampler = bench_sampler(tmp, args.sampler_seconds)
        accuracy = bench_accuracy(tmp, args.accuracy_seconds)
        cells = bench_cells(tmp)
    report = render(facts, overhead, raw, sampler, accuracy, args) + "\n" + render_cells(cells)
    print(report)
    (OUT / "meter.md").write_text(report + "\n")


if __name__ == "__main__":
    main()
