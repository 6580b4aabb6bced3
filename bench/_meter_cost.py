"""What the meter costs: the per-window overhead of a snapshot pair and
`phase_energy` (1), and the sampler thread's CPU (2)."""

from __future__ import annotations

import gc
import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from _meter_setup import log, one_package, two_packages_dram

from jouled.meter.base import Calibration, DomainIdle, Meter
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.rapl import RaplMeter, read_text
from jouled.meter.window import phase_energy
from tests.meter.fakes import FakePowercap

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
