"""The meter's accuracy against synthetic power traces replayed in real time (3)."""

from __future__ import annotations

import logging
import math
import random
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _meter_setup import log

from jouled.meter.base import Meter, Snapshot
from jouled.meter.rapl import RaplMeter
from jouled.meter.window import phase_energy
from tests.meter.fakes import FakePowercap

# Accuracy runs: a ceiling low enough that a small range still gives the sampler
# a 15 ms poll (range / ceiling / 4), with traces peaking at half the ceiling.
ACC_CEILING_W = 1000.0
ACC_RANGE_UJ = 60_000_000  # 60 J: wraps ~4 times a second at the traces' 250 W mean
REPLAY_PERIOD_S = 0.0005
SNAPSHOT_STRIDE_S = 0.05
WINDOWS_S = (0.05, 0.5, 2.0)


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
