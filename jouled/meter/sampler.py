"""One polling thread per counter-based meter.

Windows are pairs of snapshots that may be minutes apart, but hardware
counters wrap (RAPL) or restart (an NVML driver reload), and some sources only
report instantaneous power. Reading at the window edges alone would let wraps
hide, so a sampler reads every channel often enough that at most one wrap can
fall between two reads, and keeps unbounded per-domain totals that never wrap.

A read that fails or is implausible is a *fault*: it is counted, the channel is
rebased, and the energy around it is not guessed. Any window that contains a
fault sees the count change and is invalid (see `jouled.meter.window`).

Every read is bracketed by the clock: the snapshot's time is the middle of the
span its reads took and `spread_ns` says how far from it any read can be, so a
read that stalls (a busy thread, a preempted sampler) widens the stated
uncertainty instead of shifting the window's edge unnoticed.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jouled.errors import MeterError
from jouled.meter.base import Domain, Meter, Snapshot

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.01
# Reads are never further apart than this, whatever the range: a step back is
# only visible when it is larger than the energy counted between two reads
# (3 J at 30 W), and a poll costs microseconds.
MAX_INTERVAL_S = 0.1
# Without a known range nothing bounds the wrap period; poll often enough that
# a counter reset is seen soon after it happens.
UNKNOWN_RANGE_INTERVAL_S = 0.1
# Reading four times per range-crossing at the ceiling leaves room for a thread
# that wakes up late.
READS_PER_WRAP = 4
# Telling a wrap from a reset. A wrap from `h` below the top, seen `dt` after the
# read before it, implies the power (h + reading) / dt; a reset from there
# implies at least h / dt. Near the top the sampler reads often (`due_s`: no
# later than the time the ceiling needs to cover a quarter of what is left), so
# a reset far from the top is seen after so short a gap that, read as a wrap,
# it would be far above the ceiling. What stays ambiguous is a reset from
# within `NEAR_TOP_S` of the top at the ceiling: such a step counts as a wrap.
NEAR_TOP_READS = 4
NEAR_TOP_S = 0.02
# Reads late or sparse (a busy host, a caller that snapshots without the
# thread) leave a backwards step far from the top ambiguous: it is a wrap only
# if the power it implies is within this factor of the most the counter showed
# over its last reads, and a fault otherwise (or when no power is known yet).
LATE_SURGE = 2.0
RECENT_READS = 8

Reading = int | Exception


def poll_interval(
    range_uj: int | None,
    ceiling_w: float,
    *,
    lo: float = MIN_INTERVAL_S,
    hi: float = MAX_INTERVAL_S,
) -> float:
    """Seconds between reads so that two wraps of a `range_uj` counter cannot
    fall between consecutive reads while power stays under `ceiling_w`.

    Clamped to [lo, hi]; a result of `lo` for a tiny range means the guarantee
    is weaker than asked, and the channel's gap check turns a too-long gap into
    a fault rather than a wrong total.
    """
    if range_uj is None:
        return min(hi, max(lo, UNKNOWN_RANGE_INTERVAL_S))
    safe = range_uj / (ceiling_w * 1e6) / READS_PER_WRAP
    return min(hi, max(lo, safe))


@dataclass(frozen=True)
class Step:
    """What one read of a channel contributed."""

    delta_uj: int = 0
    fault: str = ""  # non-empty: the read failed or was implausible, and why


class Channel(ABC):
    """One domain's raw source, turned into energy increments read by read.

    The sampler calls `read()` between two clock reads and hands the result (or
    the exception it raised) to `step()` with the middle of that bracket.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    def read(self) -> int:
        """One raw reading (a counter value, a power); raises if it fails."""

    @abstractmethod
    def step(self, reading: Reading, t_ns: int) -> Step:
        """Judge `reading`, taken at `t_ns`; return the energy since the previous one."""

    def due_s(self) -> float | None:
        """Seconds after the last read by which this channel needs its next one
        (None: the sampler's interval will do)."""
        return None

    def last_read(self) -> tuple[int, int] | None:
        """The last good raw reading and its time, if any."""
        return None


class CounterChannel(Channel):
    """A cumulative hardware counter.

    With a `modulus` (a RAPL counter with a known `max_energy_range_uj`) a
    backwards step may be a wrap. It is one only if the power it implies (from
    the last reading up to the top, then from zero to this one, over the time
    between) is under the ceiling, and, when the last reading was far from the
    top (more than the ceiling covers in `NEAR_TOP_S`), also within
    `LATE_SURGE` times the power the counter showed over its last reads. Any
    other decrease (a reset, a glitch, a firmware correction, a step back) is a
    fault and the channel rebases. `due_s` makes the sampler read densely as
    the counter nears its top, so a wrap is seen from close to the top and a
    reset from far below it is seen soon. Without a modulus a backwards step
    cannot be told from a reset at all; `backwards` names the likely cause for
    the window's reasons (e.g. an NVML driver reload).
    """

    def __init__(
        self,
        name: str,
        read: Callable[[], int],
        *,
        ceiling_w: float,
        modulus: int | None = None,
        unit_uj: int = 1,
        slack_s: float = MIN_INTERVAL_S,
        backwards: str = "counter went backwards",
    ) -> None:
        super().__init__(name)
        self._read = read
        self._modulus = modulus
        self._unit_uj = unit_uj
        self._ceiling_uw = ceiling_w * 1e6
        # A counter that updates in chunks can show a chunk between two reads
        # microseconds apart; judge power over at least one update period.
        self._slack_ns = int(slack_s * 1e9)
        # At the ceiling the counter crosses its whole range in this time: reads
        # further apart than this could hide a second wrap.
        self._wrap_ns = (
            int(modulus * unit_uj / self._ceiling_uw * 1e9) if modulus is not None else None
        )
        self._backwards = backwards
        self._last: tuple[int, int] | None = None
        self._gap = False
        self._recent_uw: deque[float] = deque(maxlen=RECENT_READS)

    def read(self) -> int:
        return int(self._read())

    def step(self, reading: Reading, t_ns: int) -> Step:
        if isinstance(reading, Exception):
            return self._lost(f"read failed: {type(reading).__name__}: {reading}")
        raw = reading
        if raw < 0 or (self._modulus is not None and raw >= self._modulus):
            return self._lost(f"read {raw} is outside the counter's range")
        last, self._last = self._last, (raw, t_ns)
        if last is None:
            if self._gap:
                self._gap = False
                return Step(fault="resumed after a failed read; the gap is not counted")
            return Step()
        raw0, t0 = last
        dt = t_ns - t0
        span_ns = max(dt, self._slack_ns)
        if raw < raw0 and self._modulus is None:
            return Step(fault=f"{self._backwards} ({raw0} -> {raw}); rebased")
        if self._wrap_ns is not None and dt > self._wrap_ns:
            return Step(fault=f"reads {dt / 1e6:.0f} ms apart: a second wrap could hide")
        if raw >= raw0:
            delta = raw - raw0
        else:
            assert self._modulus is not None
            delta = (raw - raw0) % self._modulus
            fault = self._not_a_wrap(raw0, raw, delta * self._unit_uj, span_ns)
            if fault:
                return Step(fault=fault)
        delta_uj = delta * self._unit_uj
        if delta_uj > self._ceiling_uw * span_ns / 1e9:
            return Step(
                fault=f"implausible: {delta_uj} uJ in {dt / 1e6:.1f} ms is above "
                f"{self._ceiling_uw / 1e6:.0f} W; rebased"
            )
        if dt >= self._slack_ns:  # shorter gaps say little about power
            self._recent_uw.append(delta_uj * 1e9 / dt)
        return Step(delta_uj=delta_uj)

    def due_s(self) -> float | None:
        if self._modulus is None or self._last is None:
            return None
        headroom_uj = (self._modulus - self._last[0]) * self._unit_uj
        return max(MIN_INTERVAL_S, headroom_uj / (NEAR_TOP_READS * self._ceiling_uw))

    def last_read(self) -> tuple[int, int] | None:
        return self._last

    def _not_a_wrap(self, raw0: int, raw: int, wrap_uj: int, span_ns: int) -> str:
        """Why a backwards step from `raw0` to `raw` is not a wrap, or "" if it is one."""
        assert self._modulus is not None
        below_top_uj = (self._modulus - raw0) * self._unit_uj
        implied_uw = wrap_uj * 1e9 / span_ns
        what = (
            f"went backwards ({raw0} -> {raw}) from {below_top_uj / 1e6:.3f} J below its top: "
            f"as a wrap that is {implied_uw / 1e6:.0f} W over {span_ns / 1e6:.1f} ms"
        )
        if implied_uw > self._ceiling_uw:
            return f"{what}, above its {self._ceiling_uw / 1e6:.0f} W ceiling; not a wrap, rebased"
        if below_top_uj <= self._ceiling_uw * NEAR_TOP_S:
            return ""  # close enough to the top that only the ceiling can judge it
        if not self._recent_uw:
            return (
                f"{what}, from far below the top with no power known yet to judge it by; "
                "not a wrap, rebased"
            )
        recent_uw = max(self._recent_uw)
        if implied_uw <= LATE_SURGE * recent_uw:
            return ""
        return (
            f"{what}, from far below the top and over {LATE_SURGE:g} x the "
            f"{recent_uw / 1e6:.1f} W it recently showed; not a wrap, rebased"
        )

    def _lost(self, reason: str) -> Step:
        # The next good read starts afresh and is itself a fault, so a window
        # that begins at this failed read cannot look valid either.
        self._last = None
        self._gap = True
        return Step(fault=reason)


class PowerChannel(Channel):
    """Sampled power in milliwatts, integrated by trapezoids between reads."""

    def __init__(self, name: str, read_mw: Callable[[], int], *, ceiling_w: float) -> None:
        super().__init__(name)
        self._read_mw = read_mw
        self._ceiling_mw = ceiling_w * 1000
        self._last: tuple[int, int] | None = None
        self._gap = False
        self._rem_pj = 0  # sub-microjoule remainder carried so rounding never drifts

    def read(self) -> int:
        return int(self._read_mw())

    def last_read(self) -> tuple[int, int] | None:
        return self._last

    def step(self, reading: Reading, t_ns: int) -> Step:
        if isinstance(reading, Exception):
            return self._lost(f"read failed: {type(reading).__name__}: {reading}")
        mw = reading
        if mw < 0 or mw > self._ceiling_mw:
            return self._lost(f"implausible power {mw} mW")
        last, self._last = self._last, (mw, t_ns)
        if last is None:
            if self._gap:
                self._gap = False
                return Step(fault="resumed after a failed read; the gap is not counted")
            return Step()
        mw0, t0 = last
        # mW x ns = pJ
        pj = (mw0 + mw) * max(0, t_ns - t0) // 2 + self._rem_pj
        delta_uj, self._rem_pj = divmod(pj, 1_000_000)
        return Step(delta_uj=delta_uj)

    def _lost(self, reason: str) -> Step:
        self._last = None
        self._gap = True
        return Step(fault=reason)


class Sampler:
    """Polls its channels on a daemon thread; `snapshot()` reads fresh under a lock.

    The first read happens in the constructor, so totals start at zero at open.
    `close()` stops and joins the thread; a closed sampler refuses snapshots,
    because without polling a wrap could hide.
    """

    def __init__(
        self,
        channels: Sequence[Channel],
        *,
        interval_s: float,
        clock: Callable[[], int] = time.monotonic_ns,
        name: str = "jouled-sampler",
    ) -> None:
        names = [c.name for c in channels]
        if len(set(names)) != len(names):
            raise ValueError(f"channel names must be unique: {names}")
        self.interval_s = interval_s
        self._channels = tuple(channels)
        self._clock = clock
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(names, 0)
        self._notes: dict[str, str] = {}
        self._faults = 0
        self._failing: set[str] = set()
        self._closed = False
        self._poll()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def faults(self) -> int:
        return self._faults

    @property
    def running(self) -> bool:
        """The polling thread is alive (False once closed)."""
        return self._thread.is_alive()

    def poll(self) -> int:
        """Read every channel now; returns the time of the reads (their bracket's middle)."""
        with self._lock:
            return self._poll()[0]

    def snapshot(self) -> Snapshot:
        with self._lock:
            if self._closed:
                raise MeterError("the meter is closed; open a new one to keep metering")
            t_ns, spread_ns = self._poll()
            return Snapshot(
                t_ns=t_ns,
                totals_uj=dict(self._totals),
                faults=self._faults,
                notes=dict(self._notes),
                spread_ns=spread_ns,
            )

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=max(5.0, 2 * self.interval_s))

    def next_wait_s(self) -> float:
        """Seconds until the next poll: the interval, or sooner where a channel
        needs it (a counter near its top)."""
        with self._lock:
            dues = [d for c in self._channels if (d := c.due_s()) is not None]
        return min([self.interval_s, *dues])

    def last_reads(self) -> dict[str, tuple[int, int]]:
        """Each channel's last good raw reading and how many ns ago it was taken
        (channels without one are left out)."""
        with self._lock:
            now = self._clock()
            return {
                c.name: (last[0], max(0, now - last[1]))
                for c in self._channels
                if (last := c.last_read()) is not None
            }

    def _run(self) -> None:
        while not self._stop.wait(self.next_wait_s()):
            self.poll()

    def _poll(self) -> tuple[int, int]:
        """Read every channel, each between two clock reads; returns the middle of
        the whole span and its half-width (every read happened within it)."""
        first = before = self._clock()
        for channel in self._channels:
            reading: Reading
            try:
                reading = channel.read()
            except Exception as err:
                reading = err
            after = self._clock()
            try:
                step = channel.step(reading, (before + after) // 2)
            except Exception as err:  # a polling thread that dies would hide every later wrap
                step = Step(fault=f"{type(err).__name__}: {err}")
            before = after
            if step.fault:
                self._faults += 1
                # Numbered, so a window spanning a new fault sees the note change.
                self._notes[channel.name] = f"{step.fault} (fault {self._faults})"
                if channel.name not in self._failing:
                    self._failing.add(channel.name)
                    log.warning("energy domain %s: %s", channel.name, step.fault)
                continue
            if channel.name in self._failing:
                self._failing.discard(channel.name)
                log.info("energy domain %s reads again", channel.name)
            self._totals[channel.name] += step.delta_uj
        middle = (first + before) // 2
        return middle, before - middle


class SampledMeter(Meter):
    """A meter whose domains one `Sampler` thread polls; subclasses set both."""

    _sampler: Sampler
    _domains: tuple[Domain, ...]

    @property
    def interval_s(self) -> float:
        return self._sampler.interval_s

    def domains(self) -> Sequence[Domain]:
        return self._domains

    def snapshot(self) -> Snapshot:
        return self._sampler.snapshot()

    def close(self) -> None:
        self._sampler.close()
