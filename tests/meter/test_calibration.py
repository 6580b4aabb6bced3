from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from jouled.errors import ConfigError, MeterError
from jouled.meter.base import Calibration, DomainIdle
from jouled.meter.calibration import calibrate
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.rapl import RaplMeter, read_text

from .fakes import FakeClock, FakePowercap

IDLE = 3600.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(tmp_path: Path) -> FakePowercap:
    fake = FakePowercap(tmp_path / "powercap")
    fake.package(0)
    fake.package(1)
    return fake


def open_rapl(fake: FakePowercap, clock: FakeClock, **kw: Any) -> RaplMeter:
    return RaplMeter(fake.root, clock=clock, sleep=clock.sleep, interval_s=IDLE, **kw)


def test_constant_power_gives_its_mean_and_no_spread(fake: FakePowercap, clock: FakeClock) -> None:
    fake.drive(clock, {"intel-rapl:0": 12.5, "intel-rapl:1": 7.25})
    with open_rapl(fake, clock) as m:
        cal = calibrate(m, 5.0, interval_s=0.1, sleep=clock.sleep)
    assert cal.source == "rapl"
    assert cal.seconds == 5
    assert {n: (d.idle_mw, d.stddev_mw) for n, d in cal.domains.items()} == {
        "package-0": (12_500, 0),
        "package-1": (7_250, 0),
    }
    assert cal.time.endswith("Z")


def test_varying_power_gives_its_standard_deviation(fake: FakePowercap, clock: FakeClock) -> None:
    # 10 W and 20 W in turn, one sub-interval each.
    flip = [0]

    def advance(seconds: float) -> None:
        watts = 10.0 if flip[0] % 2 == 0 else 20.0
        flip[0] += 1
        for zone in ("intel-rapl:0", "intel-rapl:1"):
            fake.add(zone, round(watts * seconds * 1e6))

    with open_rapl(fake, clock) as m:
        clock.on_advance(advance)  # after the mirror probe: the packages are distinct
        cal = calibrate(m, 1.0, interval_s=0.1, sleep=clock.sleep)
    d = cal.domains["package-0"]
    assert d.idle_mw == 15_000
    # sample standard deviation of ten values, five at each of +-5 W
    assert d.stddev_mw == round(5_000 * math.sqrt(10 / 9))


def test_estimator_has_no_idle_and_does_not_sample() -> None:
    slept: list[float] = []
    m = EstimatorMeter(active_watts=30.0)
    cal = calibrate(m, 10.0, sleep=slept.append)
    assert slept == []
    assert cal.source == "estimator"
    assert cal.seconds == 0
    assert {n: (d.idle_mw, d.stddev_mw) for n, d in cal.domains.items()} == {"estimated": (0, 0)}


def test_sub_intervals_with_a_failed_read_are_left_out(tmp_path: Path, clock: FakeClock) -> None:
    fake = FakePowercap(tmp_path / "one")
    fake.package(0)
    fake.drive(clock, {"intel-rapl:0": 8.0})
    reads = [0]

    def reader(path: Path) -> str:
        if path.name == "energy_uj":
            reads[0] += 1
            if reads[0] == 5:
                raise OSError(5, "Input/output error")
        return read_text(path)

    with open_rapl(fake, clock, reader=reader) as m:
        cal = calibrate(m, 1.0, interval_s=0.1, sleep=clock.sleep)
    # Counting the sub-intervals around the failure would have pulled the mean down.
    got = cal.domains["package-0"]
    assert (got.idle_mw, got.stddev_mw) == (8_000, 0)
    # The fake counter shows new energy at every read, 0.2 ms apart: each step
    # happened within the 0.2 ms before it was seen, so steps are at most 0.4 ms apart.
    assert got.update_us == 400


def test_calibration_that_never_reads_fails(tmp_path: Path, clock: FakeClock) -> None:
    fake = FakePowercap(tmp_path / "one")
    fake.package(0)
    broken = [False]

    def reader(path: Path) -> str:
        if broken[0] and path.name == "energy_uj":
            raise OSError(5, "Input/output error")
        return read_text(path)

    with open_rapl(fake, clock, reader=reader) as m:
        broken[0] = True
        with pytest.raises(MeterError, match="calibration failed"):
            calibrate(m, 0.5, interval_s=0.1, sleep=clock.sleep)


def test_bad_durations_are_config_errors() -> None:
    m = EstimatorMeter()
    with pytest.raises(ConfigError):
        calibrate(m, 0)
    with pytest.raises(ConfigError):
        calibrate(m, 1, interval_s=0)


def test_calibration_round_trips_as_a_ledger_body(fake: FakePowercap, clock: FakeClock) -> None:
    fake.drive(clock, {"intel-rapl:0": 5.0, "intel-rapl:1": 6.0})
    with open_rapl(fake, clock) as m:
        cal = calibrate(m, 1.0, sleep=clock.sleep)
    again = Calibration.from_body(cal.body())
    assert again.domains == cal.domains and again.source == cal.source


def test_read_time_at_the_edges_of_each_stretch_bounds_the_idle_power(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Every clock read takes 1 ms and the counter moves with it, so each counter
    read sits 0.5 ms before its snapshot's stamp. Inside a stretch of good
    sub-intervals that cancels; each stretch's two ends may not, and a failed
    read in the middle makes two stretches."""
    fake = FakePowercap(tmp_path / "one")
    fake.package(0)
    fake.drive(clock, {"intel-rapl:0": 12.0})
    fail_at: list[int] = []
    reads = [0]

    def reader(path: Path) -> str:
        if path.name == "energy_uj":
            reads[0] += 1
            if reads[0] in fail_at:
                raise OSError(5, "Input/output error")
        return read_text(path)

    def slow_clock() -> int:
        clock.sleep(0.001)
        return clock()

    def measure() -> DomainIdle:
        with RaplMeter(
            fake.root, clock=slow_clock, sleep=clock.sleep, interval_s=IDLE, reader=reader
        ) as m:
            fail_at[:] = [reads[0] + 6]
            return calibrate(m, 1.0, interval_s=0.1, sleep=clock.sleep).domains["package-0"]

    with RaplMeter(
        fake.root, clock=slow_clock, sleep=clock.sleep, interval_s=IDLE, reader=reader
    ) as m:
        one = calibrate(m, 1.0, interval_s=0.1, sleep=clock.sleep).domains["package-0"]
    two = measure()
    # Each read sees a new value 2.2 ms after the last in the burst (two 1 ms clock
    # reads and the 0.2 ms gap), so steps are at most 4.4 ms apart: as close as
    # reads that slow can tell the update period.
    assert one.update_us == two.update_us == 4400
    # one stretch: 2 x 0.5 ms of edges and one 4.4 ms period over ~1 s at 12 W is ~65 mW
    assert one.idle_mw == 12_000 and 64 <= one.timing_mw <= 66
    # a failed read splits it in two and loses two sub-intervals (the failure and
    # the resume): four edges and two periods over ~0.8 s, ~161 mW
    assert abs(two.idle_mw - 12_000) <= two.timing_mw
    assert 158 <= two.timing_mw <= 164


def test_a_calibration_signed_before_timing_was_measured_still_loads() -> None:
    body = {
        "source": "rapl",
        "seconds": 10,
        "domains": {"package-0": {"idle_mw": 5, "stddev_mw": 1}},
    }
    assert Calibration.from_body(body).domains["package-0"] == DomainIdle(5, 1, 0)


def test_a_counter_that_shows_energy_in_steps_widens_every_windows_edge(
    tmp_path: Path, clock: FakeClock
) -> None:
    """40 W shown only at every 5 ms boundary (RAPL steps about every 1 ms):
    calibration measures the period from the counter's own steps and signs it,
    and every window's edge includes it, so the energy covers wall +- edge
    wherever in a step the window's ends fall."""
    from jouled.meter.window import phase_energy

    fake = FakePowercap(tmp_path / "stepped")
    fake.package(0)
    elapsed = [0]

    def advance(seconds: float) -> None:
        elapsed[0] += round(seconds * 1e9)
        steps = elapsed[0] // 5_000_000
        fake.set("intel-rapl:0", steps * 5_000_000 * 40 // 1000)  # W x ns = nJ

    clock.on_advance(advance)
    with open_rapl(fake, clock) as m:
        cal = calibrate(m, 1.0, interval_s=0.1, sleep=clock.sleep)
        d = cal.domains["package-0"]
        assert 5000 <= d.update_us <= 5200, d
        assert Calibration.from_body(cal.body()).domains["package-0"] == d
        assert abs(d.idle_mw - 40_000) <= d.timing_mw, d
        outside = 0
        for k in range(20):
            clock.sleep(0.0007 * (k + 1))  # each window starts at another phase of a step
            start = m.snapshot()
            clock.sleep(0.0503)
            end = m.snapshot()
            pe = phase_energy(m.source, m.domains(), start, end, cal)
            assert pe.valid and pe.gross_mj is not None and pe.edge_us >= d.update_us
            # W x us = uJ; 1 mJ of rounding
            outside += abs(pe.gross_mj * 1000 - 40 * pe.wall_us) > 40 * pe.edge_us + 1000
    assert outside == 0


def test_a_late_read_in_the_burst_does_not_stretch_the_period(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A counter stepping every 1 ms, read every 0.2 ms but for one read that comes
    20 ms late (this process descheduled): the period stays what the on-time reads
    show, not the 20 ms the late one spanned."""
    from jouled.meter.calibration import update_periods

    fake = FakePowercap(tmp_path / "stepped")
    fake.package(0)
    elapsed = [0]

    def advance(seconds: float) -> None:
        elapsed[0] += round(seconds * 1e9)
        fake.set("intel-rapl:0", elapsed[0] // 1_000_000 * 30_000)  # 30 W in 1 ms steps

    clock.on_advance(advance)
    calls = [0]

    def sleep(seconds: float) -> None:
        calls[0] += 1
        clock.sleep(0.02 if calls[0] == 30 else seconds)

    with open_rapl(fake, clock) as m:
        period = update_periods(m, ["package-0"], sleep=sleep)["package-0"]
    assert calls[0] > 30  # the late read happened inside the burst
    assert 1000 <= period <= 1400, period
