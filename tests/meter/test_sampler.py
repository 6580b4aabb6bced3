from __future__ import annotations

import threading

import pytest

from jouled.errors import MeterError
from jouled.meter.base import Domain
from jouled.meter.sampler import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    Channel,
    CounterChannel,
    PowerChannel,
    Reading,
    Sampler,
    Step,
    poll_interval,
)
from jouled.meter.window import phase_energy

from .fakes import FakeClock

IDLE = 3600.0  # a polling thread that never wakes inside a test: snapshots drive reads


class Scripted:
    """A raw counter whose next reads a test scripts."""

    def __init__(self, value: int = 0) -> None:
        self.value: int | Exception = value

    def __call__(self) -> int:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


def at(ch: Channel, t_ns: int) -> Step:
    """One read of `ch` judged at `t_ns`, as the sampler does it."""
    reading: Reading
    try:
        reading = ch.read()
    except Exception as err:
        reading = err
    return ch.step(reading, t_ns)


def domain(name: str = "c") -> Domain:
    return Domain(name=name, source="rapl", kind="package", resolution_uj=1, min_window_ms=0)


def test_poll_interval_is_a_quarter_of_the_fastest_range_crossing() -> None:
    # 5 J at 100 W is crossed in 50 ms: read every 12.5 ms.
    assert poll_interval(5_000_000, 100.0) == pytest.approx(0.0125)
    # A real package counter (262 kJ at 5 kW) would allow 13 s: capped.
    assert poll_interval(262_143_328_850, 5000.0) == MAX_INTERVAL_S
    assert poll_interval(1000, 5000.0) == MIN_INTERVAL_S
    assert MIN_INTERVAL_S <= poll_interval(None, 5000.0) <= MAX_INTERVAL_S


def test_counter_single_wrap_counts_the_distance_through_the_top() -> None:
    raw = Scripted(800_000_000)
    ch = CounterChannel("c", raw, ceiling_w=100.0, modulus=10**9)
    assert at(ch, 0) == Step()
    raw.value = 900_000_000  # 40 W
    assert at(ch, 2_500_000_000) == Step(delta_uj=100_000_000)
    raw.value = 100_000_000  # 200 J in 5 s: 40 W, through the top of a 1 kJ counter
    assert at(ch, 7_500_000_000) == Step(delta_uj=200_000_000)


def steady(ch: CounterChannel, raw: Scripted, start: int, watts: float, reads: int) -> int:
    """`reads` reads 1 s apart at `watts` from `start`; returns the last read's time."""
    t = 0
    for k in range(reads):
        raw.value = start + round(watts * 1e6) * k
        t = k * 1_000_000_000
        assert at(ch, t).fault == ""
    return t


TOP = 262_143_328_850


@pytest.mark.parametrize("below_top_j", [100, 300, 1000])
def test_a_reset_far_below_the_top_is_never_a_wrap(below_top_j: int) -> None:
    """30 W read once a second, then the counter is found at 0: read as a wrap,
    that is 100 J (or more) in one second, over three times what it showed."""
    raw = Scripted()
    ch = CounterChannel("c", raw, ceiling_w=1000.0, modulus=TOP + 1)
    last = TOP - below_top_j * 1_000_000
    t = steady(ch, raw, last - 4 * 30_000_000, 30.0, 5)
    raw.value = 0
    step = at(ch, t + 1_000_000_000)
    assert step.delta_uj == 0 and "not a wrap" in step.fault, step


def test_a_wrap_at_the_counters_own_power_is_a_wrap() -> None:
    """The same reads, 20 J below the top at 30 W: the counter wraps 0.67 s later."""
    raw = Scripted()
    ch = CounterChannel("c", raw, ceiling_w=1000.0, modulus=TOP + 1)
    t = steady(ch, raw, TOP - 20_000_000 - 4 * 30_000_000, 30.0, 5)
    raw.value = 10_000_000 - 1  # 30 J later: 20 J to the top, 10 J past it
    assert at(ch, t + 1_000_000_000) == Step(delta_uj=30_000_000)


def test_a_step_back_is_never_a_wrap() -> None:
    """10 J back on a large counter: as a wrap that is the whole range in 1 s."""
    raw = Scripted()
    ch = CounterChannel("c", raw, ceiling_w=1000.0, modulus=TOP + 1)
    t = steady(ch, raw, 5_000_000_000, 30.0, 5)
    raw.value = 5_000_000_000 + 4 * 30_000_000 - 10_000_000
    step = at(ch, t + 1_000_000_000)
    assert step.delta_uj == 0 and "above its 1000 W ceiling" in step.fault, step


def test_a_backwards_step_right_after_open_is_not_guessed_a_wrap() -> None:
    raw = Scripted(TOP - 100_000_000)
    ch = CounterChannel("c", raw, ceiling_w=1000.0, modulus=TOP + 1)
    assert at(ch, 0) == Step()
    raw.value = 0
    assert "no power known yet" in at(ch, 1_000_000_000).fault


def test_near_the_top_the_channel_asks_for_dense_reads() -> None:
    """Far from the top the interval will do; near it the next read is due before
    the ceiling could cover a quarter of what is left, down to the fastest poll."""
    raw = Scripted(0)
    ch = CounterChannel("c", raw, ceiling_w=1000.0, modulus=TOP + 1)
    assert ch.due_s() is None  # nothing read yet
    at(ch, 0)
    assert ch.due_s() is not None and ch.due_s() > MAX_INTERVAL_S  # type: ignore[operator]
    raw.value = TOP - 100_000_000  # 100 J left: 25 ms at a quarter of 1 kW
    at(ch, 100_000_000_000)
    assert ch.due_s() == pytest.approx(0.025)
    raw.value = TOP - 1_000_000
    at(ch, 100_010_000_000)
    assert ch.due_s() == MIN_INTERVAL_S
    clock = FakeClock()
    sampler = Sampler([ch], interval_s=IDLE, clock=clock)
    try:
        assert sampler.next_wait_s() == MIN_INTERVAL_S
    finally:
        sampler.close()


def test_the_sampler_thread_reads_densely_near_the_top_and_tells_a_reset_apart() -> None:
    """Real time, the thread alone: a counter at 30 W nearing its top is read every
    few ms, so a reset 100 J below the top is seen within ~25 ms, where as a wrap
    it would be over 4 kW."""
    import time

    top = 10**12
    t0 = time.monotonic_ns()
    base = top - 101_000_000
    reset_at: list[int] = []

    def counter() -> int:
        now = time.monotonic_ns()
        if reset_at and now >= reset_at[0]:
            return (now - reset_at[0]) * 30 // 1000
        return (base + (now - t0) * 30 // 1000) % (top + 1)

    ch = CounterChannel("c", counter, ceiling_w=1000.0, modulus=top + 1)
    sampler = Sampler([ch], interval_s=1.0)
    try:
        start = sampler.snapshot()
        deadline = time.monotonic() + 30
        while (due := ch.due_s()) is None or due > 0.03:
            assert time.monotonic() < deadline, "the counter never neared its top"
            time.sleep(0.005)
        reset_at.append(time.monotonic_ns())
        while sampler.faults == 0:
            assert time.monotonic() < deadline, "the reset was never seen"
            time.sleep(0.005)
        end = sampler.snapshot()
    finally:
        sampler.close()
    pe = phase_energy("rapl", [domain()], start, end, None)
    assert not pe.valid and any("not a wrap" in r for r in pe.reasons), pe.reasons


def test_sampler_interval_keeps_many_wraps_between_snapshots_exact() -> None:
    modulus, ceiling_w, watts = 5_000_000, 100.0, 90.0
    clock = FakeClock()
    t0 = clock.now_ns

    def counter() -> int:  # a counter near the ceiling, wrapping every ~56 ms
        return round(watts * (clock.now_ns - t0) / 1000) % modulus

    interval = poll_interval(modulus - 1, ceiling_w)
    ch = CounterChannel("c", counter, ceiling_w=ceiling_w, modulus=modulus)
    sampler = Sampler([ch], interval_s=IDLE, clock=clock)
    try:
        start = sampler.snapshot()
        for _ in range(160):  # 2 s of polls at the derived interval: ~36 wraps
            clock.sleep(interval)
            sampler.poll()
        end = sampler.snapshot()
    finally:
        sampler.close()
    assert end.faults == start.faults == 0
    truth = round(watts * (end.t_ns - start.t_ns) / 1000)
    assert end.totals_uj["c"] - start.totals_uj["c"] == truth
    assert truth > 30 * modulus


def test_reads_too_far_apart_for_the_range_are_a_fault_not_a_wrong_total() -> None:
    modulus = 5_000_000
    clock = FakeClock()
    raw = Scripted(0)
    sampler = Sampler(
        [CounterChannel("c", raw, ceiling_w=100.0, modulus=modulus)], interval_s=IDLE, clock=clock
    )
    try:
        start = sampler.snapshot()
        clock.sleep(0.2)  # 100 W crosses 5 J in 50 ms: two wraps could hide in 200 ms
        raw.value = 1_000
        end = sampler.snapshot()
    finally:
        sampler.close()
    pe = phase_energy("rapl", [domain()], start, end, None)
    assert end.faults == 1
    assert not pe.valid and pe.gross_mj is None
    assert any("could hide" in r for r in pe.reasons)


def test_backwards_without_a_range_is_a_fault_and_rebases() -> None:
    raw = Scripted(5_000)
    ch = CounterChannel("c", raw, ceiling_w=1e6, backwards="driver reload")
    at(ch, 0)
    raw.value = 10
    step = at(ch, 1_000_000_000)
    assert step.delta_uj == 0 and "driver reload" in step.fault
    raw.value = 30
    assert at(ch, 2_000_000_000) == Step(delta_uj=20)


def test_implausible_jump_is_a_fault_never_a_spike() -> None:
    raw = Scripted(0)
    ch = CounterChannel("c", raw, ceiling_w=5000.0, modulus=10**12)
    at(ch, 0)
    raw.value = 10**11  # 100 kJ in 1 s
    step = at(ch, 1_000_000_000)
    assert step.delta_uj == 0 and "implausible" in step.fault
    raw.value = 10**11 + 7
    assert at(ch, 2_000_000_000) == Step(delta_uj=7)


def test_counter_chunk_inside_the_slack_is_plausible() -> None:
    raw = Scripted(0)
    ch = CounterChannel("c", raw, ceiling_w=1000.0, slack_s=1.0, unit_uj=1000)
    at(ch, 0)
    raw.value = 70_000  # 70 J appearing between reads 1 ms apart: one chunk update
    assert at(ch, 1_000_000) == Step(delta_uj=70_000_000)


def test_failed_read_faults_and_so_does_the_resume() -> None:
    raw = Scripted(100)
    ch = CounterChannel("c", raw, ceiling_w=1e6, modulus=10**9)
    at(ch, 0)
    raw.value = OSError(5, "Input/output error")
    assert "read failed" in at(ch, 1).fault
    raw.value = 900
    assert "resumed" in at(ch, 2).fault
    raw.value = 950
    assert at(ch, 3) == Step(delta_uj=50)


def test_non_integer_content_is_a_fault() -> None:
    def garbage() -> int:
        return int("")

    assert "ValueError" in at(CounterChannel("c", garbage, ceiling_w=1.0), 0).fault


def test_power_channel_integrates_trapezoids() -> None:
    mw = Scripted(10_000)
    ch = PowerChannel("p", mw, ceiling_w=1000.0)
    at(ch, 0)
    mw.value = 30_000
    # (10 W + 30 W) / 2 x 2 s = 40 J
    assert at(ch, 2_000_000_000) == Step(delta_uj=40_000_000)


def test_power_channel_carries_sub_microjoule_remainders() -> None:
    ch = PowerChannel("p", lambda: 7, ceiling_w=1000.0)
    at(ch, 0)
    # 7 mW for 3 us is 0.021 uJ a read; 10,000 reads are 210 uJ, not 0.
    total = sum(at(ch, i * 3000).delta_uj for i in range(1, 10_001))
    assert total == 210


def test_power_above_the_ceiling_is_a_fault() -> None:
    ch = PowerChannel("p", lambda: 9_000_000, ceiling_w=5000.0)
    assert "implausible" in at(ch, 0).fault


def test_fault_changes_the_note_so_the_window_says_why() -> None:
    clock = FakeClock()
    raw = Scripted(0)
    sampler = Sampler([CounterChannel("c", raw, ceiling_w=1e6)], interval_s=IDLE, clock=clock)
    try:
        a = sampler.snapshot()
        raw.value = PermissionError(13, "Permission denied")
        b = sampler.snapshot()
        raw.value = 10
        c = sampler.snapshot()
        raw.value = 25
        clock.sleep(1)
        d = sampler.snapshot()
    finally:
        sampler.close()
    assert (a.faults, b.faults, c.faults, d.faults) == (0, 1, 2, 2)
    assert "PermissionError" in b.notes["c"]
    across = phase_energy("rapl", [domain()], a, b, None)
    assert not across.valid and any("PermissionError" in r for r in across.reasons)
    # A window starting at the failed read cannot look valid either.
    assert not phase_energy("rapl", [domain()], b, d, None).valid
    after = phase_energy("rapl", [domain()], c, d, None)
    assert after.valid and after.domains == {"c": 0}
    assert d.totals_uj["c"] - c.totals_uj["c"] == 15


class Counting(Channel):
    def __init__(self, boom_after: int = -1) -> None:
        super().__init__("n")
        self.reads = 0
        self.boom_after = boom_after
        self.polled = threading.Event()

    def read(self) -> int:
        return 0

    def step(self, reading: Reading, t_ns: int) -> Step:
        self.reads += 1
        if self.reads >= 3:
            self.polled.set()
        if self.boom_after >= 0 and self.reads > self.boom_after:
            raise RuntimeError("driver exploded")
        return Step(delta_uj=1)


def test_thread_polls_in_the_background_and_close_joins_it() -> None:
    ch = Counting()
    sampler = Sampler([ch], interval_s=0.01)
    try:
        assert sampler.running
        assert ch.polled.wait(10)
    finally:
        sampler.close()
    assert not sampler.running
    with pytest.raises(MeterError):
        sampler.snapshot()
    sampler.close()  # idempotent


def test_thread_survives_a_channel_that_raises() -> None:
    ch = Counting(boom_after=1)
    sampler = Sampler([ch], interval_s=0.01)
    try:
        assert ch.polled.wait(10)
        snap = sampler.snapshot()
    finally:
        sampler.close()
    assert snap.faults >= 2
    assert "driver exploded" in snap.notes["n"]


def test_channel_names_must_be_unique() -> None:
    with pytest.raises(ValueError):
        Sampler([Counting(), Counting()], interval_s=IDLE)


class Recording(Channel):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.times: list[int] = []

    def read(self) -> int:
        return 0

    def step(self, reading: Reading, t_ns: int) -> Step:
        self.times.append(t_ns)
        return Step()


def test_every_read_is_bracketed_by_the_clock_and_the_snapshot_states_its_spread() -> None:
    ticks = iter(range(0, 10**12, 1_000))  # each clock read 1 us after the last
    a, b = Recording("a"), Recording("b")
    sampler = Sampler([a, b], interval_s=IDLE, clock=lambda: next(ticks))
    try:
        snap = sampler.snapshot()  # clock reads at 3, 4 and 5 us (open read 0, 1, 2)
    finally:
        sampler.close()
    assert (a.times[-1], b.times[-1]) == (3_500, 4_500)  # each read's own bracket
    assert (snap.t_ns, snap.spread_ns) == (4_000, 1_000)  # the whole span


def test_a_window_keeps_microseconds_and_its_edges() -> None:
    from jouled.meter.base import Snapshot

    start = Snapshot(t_ns=1_000_000_000, totals_uj={"c": 0}, spread_ns=1_500)
    end = Snapshot(t_ns=1_499_999_400, totals_uj={"c": 5_000_000}, spread_ns=2_000)
    pe = phase_energy("rapl", [domain()], start, end, None)
    wire = pe.to_wire()
    assert (wire["wall_ms"], wire["wall_us"], wire["edge_us"]) == (499, 499_999, 4)


def test_the_sampler_thread_sees_a_step_back_between_its_reads() -> None:
    """Real time, the thread alone: a 262 kJ counter at 30 W steps back by 20 J.
    Reads a second apart would see 10 J where 30 J were counted, a quiet error;
    the thread reads often enough that the step shows as a decrease, and no
    window across it has a figure."""
    import time

    t0 = time.monotonic_ns()
    back_at: list[int] = []

    def counter() -> int:
        now = time.monotonic_ns()
        back = 20_000_000 if back_at and now >= back_at[0] else 0
        return 5_000_000_000 + (now - t0) * 30 // 1000 - back

    ch = CounterChannel("c", counter, ceiling_w=1000.0, modulus=TOP + 1)
    sampler = Sampler([ch], interval_s=poll_interval(TOP, 1000.0))
    try:
        start = sampler.snapshot()
        back_at.append(time.monotonic_ns())
        deadline = time.monotonic() + 30
        while sampler.faults == 0:
            assert time.monotonic() < deadline, "the step back was never seen"
            time.sleep(0.01)
        end = sampler.snapshot()
    finally:
        sampler.close()
    pe = phase_energy("rapl", [domain()], start, end, None)
    assert not pe.valid and pe.gross_mj is None
    assert any("went backwards" in r for r in pe.reasons), pe.reasons


def test_a_counter_that_steps_slowly_is_frozen_only_over_two_of_its_steps() -> None:
    """A GPU counter may show new energy once a second: 300 ms without a step while
    the phase is busy says nothing; 3 s without one is a frozen counter."""
    from jouled.meter.base import Snapshot

    gpu = Domain("gpu-0", "nvml", "gpu", 1000, 100, update_us=1_000_000)
    still = {"gpu-0": 5_000_000}
    short = phase_energy(
        "nvml", [gpu], Snapshot(0, still), Snapshot(300_000_000, still), None, busy_ns=10**8
    )
    assert short.valid and short.domains == {"gpu-0": 0}
    long = phase_energy(
        "nvml", [gpu], Snapshot(0, still), Snapshot(3_000_000_000, still), None, busy_ns=10**8
    )
    assert not long.valid and any("frozen" in r for r in long.reasons)
