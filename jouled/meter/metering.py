"""Metered phases: windows over the daemon's meter under an attribution policy.

`exclusive` (default) holds one host-wide lock for the length of every metered
phase, so a whole-host counter's window belongs to one attempt. `shared` lets
phases overlap and charges each window the share of the host's busy CPU time
that its own process tree used (attribution "cpu-share").
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from jouled.documents.answers import MeterStatus
from jouled.meter.base import Calibration, Meter, Snapshot
from jouled.meter.window import PhaseEnergy, phase_energy

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def host_busy_cpu_ns(stat_path: str = "/proc/stat") -> int | None:
    """CPU time every core spent not idle since boot, from the kernel's accounting."""
    try:
        with open(stat_path, encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(v) for v in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    # guest time is already counted inside user/nice
    busy = sum(ticks[:8]) - idle
    return busy * 1_000_000_000 // _CLK_TCK


@dataclass
class Window:
    """An open window; `cpu_ns` is set by the phase to the CPU its own processes used."""

    start: Snapshot
    host_cpu_start: int | None
    cpu_ns: int = 0
    energy: PhaseEnergy | None = field(default=None)
    # Why CPU the phase's processes used is not in `cpu_ns` ("" when all of it is).
    cpu_uncounted: str = ""

    def add_run(self, cpu_ns: int, counted: str | None) -> None:
        """A sandboxed run's CPU; `counted`: how the sandbox counted it (`uncounted`: not)."""
        self.cpu_ns += cpu_ns
        if counted == "uncounted":
            self.cpu_uncounted = (
                "a sandboxed run's CPU time is not counted (no cgroup, or a container)"
            )


class Metering:
    def __init__(self, meter: Meter, calibration: Calibration | None, policy: str) -> None:
        self.meter = meter
        self.calibration = calibration
        self.policy = policy
        self._host_lock = threading.Lock()
        # Phases waiting for the host lock, and who holds it: an op window takes the
        # host only while no phase waits for it (`take_host`).
        self._waiting = 0
        self._waiting_lock = threading.Lock()
        self.holder = ""

    def status(self) -> MeterStatus:
        """The meter, the attribution policy and the calibration in force (with its age)."""
        cal = self.calibration
        described = dict(self.meter.describe())  # what the meter says of itself beyond these
        return MeterStatus(
            source=str(described.pop("source")),
            measured=bool(described.pop("measured")),
            domains=described.pop("domains"),
            policy=self.policy,
            calibration=None
            if cal is None
            else {
                **cal.body(),
                "seq": cal.seq,
                "time": cal.time,
                "age_s": cal.age_s(),
                "idle_w": {name: d.idle_mw / 1000 for name, d in sorted(cal.domains.items())},
            },
            extra=described,
        )

    @contextmanager
    def phase(
        self, *, shared: bool = False, waiting: Callable[[str], None] | None = None
    ) -> Iterator[Window]:
        """Meter one phase; the window's energy is on `window.energy` after the block.

        `shared` meters it without the host lock whatever the policy, apportioned
        by CPU share: for the daemon's own short ops (seeding a workdir, applying
        a patch), which must not wait for another attempt's tests to finish.
        `waiting(holder)` is called when the phase has to wait for the host.
        """
        if shared:
            yield from self._window(shared=True)
        elif self.policy == "exclusive":
            with self._waiting_lock:
                held = self._host_lock.acquire(blocking=False)
                self._waiting += not held
            if not held:
                try:
                    if waiting is not None:
                        waiting(self.holder or "another metered phase")
                    self._host_lock.acquire()
                finally:
                    with self._waiting_lock:
                        self._waiting -= 1
            self.holder = "another attempt's metered phase"
            try:
                yield from self._window(shared=False)
            finally:
                self._host_lock.release()
        else:
            yield from self._window(shared=True)

    def take_host(self, holder: str) -> bool:
        """Take the host lock for an op window: only when it is free and no phase waits."""
        with self._waiting_lock:
            if self._waiting or not self._host_lock.acquire(blocking=False):
                return False
        self.holder = holder
        return True

    def give_host(self) -> None:
        self._host_lock.release()

    def _window(self, *, shared: bool) -> Iterator[Window]:
        window = Window(self.meter.snapshot(), host_busy_cpu_ns() if shared else None)
        try:
            yield window
        finally:
            end = self.meter.snapshot()
            share = None
            if shared:
                host_end = host_busy_cpu_ns()
                if window.host_cpu_start is not None and host_end is not None:
                    busy = host_end - window.host_cpu_start
                    share = window.cpu_ns / busy if busy > 0 else 0.0
                else:
                    share = 0.0
            window.energy = phase_energy(
                self.meter.source,
                self.meter.domains(),
                window.start,
                end,
                self.calibration,
                share=share,
                busy_ns=window.cpu_ns,
                cpu_uncounted=window.cpu_uncounted,
            )
