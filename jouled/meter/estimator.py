"""The estimator: a coefficient, never a measurement.

`wall` mode charges `active_watts` for every second of wall time; `cpu` mode
charges `watts_per_core` for every CPU second the daemon and its reaped
children (the sandboxed test runs) consumed. Every figure it produces is
labelled `estimator`, so it is never mistaken for a counter.
"""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Callable, Sequence

from jouled.errors import ConfigError
from jouled.meter.base import ESTIMATOR, Domain, Meter, Snapshot

DEFAULT_ACTIVE_WATTS = 15.0
DEFAULT_WATTS_PER_CORE = 5.0
MIN_WINDOW_MS = 100


_sandboxed_ns = [0]  # CPU of sandboxed runs, counted in their cgroups (`add_sandboxed_cpu`)
_sandboxed_lock = threading.Lock()


def add_sandboxed_cpu(ns: int) -> None:
    """A sandboxed run's CPU time, counted in its cgroup: its processes are reaped inside
    the sandbox, where this process's `RUSAGE_CHILDREN` never sees them."""
    with _sandboxed_lock:
        _sandboxed_ns[0] += max(0, ns)


def process_tree_cpu_ns() -> int:
    """CPU time of this process, every child it has waited for and every sandboxed run
    counted so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    return int(seconds * 1_000_000_000) + _sandboxed_ns[0]


class EstimatorMeter(Meter):
    def __init__(
        self,
        *,
        mode: str = "wall",
        active_watts: float = DEFAULT_ACTIVE_WATTS,
        watts_per_core: float = DEFAULT_WATTS_PER_CORE,
        clock: Callable[[], int] = time.monotonic_ns,
        cpu_clock: Callable[[], int] = process_tree_cpu_ns,
    ) -> None:
        if mode not in ("wall", "cpu"):
            raise ConfigError(f"estimator mode {mode!r} is not one of wall, cpu")
        watts = active_watts if mode == "wall" else watts_per_core
        if not watts > 0:
            raise ConfigError(
                f"estimator watts must be positive, got {watts}",
                hint="set JOULED_ACTIVE_WATTS (or JOULED_WATTS_PER_CORE) to a positive number",
            )
        self.mode = mode
        self.watts = watts
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._t0 = clock()
        self._cpu0 = cpu_clock()
        self._domain = Domain(
            name="estimated",
            source=ESTIMATOR,
            kind="wall" if mode == "wall" else "cpu-time",
            resolution_uj=1,
            min_window_ms=MIN_WINDOW_MS,
        )

    @property
    def source(self) -> str:
        return ESTIMATOR

    def domains(self) -> Sequence[Domain]:
        return (self._domain,)

    def snapshot(self) -> Snapshot:
        now = self._clock()
        ns = now - self._t0 if self.mode == "wall" else self._cpu_clock() - self._cpu0
        # W x ns = nJ; / 1000 = uJ
        return Snapshot(t_ns=now, totals_uj={self._domain.name: int(self.watts * ns) // 1000})

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["estimator"] = {"mode": self.mode, "watts": self.watts}
        return info
