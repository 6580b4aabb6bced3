"""Idle calibration: what the quiet host draws, per domain, and how much that wobbles.

A window's marginal energy is gross minus idle power x wall time, and it only
counts as signal above the idle noise (`jouled.meter.window`), so both the mean
and the spread are measured here, on the same meter the windows will use.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from jouled.errors import ConfigError, MeterError
from jouled.meter.base import Calibration, DomainIdle, Meter, Snapshot

# The update period is measured from a burst of back-to-back reads after the
# idle stretch (so the burst's own CPU does not count as idle): until every
# domain has shown this many steps, or for at most this long.
BURST_STEPS = 16
BURST_S = 1.5
BURST_GAP_S = 0.0002
# A read later than this after the one before was the reader's delay, not the
# counter's: the step pairs it ends are left out where others are not.
BURST_ON_TIME_S = 0.002


def calibrate(
    meter: Meter,
    seconds: float,
    *,
    interval_s: float = 0.1,
    sleep: Callable[[float], None] = time.sleep,
) -> Calibration:
    """Sample the quiet host for `seconds` in sub-intervals of about `interval_s`.

    A domain's idle power is its energy over every good sub-interval divided by
    their wall time; its spread is the standard deviation of the sub-intervals'
    powers. Sub-intervals that hold a failed read are left out; if none is left,
    calibration fails rather than guess.

    Each snapshot's reads took time (`Snapshot.spread_ns`): inside a stretch of
    good sub-intervals that cancels out, so only the two ends of each stretch
    can shift its energy against its wall time. A counter also shows energy in
    steps (`update_us`, measured from a burst of reads after the idle stretch:
    the longest it went without a new value), so each stretch's energy may
    cover up to one update period more or less than its wall time.
    `timing_mw` is the most that both can move a domain's idle power.

    Estimator domains get idle 0 and spread 0 without sampling: the estimator
    models active power only (its coefficient is already the cost of working),
    so it has no idle draw to subtract and no noise to measure.
    """
    if not seconds > 0:
        raise ConfigError(f"calibration needs a positive duration, got {seconds} s")
    if not interval_s > 0:
        raise ConfigError(f"calibration interval must be positive, got {interval_s} s")
    idle = {d.name: DomainIdle(0, 0) for d in meter.domains() if not d.measured}
    measured = [d.name for d in meter.domains() if d.measured]
    if not measured:
        return Calibration(source=meter.source, seconds=0, domains=idle, time=_now())

    count = max(1, round(seconds / interval_s))
    snaps = [meter.snapshot()]
    for _ in range(count):
        sleep(seconds / count)
        snaps.append(meter.snapshot())

    energy_uj = dict.fromkeys(measured, 0)
    powers_mw: dict[str, list[float]] = {name: [] for name in measured}
    good_ns = 0
    edges_ns = 0  # read spreads at the two ends of every stretch of good sub-intervals
    stretches = 0
    stretch_end: Snapshot | None = None
    for a, b in itertools.pairwise(snaps):
        dt_ns = b.t_ns - a.t_ns
        if not _good(a, b, measured) or dt_ns <= 0:
            continue
        if stretch_end is not a:
            edges_ns += a.spread_ns + (stretch_end.spread_ns if stretch_end else 0)
            stretches += 1
        stretch_end = b
        good_ns += dt_ns
        for name in measured:
            delta = b.totals_uj[name] - a.totals_uj[name]
            energy_uj[name] += delta
            # uJ / ns = kW; x 1e6 -> mW
            powers_mw[name].append(delta * 1e6 / dt_ns)
    if good_ns == 0:
        raise MeterError(
            f"calibration failed: every sample of {meter.source} held a failed read",
            hint="run `jouled meter probe` to see which domain fails",
        )
    assert stretch_end is not None
    edges_ns += stretch_end.spread_ns
    update_us = update_periods(meter, measured, sleep=sleep)
    for name in measured:
        spread = statistics.stdev(powers_mw[name]) if len(powers_mw[name]) > 1 else 0.0
        idle_mw = energy_uj[name] * 1e6 / good_ns
        # A counter read up to edges_ns away from its stamp, and showing energy
        # up to one update period late at each end of a stretch, moves this much
        # energy in or out of good_ns; the ratio cannot exceed 1 when the
        # windows are longer than their reads.
        off_ns = edges_ns + stretches * update_us[name] * 1000
        idle[name] = DomainIdle(
            idle_mw=round(idle_mw),
            stddev_mw=round(spread),
            timing_mw=math.ceil(idle_mw * off_ns / max(1, good_ns - off_ns)),
            update_us=update_us[name],
        )
    wall_s = (snaps[-1].t_ns - snaps[0].t_ns) / 1e9
    return Calibration(source=meter.source, seconds=round(wall_s), domains=idle, time=_now())


def update_periods(
    meter: Meter, names: list[str], *, sleep: Callable[[float], None] = time.sleep
) -> dict[str, int]:
    """The longest each domain's counter went without showing new energy, in
    microseconds, over a burst of back-to-back reads.

    A step is seen at the first read after it, so it happened within the read
    gap before that read: two steps seen `g` apart, the first after a read gap
    `r`, are less than `g + r` apart, an upper bound. Only pairs whose reads
    both came on time (`BURST_ON_TIME_S` after the read before) are kept where
    there are any: a read this process was late to make stretches the gap it
    ends and says nothing about the counter. A domain that showed fewer than
    two steps gets 0, not measured: windows then use the documented period,
    and a counter that did not move at all is frozen, not slow. Steps seen
    across a failed read are left out.
    """
    last = meter.snapshot()
    began = last.t_ns
    on_time_ns = BURST_ON_TIME_S * 1e9
    seen: dict[str, tuple[int, int] | None] = dict.fromkeys(names)  # last step: time, read gap
    steps = dict.fromkeys(names, 0)
    longest = dict.fromkeys(names, 0)  # over pairs whose reads came on time
    longest_any = dict.fromkeys(names, 0)
    while last.t_ns - began < BURST_S * 1e9:
        sleep(BURST_GAP_S)
        snap = meter.snapshot()
        gap_ns = snap.t_ns - last.t_ns
        if snap.faults != last.faults or gap_ns <= 0:
            seen = dict.fromkeys(names)  # a step seen across a failed read says nothing
        else:
            for name in names:
                if snap.totals_uj.get(name) == last.totals_uj.get(name):
                    continue
                before = seen[name]
                if before is not None:
                    bound = snap.t_ns - before[0] + before[1]
                    longest_any[name] = max(longest_any[name], bound)
                    if before[1] <= on_time_ns and gap_ns <= on_time_ns:
                        longest[name] = max(longest[name], bound)
                seen[name] = (snap.t_ns, gap_ns)
                steps[name] += 1
        last = snap
        if all(n > BURST_STEPS for n in steps.values()):
            break
    return {name: -(-(longest[name] or longest_any[name]) // 1000) for name in names}


def _good(a: Snapshot, b: Snapshot, names: list[str]) -> bool:
    if a.faults != b.faults:
        return False
    for name in names:
        start, end = a.totals_uj.get(name), b.totals_uj.get(name)
        if start is None or end is None or end < start:
            return False
    return True


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
