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
import gc
import logging
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The fake powercap tree lives with the meter tests; the bench reuses it.
sys.path.insert(0, str(REPO))
# `--compare` runs the fault cells against another tree's `jouled` (a directory
# holding it, without tests/): the fakes still come from this one.
if os.environ.get("METER_BENCH_TREE"):
    sys.path.insert(0, os.environ["METER_BENCH_TREE"])

from jouled.meter.base import Calibration, DomainIdle, Meter, Snapshot  # noqa: E402
from jouled.meter.estimator import EstimatorMeter  # noqa: E402
from jouled.meter.rapl import RaplMeter, read_text  # noqa: E402
from jouled.meter.window import phase_energy  # noqa: E402
from tests.meter.fakes import FakeClock, FakePowercap, LiveCounters  # noqa: E402

OUT = REPO / "bench" / "out"

AIM_WINDOW_US = 100.0
AIM_SAMPLER_PCT = 1.0
AIM_ERROR_PCT = 1.0

TOP_UJ = 262_143_328_850  # the common package range: 2^32 units of 61 uJ

# Accuracy runs: a ceiling low enough that a small range still gives the sampler
# a 15 ms poll (range / ceiling / 4), with traces peaking at half the ceiling.
ACC_CEILING_W = 1000.0
ACC_RANGE_UJ = 60_000_000  # 60 J: wraps ~4 times a second at the traces' 250 W mean
REPLAY_PERIOD_S = 0.0005
SNAPSHOT_STRIDE_S = 0.05
WINDOWS_S = (0.05, 0.5, 2.0)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- fake trees ---------------------------------------------------------------------------


def one_package(root: Path) -> FakePowercap:
    fake = FakePowercap(root)
    fake.package(0, energy_uj=123_456_789)
    return fake


def two_packages_dram(root: Path) -> FakePowercap:
    fake = FakePowercap(root)
    for n in (0, 1):
        # The counters stand still: the mirror probe sees zero deltas and keeps every zone.
        fake.package(n, energy_uj=100_000_000 * (n + 1))
        fake.subzone(f"intel-rapl:{n}", 0, "dram", energy_uj=7_000_000 * (n + 1))
    return fake


# -- 1. per-window overhead ---------------------------------------------------------------


@dataclass
class Overhead:
    name: str
    domains: int
    snapshot_us: float
    phase_us: float
    window_us: float  # 2 snapshots + phase_energy, timed as one


def _median_us(samples: Sequence[int]) -> float:
    return statistics.median(samples) / 1000


def time_windows(meter: Meter, iterations: int, repeats: int) -> Overhead:
    cal = Calibration(
        source=meter.source,
        seconds=10,
        domains={d.name: DomainIdle(10_000, 200) for d in meter.domains()},
        seq=1,
    )
    domains = meter.domains()
    source = meter.source
    snap_r, phase_r, window_r = [], [], []
    clock = time.perf_counter_ns
    for _ in range(repeats):
        snap_ns, phase_ns, window_ns = [], [], []
        gc.collect()
        for _ in range(iterations):
            t0 = clock()
            a = meter.snapshot()
            t1 = clock()
            b = meter.snapshot()
            t2 = clock()
            phase_energy(source, domains, a, b, cal)
            t3 = clock()
            snap_ns.append(t1 - t0)
            snap_ns.append(t2 - t1)
            phase_ns.append(t3 - t2)
            window_ns.append(t3 - t0)
        snap_r.append(_median_us(snap_ns))
        phase_r.append(_median_us(phase_ns))
        window_r.append(_median_us(window_ns))
    return Overhead(
        name="",
        domains=len(domains),
        snapshot_us=statistics.median(snap_r),
        phase_us=statistics.median(phase_r),
        window_us=statistics.median(window_r),
    )


def _median_of_repeats(op: Callable[[], object], iterations: int, repeats: int) -> float:
    per_repeat = []
    clock = time.perf_counter_ns
    for _ in range(repeats):
        samples = []
        gc.collect()
        for _ in range(iterations):
            t0 = clock()
            op()
            samples.append(clock() - t0)
        per_repeat.append(_median_us(samples))
    return statistics.median(per_repeat)


def time_raw_reads(path: Path, iterations: int, repeats: int) -> list[tuple[str, float]]:
    """One `energy_uj` read three ways: the meter's reader, and two others for scale."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return [
            (
                "raw read: `rapl.read_text` + int (the meter's reader: open, read, close)",
                _median_of_repeats(lambda: int(read_text(path).strip()), iterations, repeats),
            ),
            (
                "raw read: `Path.read_text` + int",
                _median_of_repeats(lambda: int(path.read_text().strip()), iterations, repeats),
            ),
            (
                "raw read: `os.pread` at 0 on a kept-open fd + int",
                _median_of_repeats(lambda: int(os.pread(fd, 64, 0)), iterations, repeats),
            ),
        ]
    finally:
        os.close(fd)


def bench_overhead(
    tmp: Path, iterations: int, repeats: int
) -> tuple[list[Overhead], list[tuple[str, float]]]:
    log(f"overhead: {repeats} x {iterations} windows per meter")
    rows: list[Overhead] = []
    fake1 = one_package(tmp / "ovh-1pkg")
    with RaplMeter(fake1.root) as m:
        row = time_windows(m, iterations, repeats)
        row.name = f"RaplMeter, 1 package (sampler every {m.interval_s:g} s)"
        rows.append(row)
    fake2 = two_packages_dram(tmp / "ovh-2pkg")
    with RaplMeter(fake2.root, dram=True) as m:
        row = time_windows(m, iterations, repeats)
        row.name = f"RaplMeter, 2 packages + dram (sampler every {m.interval_s:g} s)"
        rows.append(row)
    for mode in ("wall", "cpu"):
        with EstimatorMeter(mode=mode) as em:
            row = time_windows(em, iterations, repeats)
            row.name = f"EstimatorMeter, {mode} mode"
            rows.append(row)
    raw = time_raw_reads(fake1.energy_path("intel-rapl:0"), iterations * 2, repeats)
    return rows, raw


# -- 2. sampler CPU -----------------------------------------------------------------------


@dataclass
class SamplerCost:
    name: str
    interval_s: float
    wall_s: float
    cpu_s: float
    reads: int

    @property
    def pct_core(self) -> float:
        return 100 * self.cpu_s / self.wall_s


class CountingReader:
    """The meter's own file reader, counting reads so polls actually made can be shown."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self, path: Path) -> str:
        self.reads += 1
        return read_text(path)


def measure_cpu(seconds: float) -> tuple[float, float]:
    gc.collect()
    c0, w0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    return time.perf_counter() - w0, time.process_time() - c0


def bare_thread(interval_s: float, seconds: float) -> SamplerCost:
    """A thread that wakes like the sampler's and does nothing: the floor any poller pays."""
    stop = threading.Event()
    wakes = 0

    def run() -> None:
        nonlocal wakes
        while not stop.wait(interval_s):
            wakes += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wall, cpu = measure_cpu(seconds)
        count = wakes
    finally:
        stop.set()
        thread.join()
    name = f"bare thread waking every {interval_s * 1000:g} ms (no reads)"
    return SamplerCost(name, interval_s, wall, cpu, count)


def bench_sampler(tmp: Path, seconds: float) -> list[SamplerCost]:
    rows: list[SamplerCost] = []
    log(f"sampler: {seconds:g} s per configuration")
    wall, cpu = measure_cpu(min(2.0, seconds))
    rows.append(SamplerCost("no meter (the process idling)", math.inf, wall, cpu, 0))
    rows.append(bare_thread(0.01, seconds))
    configs: list[tuple[str, Callable[[Path], FakePowercap], bool, float | None]] = [
        ("1 package, default interval", one_package, False, None),
        ("1 package, 10 ms", one_package, False, 0.01),
        ("2 packages + dram, 10 ms", two_packages_dram, True, 0.01),
    ]
    for i, (name, build, dram, interval) in enumerate(configs):
        fake = build(tmp / f"cpu-{i}")
        reader = CountingReader()
        with RaplMeter(fake.root, dram=dram, reader=reader, interval_s=interval) as m:
            before = reader.reads
            wall, cpu = measure_cpu(seconds)
            reads = reader.reads - before
            rows.append(SamplerCost(name, m.interval_s, wall, cpu, reads // len(m.domains())))
    return rows


# -- 3. accuracy --------------------------------------------------------------------------


class Trace:
    """A periodic piecewise-constant power trace with an exact integral."""

    def __init__(self, name: str, about: str, levels_w: Sequence[float], step_s: float) -> None:
        self.name = name
        self.about = about
        self.levels_mw = [round(w * 1000) for w in levels_w]
        self.step_ns = round(step_s * 1e9)
        self.prefix_pj = [0]
        for mw in self.levels_mw:
            self.prefix_pj.append(self.prefix_pj[-1] + mw * self.step_ns)  # mW x ns = pJ
        self.period_ns = self.step_ns * len(self.levels_mw)

    @property
    def mean_w(self) -> float:
        return statistics.fmean(self.levels_mw) / 1000

    def energy_pj(self, t_ns: int) -> int:
        """Energy from 0 to `t_ns`, exactly."""
        full, rem = divmod(t_ns, self.period_ns)
        k, part = divmod(rem, self.step_ns)
        return full * self.prefix_pj[-1] + self.prefix_pj[k] + self.levels_mw[k] * part


def traces() -> list[Trace]:
    rng = random.Random(20261129)
    return [
        Trace("constant", "250 W", [250.0], 1.0),
        Trace("square wave", "50 W / 450 W, 10 Hz (50 ms halves)", [50.0, 450.0], 0.05),
        Trace(
            "1 ms steps",
            "a new level every 1 ms, uniform 0-500 W (seeded, 1 s period)",
            [rng.uniform(0.0, 500.0) for _ in range(1000)],
            0.001,
        ),
    ]


class Replay:
    """Fakes the hardware boundary only: publishes the trace's integral to `energy_uj`
    in real time, wrapping at the zone's range. `lock` is held while publishing, so a
    caller holding it sees the file agree with `published_uj` exactly."""

    def __init__(self, fake: FakePowercap, zone_id: str, trace: Trace, start_uj: int) -> None:
        self.fake = fake
        self.zone_id = zone_id
        self.trace = trace
        self.start_uj = start_uj
        self.lock = threading.Lock()
        self.published_uj = start_uj
        self.writes = 0
        self.max_gap_ns = 0  # longest time between two publishes: the fake's own stalls
        self.errors: list[BaseException] = []
        self._t0 = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replay", daemon=True)

    def ideal_uj(self, t_ns: int) -> float:
        """The trace's unwrapped counter at `t_ns`, not rounded to the published grid."""
        return self.start_uj + self.trace.energy_pj(t_ns - self._t0) / 1e6

    def start(self) -> None:
        self._t0 = time.monotonic_ns()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def wraps(self) -> int:
        return self.published_uj // (ACC_RANGE_UJ + 1) - self.start_uj // (ACC_RANGE_UJ + 1)

    def _run(self) -> None:
        last = self._t0
        try:
            while not self._stop.is_set():
                with self.lock:
                    now = time.monotonic_ns()
                    uj = self.start_uj + self.trace.energy_pj(now - self._t0) // 1_000_000
                    self.fake.set(self.zone_id, uj % (ACC_RANGE_UJ + 1))
                    self.published_uj = uj
                    self.writes += 1
                self.max_gap_ns = max(self.max_gap_ns, now - last)
                last = now
                time.sleep(REPLAY_PERIOD_S)
        except BaseException as err:  # reported with the results, not lost on a thread
            self.errors.append(err)


class FaultLog(logging.Handler):
    """Collects the sampler's fault warnings so the report can say why a window was invalid."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass
class Accuracy:
    trace: Trace
    window_s: float
    windows: int
    invalid: int
    meter_med_pct: float
    meter_max_pct: float
    trace_med_pct: float
    trace_max_pct: float
    spanning_wrap: int  # valid windows with at least one wrap inside


@dataclass
class TraceRun:
    trace: Trace
    seconds: float
    wraps_per_s: float
    faults: int
    replay_writes: int
    replay_max_gap_ms: float
    fault_messages: list[str]
    rows: list[Accuracy]


def _errors(
    meter: Meter, name: str, shots: list[tuple[Snapshot, int, float]], window_s: float
) -> tuple[list[float], list[float], int, int]:
    stride = round(window_s / SNAPSHOT_STRIDE_S)
    meter_err: list[float] = []
    trace_err: list[float] = []
    invalid = spanning = 0
    for (a, truth_a, ideal_a), (b, truth_b, ideal_b) in zip(shots, shots[stride:], strict=False):
        # The daemon's own verdict decides validity: a window holding a fault has no figure.
        if not phase_energy(meter.source, meter.domains(), a, b, None).valid:
            invalid += 1
            continue
        # Error in uJ rather than phase_energy's whole mJ, so rounding does not show as error.
        got = b.totals_uj[name] - a.totals_uj[name]
        spanning += truth_a // (ACC_RANGE_UJ + 1) != truth_b // (ACC_RANGE_UJ + 1)
        meter_err.append(100 * abs(got - (truth_b - truth_a)) / (truth_b - truth_a))
        trace_err.append(100 * abs(got - (ideal_b - ideal_a)) / (ideal_b - ideal_a))
    return meter_err, trace_err, invalid, spanning


def bench_accuracy(tmp: Path, seconds: float) -> list[TraceRun]:
    runs: list[TraceRun] = []
    faults_log = FaultLog()
    sampler_log = logging.getLogger("jouled.meter.sampler")
    sampler_log.addHandler(faults_log)
    sampler_log.propagate = False  # collected for the report instead of printed mid-run
    try:
        for i, trace in enumerate(traces()):
            log(f"accuracy: {trace.name}, {seconds:g} s of replay")
            faults_log.messages = []
            fake = FakePowercap(tmp / f"acc-{i}")
            # Start near the top so the first wrap comes within a fraction of a second.
            start_uj = ACC_RANGE_UJ - 20_000_000
            zone = fake.package(0, energy_uj=start_uj, max_uj=ACC_RANGE_UJ)
            replay = Replay(fake, zone, trace, start_uj)
            with RaplMeter(fake.root, ceiling_w=ACC_CEILING_W) as meter:
                replay.start()
                time.sleep(0.1)
                shots: list[tuple[Snapshot, int, float]] = []
                count = round(seconds / SNAPSHOT_STRIDE_S) + 1
                t_first = time.monotonic()
                for k in range(count):
                    delay = t_first + k * SNAPSHOT_STRIDE_S - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    with replay.lock:
                        snap = meter.snapshot()
                        truth = replay.published_uj
                    shots.append((snap, truth, replay.ideal_uj(snap.t_ns)))
                replay.stop()
            elapsed = (shots[-1][0].t_ns - shots[0][0].t_ns) / 1e9
            name = meter.domains()[0].name
            rows = []
            for window_s in WINDOWS_S:
                meter_err, trace_err, invalid, spanning = _errors(meter, name, shots, window_s)
                rows.append(
                    Accuracy(
                        trace=trace,
                        window_s=window_s,
                        windows=len(meter_err) + invalid,
                        invalid=invalid,
                        meter_med_pct=statistics.median(meter_err) if meter_err else math.nan,
                        meter_max_pct=max(meter_err, default=math.nan),
                        trace_med_pct=statistics.median(trace_err) if trace_err else math.nan,
                        trace_max_pct=max(trace_err, default=math.nan),
                        spanning_wrap=spanning,
                    )
                )
            messages = list(faults_log.messages)
            messages += [f"replay failed: {err!r}" for err in replay.errors]
            runs.append(
                TraceRun(
                    trace=trace,
                    seconds=elapsed,
                    # The replay ran 0.1 s before the first snapshot.
                    wraps_per_s=replay.wraps() / (elapsed + 0.1),
                    faults=shots[-1][0].faults - shots[0][0].faults,
                    replay_writes=replay.writes,
                    replay_max_gap_ms=replay.max_gap_ns / 1e6,
                    fault_messages=messages,
                    rows=rows,
                )
            )
    finally:
        sampler_log.removeHandler(faults_log)
        sampler_log.propagate = True
    return runs


# -- 4. fault cells -----------------------------------------------------------------------


@dataclass
class Cell:
    name: str
    result: str


class _Clock:
    """Fake time for the scripted cells: moves only when told to, counters with it."""

    def __init__(self) -> None:
        self.now_ns = 1_000_000_000

    def __call__(self) -> int:
        return self.now_ns


def _window_text(pe: Any, truth_mj: float | None) -> str:
    wire = pe.to_wire()
    if not pe.valid:
        why = pe.reasons[-1] if pe.reasons else "no reason given"  # the note says why
        why = why if len(why) <= 110 else why[:107] + "..."
        return f"null (gross {wire['gross_mj']}, domains {wire['domains']}): {why}"
    err = "" if truth_mj is None else f", error {100 * (pe.gross_mj - truth_mj) / truth_mj:+.1f} %"
    return f"valid, reliable={pe.reliable}, {pe.gross_mj} mJ{err}"


def cell_small_counter(tmp: Path) -> Cell:
    """50 J range at 30 W, no constraint files, the sampler thread in real time."""
    from tests.meter.fakes import LiveCounters

    fake = FakePowercap(tmp / "cell-small")
    fake.package(0, max_uj=50_000_000)
    t0 = time.monotonic_ns()
    name = "50 J counter at 30 W: 10 windows of 0.5 s"
    with LiveCounters(fake, {"intel-rapl:0": lambda t: 30 * (t - t0) // 1000}):
        try:
            meter = RaplMeter(fake.root)
        except Exception as err:
            return Cell(name, f"refused at open: {err}")
        with meter as m:
            errs, invalid = [], 0
            for _ in range(10):
                a = m.snapshot()
                time.sleep(0.5)
                b = m.snapshot()
                pe = phase_energy(m.source, m.domains(), a, b, None)
                if not pe.valid or pe.gross_mj is None:
                    invalid += 1
                    continue
                truth = 30 * (b.t_ns - a.t_ns) / 1e6
                errs.append(100 * abs(pe.gross_mj - truth) / truth)
    worst = f", worst error {max(errs):.2f} %" if errs else ""
    return Cell(name, f"{invalid} of 10 windows null{worst}")


def cell_unreadable(tmp: Path) -> Cell:
    fake = FakePowercap(tmp / "cell-unreadable")
    fake.package(0)
    fake.package(1, energy_uj=5_000_000)
    denied = [False]

    def reader(path: Path) -> str:
        if denied[0] and path.name == "energy_uj" and path.parent.name == "intel-rapl:0":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    clock = _Clock()
    with RaplMeter(fake.root, reader=reader, clock=clock, interval_s=3600.0) as m:
        denied[0] = True
        m.snapshot()
        a = m.snapshot()
        clock.now_ns += 1_000_000_000
        fake.add("intel-rapl:1", 20_000_000)
        b = m.snapshot()
    pe = phase_energy(m.source, m.domains(), a, b, None)
    return Cell("package-0 unreadable for the whole window", _window_text(pe, None))


def _scripted(
    tmp: Path, tag: str, max_uj: int, start_uj: int, poll_s: float, polls: int, glitch: Any
) -> Any:
    """30 W through `polls` reads `poll_s` apart; `glitch(fake)` runs before the middle one."""
    fake = FakePowercap(tmp / f"cell-{tag}")
    fake.package(0, energy_uj=start_uj, max_uj=max_uj)
    clock = _Clock()
    with RaplMeter(fake.root, clock=clock, interval_s=3600.0) as m:
        for _ in range(4):  # the counter's recent power is known
            clock.now_ns += round(poll_s * 1e9)
            fake.add("intel-rapl:0", round(30 * poll_s * 1e6))
            m.snapshot()
        a = m.snapshot()
        for k in range(polls):
            clock.now_ns += round(poll_s * 1e9)
            fake.add("intel-rapl:0", round(30 * poll_s * 1e6))
            if k == polls // 2:
                glitch(fake)
            m.snapshot()
        b = m.snapshot()
    return phase_energy(m.source, m.domains(), a, b, None), 30 * poll_s * polls * 1000


def cell_drop(tmp: Path) -> Cell:
    pe, truth = _scripted(
        tmp, "drop", 55_000_000, 20_000_000, 0.01, 50, lambda f: f.add("intel-rapl:0", -(10**7))
    )
    return Cell(
        "55 J counter at 30 W, 10 ms reads, a 10 J drop in a 0.5 s window", _window_text(pe, truth)
    )


def cell_reset(tmp: Path) -> Cell:
    top = 262_143_328_850
    pe, truth = _scripted(
        tmp, "reset", top, top - 1_000_000_000, 1.0, 5, lambda f: f.set("intel-rapl:0", 0)
    )
    return Cell(
        "262 kJ counter at 30 W, 1 s reads, reset to 0 from 1 kJ below the top, 5 s window",
        _window_text(pe, truth),
    )


_SERVE = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tests.meter.fakes import FakePowercap, LiveCounters
fake = FakePowercap(Path(sys.argv[2]))
fake.package(0, max_uj=10**15)
t0 = int(sys.argv[3])
with LiveCounters(fake, {"intel-rapl:0": lambda t: 200 * (t - t0) // 1000}):
    print("ready", flush=True)
    sys.stdin.read()
"""


def cell_busy_thread(tmp: Path, windows: int = 20) -> Cell:
    """200 W produced at each read by another process; a thread in the meter's process
    spins the whole time. Error of each 0.5 s window against 200 W x its wall time."""
    import subprocess

    t0 = time.monotonic_ns()
    root = tmp / "cell-busy"
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(REPO), str(root), str(t0)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    busy = threading.Thread(target=spin, daemon=True)
    errs: list[float] = []
    inside = 0  # windows whose error is within the edges they state (a tree that states them)
    try:
        with RaplMeter(root) as m:
            busy.start()
            for _ in range(windows):
                a = m.snapshot()
                time.sleep(0.5)
                b = m.snapshot()
                pe = phase_energy(m.source, m.domains(), a, b, None)
                if pe.valid:
                    # uJ over W x ns / 1000
                    got = b.totals_uj[m.domains()[0].name] - a.totals_uj[m.domains()[0].name]
                    truth = 200 * (b.t_ns - a.t_ns) / 1000
                    errs.append(100 * (got - truth) / truth)
                    inside += abs(got - truth) <= 200 * getattr(pe, "edge_us", -1)
    finally:
        stop.set()
        server.communicate("", timeout=10)
    abs_errs = [abs(e) for e in errs]
    return Cell(
        f"0.5 s windows at 200 W with a busy thread ({windows} windows)",
        f"|error| median {statistics.median(abs_errs):.2f} %, max {max(abs_errs):.2f} %; "
        f"{inside} of {len(errs)} within their stated edges"
        if errs
        else "no valid window",
    )


def _scripted_zone(
    tmp: Path,
    tag: str,
    watts: float,
    polls: int,
    glitch: Any = None,
    *,
    start_uj: int = 5_000_000_000,
    max_uj: int = TOP_UJ,
    poll_s: float = 1.0,
    **zone: Any,
) -> tuple[Any, float, Any]:
    """`watts` through `polls` reads `poll_s` apart in fake time, after four reads
    that show the counter's power; `glitch(fake)` runs before the middle read.
    Returns the window, its truth in mJ and the meter's description."""
    fake = FakePowercap(tmp / f"cell-{tag}")
    fake.package(0, energy_uj=start_uj, max_uj=max_uj, **zone)
    clock = _Clock()
    with RaplMeter(fake.root, clock=clock, interval_s=3600.0) as m:
        step = round(watts * poll_s * 1e6)
        for _ in range(4):
            clock.now_ns += round(poll_s * 1e9)
            fake.add("intel-rapl:0", step)
            m.snapshot()
        a = m.snapshot()
        for k in range(polls):
            clock.now_ns += round(poll_s * 1e9)
            fake.add("intel-rapl:0", step)
            if glitch is not None and k == polls // 2:
                glitch(fake)
            m.snapshot()
        b = m.snapshot()
        info = m.describe()
    return phase_energy(m.source, m.domains(), a, b, None), watts * poll_s * polls * 1000, info


def _ceiling_text(info: Any) -> str:
    zone = info["rapl"]["zones"][0]
    return f"ceiling {zone['ceiling_w']:g} W"


def cell_desktop_turbo(tmp: Path) -> Cell:
    pe, truth, info = _scripted_zone(
        tmp,
        "desktop",
        253.0,
        5,
        max_power_uw=(125_000_000, 0),
        power_limit_uw=(125_000_000, 253_000_000),
    )
    return Cell(
        "desktop part (PBP 125 W, PL2 253 W; max_power_uw 125 W / 0) at 253 W, 1 s reads, 5 s",
        f"{_window_text(pe, truth)}; {_ceiling_text(info)}",
    )


def cell_laptop_turbo(tmp: Path) -> Cell:
    pe, truth, info = _scripted_zone(tmp, "laptop", 60.0, 5, max_power_uw=(28_000_000, 0))
    return Cell(
        "28 W laptop part (max_power_uw 28 W / 0) at 60 W, 1 s reads, 5 s window",
        f"{_window_text(pe, truth)}; {_ceiling_text(info)}",
    )


def cell_frozen(tmp: Path) -> Cell:
    fake = FakePowercap(tmp / "cell-frozen")
    fake.package(0, energy_uj=7_000_000)
    clock = _Clock()
    with RaplMeter(fake.root, clock=clock, interval_s=3600.0) as m:
        a = m.snapshot()
        clock.now_ns += 5_000_000_000
        b = m.snapshot()
    try:
        pe = phase_energy(m.source, m.domains(), a, b, None, busy_ns=3_000_000_000)
    except TypeError:  # a tree that cannot be told the phase was busy
        pe = phase_energy(m.source, m.domains(), a, b, None)
    return Cell(
        "frozen counter, 5 s window while the phase used 3 s of CPU", _window_text(pe, None)
    )


def cell_step_back_scripted(tmp: Path) -> Cell:
    pe, truth, _ = _scripted_zone(
        tmp, "back", 30.0, 5, lambda f: f.add("intel-rapl:0", -10_000_000)
    )
    return Cell(
        "262 kJ counter at 30 W, reads 1 s apart (no sampler thread), a 10 J step back, 5 s",
        _window_text(pe, truth),
    )


def cell_step_back_live(tmp: Path) -> Cell:
    """The sampler thread in real time; the counter is produced at each read."""
    fake = FakePowercap(tmp / "cell-back-live")
    fake.package(0)
    t0 = time.monotonic_ns()
    back_at: list[int] = []

    def counter(t: int) -> int:
        back = 10_000_000 if back_at and t >= back_at[0] else 0
        return 5_000_000_000 + 30 * (t - t0) // 1000 - back

    with LiveCounters(fake, {"intel-rapl:0": counter}), RaplMeter(fake.root) as m:
        a = m.snapshot()
        time.sleep(0.5)
        back_at.append(time.monotonic_ns())
        time.sleep(1.5)
        b = m.snapshot()
    pe = phase_energy(m.source, m.domains(), a, b, None)
    truth = 30 * (b.t_ns - a.t_ns) / 1e6
    return Cell(
        "262 kJ counter at 30 W, the sampler thread in real time, a 10 J step back, 2 s window",
        _window_text(pe, truth),
    )


def cell_reset_near(tmp: Path, below_j: int) -> Cell:
    # The reset happens at the middle read, `below_j` below the top at the read before.
    start = TOP_UJ - below_j * 1_000_000 - 6 * 30_000_000
    pe, truth, _ = _scripted_zone(
        tmp, f"reset-{below_j}", 30.0, 5, lambda f: f.set("intel-rapl:0", 0), start_uj=start
    )
    return Cell(
        f"262 kJ counter at 30 W, 1 s reads, reset to 0 from {below_j} J below the top, 5 s",
        _window_text(pe, truth),
    )


def cell_wrap_before_close(tmp: Path) -> Cell:
    # 30 J a read: the counter crosses its top 20 ms before the window's last read.
    start = TOP_UJ + 1 - 9 * 30_000_000 + 600_000
    pe, truth, _ = _scripted_zone(tmp, "wrap-close", 30.0, 5, start_uj=start)
    return Cell(
        "262 kJ counter at 30 W, 1 s reads, a wrap 20 ms before the close", _window_text(pe, truth)
    )


def cell_identical_dram(tmp: Path) -> Cell:
    fake = FakePowercap(tmp / "cell-dram")
    for n in (0, 1):
        fake.package(n, energy_uj=1_000_000 * (n + 1))
        fake.subzone(f"intel-rapl:{n}", 0, "dram", energy_uj=3_000_000 * (n + 1))
    clock = FakeClock()
    watts = {
        "intel-rapl:0": 50.0,
        "intel-rapl:1": 50.0,
        "intel-rapl:0:0": 6.0,
        "intel-rapl:1:0": 6.0,
    }
    fake.drive(clock, watts)
    with RaplMeter(
        fake.root, dram=True, clock=clock, sleep=clock.sleep, interval_s=3600.0, mirror_probe_s=0.05
    ) as m:
        a = m.snapshot()
        clock.sleep(1.0)
        b = m.snapshot()
    pe = phase_energy(m.source, m.domains(), a, b, None)
    return Cell(
        "two sockets, packages 50 W and DRAM 6 W each, advancing identically, 1 s window",
        f"{_window_text(pe, sum(watts.values()) * 1000)}; domains {sorted(pe.domains)}",
    )


def cell_stepped_edges(tmp: Path) -> Cell:
    from jouled.meter.calibration import calibrate

    fake = FakePowercap(tmp / "cell-stepped")
    fake.package(0)
    clock = FakeClock()
    elapsed = [0]

    def advance(seconds: float) -> None:
        elapsed[0] += round(seconds * 1e9)
        fake.set("intel-rapl:0", elapsed[0] // 5_000_000 * 5_000_000 * 40 // 1000)

    clock.on_advance(advance)
    outside, edges, errs = 0, [], []
    with RaplMeter(fake.root, clock=clock, sleep=clock.sleep, interval_s=3600.0) as m:
        cal = calibrate(m, 1.0, interval_s=0.1, sleep=clock.sleep)
        for k in range(20):
            clock.sleep(0.0007 * (k + 1))
            a = m.snapshot()
            clock.sleep(0.0503)
            b = m.snapshot()
            pe = phase_energy(m.source, m.domains(), a, b, cal)
            if pe.gross_mj is None:  # a null window claims nothing to be outside of
                continue
            err_uj = abs(pe.gross_mj * 1000 - 40 * pe.wall_us)
            errs.append(err_uj / (40 * pe.wall_us) * 100)
            edges.append(pe.edge_us)
            outside += err_uj > 40 * pe.edge_us + 1000
    period = getattr(cal.domains["package-0"], "update_us", None)
    return Cell(
        "40 W shown in 5 ms steps: 20 windows of 50.3 ms after a 1 s calibration",
        f"{outside} of 20 outside power x (wall ± edge); |error| median "
        f"{statistics.median(errs):.2f} %, max {max(errs):.2f} %; edge_us median "
        f"{statistics.median(edges):.0f}; signed update_us {period}",
    )


def bench_cells(tmp: Path) -> list[Cell]:
    log("fault cells")
    cells = [
        cell_small_counter,
        cell_unreadable,
        cell_drop,
        cell_reset,
        cell_busy_thread,
        cell_desktop_turbo,
        cell_laptop_turbo,
        cell_frozen,
        cell_step_back_scripted,
        cell_step_back_live,
        lambda t: cell_reset_near(t, 100),
        lambda t: cell_reset_near(t, 300),
        cell_wrap_before_close,
        cell_identical_dram,
        cell_stepped_edges,
    ]
    out = []
    for cell in cells:
        try:
            out.append(cell(tmp))
        except Exception as err:  # a tree whose meter cannot run the cell says so
            name = getattr(cell, "__name__", "cell")
            out.append(Cell(name, f"error: {type(err).__name__}: {err}"))
    return out


def render_cells(cells: list[Cell]) -> str:
    out = ["### Fault cells", "", "| cell | this tree |", "|---|---|"]
    out += [f"| {c.name} | {c.result.replace('|', chr(92) + '|')} |" for c in cells]
    return "\n".join([*out, ""])


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


# -- report -------------------------------------------------------------------------------


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
