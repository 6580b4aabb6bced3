"""The meter interface: cumulative counters, snapshots, and what a window costs.

A meter exposes one or more *domains* (a CPU package, a GPU, an estimate),
each a monotonically increasing energy total in microjoules. A `Snapshot`
is every domain's total at one instant; a window is any pair of snapshots, so
phases can be bracketed, nested or overlapped freely without the meter
knowing. Turning a window into joules (idle subtraction, floors, attribution)
is `jouled.meter.window`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Self

ESTIMATOR = "estimator"


@dataclass(frozen=True)
class Domain:
    """One energy counter the meter reads."""

    name: str  # unique within the meter, e.g. "package-0", "gpu-0", "estimated"
    source: str  # "rapl", "nvml" or "estimator"
    kind: str  # "package", "psys", "dram", "gpu", "gpu-power", "wall", "cpu-time"
    resolution_uj: int  # smallest energy step the counter can show
    min_window_ms: int  # windows shorter than this are not comparable
    # How often the counter shows new energy, as the hardware documents it, until
    # a calibration measures it (`DomainIdle.update_us`); 0 for a figure that is
    # current at every read.
    update_us: int = 0

    @property
    def measured(self) -> bool:
        return self.source != ESTIMATOR


@dataclass(frozen=True)
class Snapshot:
    """Every domain's cumulative energy at one instant.

    `faults` counts failed or implausible reads since the meter opened: a
    window whose two snapshots differ in faults is invalid, never zero.

    The counters are read one after another, each between two clock reads:
    `t_ns` is the middle of that span and every read happened within
    `spread_ns` of it (0 for a meter that reads nothing, like the estimator).
    """

    t_ns: int  # time.monotonic_ns()
    totals_uj: Mapping[str, int]
    faults: int = 0
    # Per-domain notes a window should carry (a driver reload, a fallback).
    notes: Mapping[str, str] = field(default_factory=dict)
    spread_ns: int = 0


class Meter(ABC):
    """A source of cumulative energy counters."""

    @property
    @abstractmethod
    def source(self) -> str:
        """The label every figure from this meter carries: "rapl", "nvml",
        "rapl+nvml" or "estimator"."""

    @abstractmethod
    def domains(self) -> Sequence[Domain]: ...

    @abstractmethod
    def snapshot(self) -> Snapshot: ...

    def close(self) -> None:  # noqa: B027 - most meters hold nothing
        """Release files, threads or library handles."""

    @property
    def measured(self) -> bool:
        return any(d.measured for d in self.domains())

    @property
    def min_window_ms(self) -> int:
        return max((d.min_window_ms for d in self.domains()), default=0)

    def describe(self) -> dict[str, object]:
        return {
            "source": self.source,
            "measured": self.measured,
            "min_window_ms": self.min_window_ms,
            "domains": [
                {
                    "name": d.name,
                    "source": d.source,
                    "kind": d.kind,
                    "resolution_uj": d.resolution_uj,
                    "min_window_ms": d.min_window_ms,
                    "update_us": d.update_us,
                }
                for d in self.domains()
            ],
        }

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class DomainIdle:
    idle_mw: int
    stddev_mw: int
    # How far idle_mw can be off because the counter reads at the edges of the
    # calibration's stretches were not instantaneous (their clock brackets).
    timing_mw: int = 0
    # The longest the counter went without showing new energy, measured from its
    # own steps: a read may miss up to this much time's energy at each end of a
    # window. 0: not measured (a calibration signed before it was).
    update_us: int = 0


@dataclass(frozen=True)
class Calibration:
    """Idle power per domain, measured on the quiet host (a signed ledger entry)."""

    source: str
    seconds: int
    domains: Mapping[str, DomainIdle]
    seq: int | None = None  # the ledger entry that recorded it
    time: str = ""  # RFC 3339, when it was measured

    def body(self) -> dict[str, object]:
        """The `calibration` ledger entry body (docs/ledger.md, `calibration`)."""
        return {
            "source": self.source,
            "seconds": self.seconds,
            "domains": {
                name: {
                    "idle_mw": d.idle_mw,
                    "stddev_mw": d.stddev_mw,
                    "timing_mw": d.timing_mw,
                    "update_us": d.update_us,
                }
                for name, d in sorted(self.domains.items())
            },
        }

    @classmethod
    def from_body(
        cls, body: Mapping[str, object], *, seq: int | None = None, time: str = ""
    ) -> Calibration:
        raw = body.get("domains", {})
        assert isinstance(raw, Mapping)
        return cls(
            source=str(body["source"]),
            seconds=int(body["seconds"]),  # type: ignore[call-overload]
            domains={
                # timing_mw and update_us are absent from calibrations signed
                # before they were measured.
                str(k): DomainIdle(
                    int(v["idle_mw"]),
                    int(v["stddev_mw"]),
                    int(v.get("timing_mw", 0)),
                    int(v.get("update_us", 0)),
                )
                for k, v in raw.items()
            },
            seq=seq,
            time=time,
        )

    def age_s(self) -> int | None:
        """Whole seconds since it was measured; None when its time is not known."""
        try:
            then = datetime.strptime(self.time, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        except ValueError:
            return None
        return int((datetime.now(UTC) - then).total_seconds())

    @classmethod
    def none(cls, source: str) -> Calibration:
        """No idle measured: marginal equals gross, and says so."""
        return cls(source=source, seconds=0, domains={})
