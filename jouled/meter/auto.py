"""Opening the meter `--energy auto|rapl|nvml|estimator` names.

`auto` meters every measured domain that reads (CPU packages and GPUs summed,
as one `rapl+nvml` meter) and falls back to the estimator only when nothing
measured reads; it says why on the log. RAPL zones that do not advance while a
CPU is kept busy (a frozen counter: an emulated or disabled RAPL) do not count
as reading. An explicit `rapl` or `nvml` fails at
start with a one-line error instead of quietly estimating.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jouled.errors import ConfigError, MeterError, MeterPermissionError
from jouled.meter.base import Domain, Meter, Snapshot
from jouled.meter.estimator import DEFAULT_ACTIVE_WATTS, DEFAULT_WATTS_PER_CORE, EstimatorMeter
from jouled.meter.nvml import NvmlMeter
from jouled.meter.rapl import DEFAULT_ROOT, FROZEN_PROBE_S, RaplMeter, spin

log = logging.getLogger(__name__)

KINDS = ("auto", "rapl", "nvml", "estimator")


class CompositeMeter(Meter):
    """Several meters read as one: domains are the union, faults add up."""

    def __init__(self, meters: Sequence[Meter]) -> None:
        if not meters:
            raise ValueError("a composite meter needs at least one meter")
        names = [d.name for m in meters for d in m.domains()]
        if len(set(names)) != len(names):
            raise ValueError(f"domain names collide across meters: {names}")
        self.meters = tuple(meters)
        self._source = "+".join(m.source for m in meters)
        self._domains = tuple(d for m in meters for d in m.domains())

    @property
    def source(self) -> str:
        return self._source

    def domains(self) -> Sequence[Domain]:
        return self._domains

    def snapshot(self) -> Snapshot:
        parts = [m.snapshot() for m in self.meters]
        totals: dict[str, int] = {}
        notes: dict[str, str] = {}
        for part in parts:
            totals.update(part.totals_uj)
            notes.update(part.notes)
        # The parts are read one after another: the snapshot spans all their reads.
        first = min(p.t_ns - p.spread_ns for p in parts)
        last = max(p.t_ns + p.spread_ns for p in parts)
        middle = (first + last) // 2
        return Snapshot(
            t_ns=middle,
            totals_uj=totals,
            faults=sum(p.faults for p in parts),
            notes=notes,
            spread_ns=last - middle,
        )

    def close(self) -> None:
        for m in self.meters:
            m.close()

    def describe(self) -> dict[str, object]:
        info = super().describe()
        info["meters"] = [m.describe() for m in self.meters]
        return info


def _frozen(meter: Meter, busy: Callable[[float], None]) -> list[str]:
    """The domains of `meter` that show no energy while a CPU is kept busy."""
    start = meter.snapshot()
    busy(FROZEN_PROBE_S)
    end = meter.snapshot()
    if end.faults != start.faults:
        return []  # a read that fails is reported by the windows, not taken for a frozen one
    return [
        d.name for d in meter.domains() if end.totals_uj.get(d.name) == start.totals_uj.get(d.name)
    ]


def open_meter(
    kind: str,
    *,
    powercap_root: Path = DEFAULT_ROOT,
    gpus: Sequence[str] | None = None,
    dram: bool = False,
    active_watts: float = DEFAULT_ACTIVE_WATTS,
    watts_per_core: float = DEFAULT_WATTS_PER_CORE,
    estimator_mode: str = "wall",
    nvml_module: Any = None,
    rapl_zones: str = "package",
    busy: Callable[[float], None] = spin,
) -> Meter:
    """The meter for `--energy KIND`; the caller must `close()` it (it may own threads).

    `busy` keeps a CPU busy while `auto` checks that RAPL counters move."""
    if kind not in KINDS:
        raise ConfigError(f"--energy {kind!r} is not one of {', '.join(KINDS)}")

    def rapl() -> Meter:
        return RaplMeter(Path(powercap_root), zones=rapl_zones, dram=dram)

    def nvml() -> Meter:
        return NvmlMeter(gpus, nvml_module=nvml_module)

    def estimator() -> Meter:
        return EstimatorMeter(
            mode=estimator_mode, active_watts=active_watts, watts_per_core=watts_per_core
        )

    if kind == "rapl":
        return rapl()
    if kind == "nvml":
        return nvml()
    if kind == "estimator":
        return estimator()

    measured: list[Meter] = []
    for name, opener in (("rapl", rapl), ("nvml", nvml)):
        try:
            meter = opener()
            frozen = _frozen(meter, busy) if name == "rapl" else []
            if frozen:
                meter.close()
                log.warning(
                    "energy: rapl skipped: %s did not advance over %.0f ms of a busy CPU "
                    "(a frozen counter would sign 0 J)",
                    ", ".join(frozen),
                    FROZEN_PROBE_S * 1000,
                )
                continue
            measured.append(meter)
        except MeterError as err:
            # A host that has the counters but cannot read them deserves a louder word.
            level = logging.WARNING if isinstance(err, MeterPermissionError) else logging.INFO
            log.log(level, "energy: %s skipped: %s", name, err.diagnostics())
        except BaseException:
            for m in measured:
                m.close()
            raise
    if not measured:
        log.warning(
            "energy: no measured source reads; estimating (a coefficient, not a measurement)"
        )
        return estimator()
    meter = measured[0] if len(measured) == 1 else CompositeMeter(measured)
    log.info("energy: metering %s (%s)", meter.source, ", ".join(d.name for d in meter.domains()))
    return meter
