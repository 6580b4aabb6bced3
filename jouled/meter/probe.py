"""`jouled meter probe`: what a new host offers, what would be metered, and why.

Pure data for the CLI to print: every RAPL zone with the reason it is selected
or skipped and whether it reads (with the fix when it does not) and advances
while a CPU is kept busy (a frozen counter would sign 0 J), every GPU
NVML sees with whether its energy counter works, and what `--energy auto`
would choose from them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jouled.errors import JouledError, MeterError, MeterPermissionError
from jouled.meter.nvml import COUNTER_PROBE_S, init, inspect_gpus, load_nvml, shutdown
from jouled.meter.rapl import (
    DEFAULT_ROOT,
    FROZEN_PROBE_S,
    MIRROR_PROBE_S,
    MISSING_HINT,
    Reader,
    ZonePlan,
    check_wraps_visible,
    discover,
    find_mirrors,
    plan_zones,
    read_energy,
    read_text,
    spin,
)


def probe(
    powercap_root: Path = DEFAULT_ROOT,
    nvml_module: Any = None,
    *,
    gpus: Sequence[str] | None = None,
    dram: bool = False,
    zones: str = "package",
    reader: Reader = read_text,
    mirror_probe_s: float = MIRROR_PROBE_S,
    sleep: Callable[[float], None] = time.sleep,
    busy: Callable[[float], None] | None = None,
) -> dict[str, object]:
    rapl = probe_rapl(
        Path(powercap_root),
        dram=dram,
        zones=zones,
        reader=reader,
        mirror_probe_s=mirror_probe_s,
        sleep=sleep,
        busy=busy or spin,
    )
    nvml = probe_nvml(nvml_module, gpus=gpus, sleep=sleep)
    return {"rapl": rapl, "nvml": nvml, "auto": _auto(rapl, nvml)}


def probe_rapl(
    root: Path,
    *,
    dram: bool = False,
    zones: str = "package",
    reader: Reader = read_text,
    mirror_probe_s: float = MIRROR_PROBE_S,
    sleep: Callable[[float], None] = time.sleep,
    busy: Callable[[float], None] = spin,
) -> dict[str, object]:
    report: dict[str, object] = {"root": str(root), "available": False, "zones": [], "selected": []}
    found = discover(root, reader)
    if not found:
        report.update(problem=f"no RAPL zones under {root}", fix=MISSING_HINT)
        return report
    plans = plan_zones(found, select=zones, dram=dram)

    problems: dict[str, str] = {}
    fixes: dict[str, str] = {}
    for p in plans:
        try:
            read_energy(reader, p.zone.energy_path)
        except MeterPermissionError as err:
            problems[p.zone.id], fixes[p.zone.id] = err.message, err.hint
        except (OSError, ValueError) as err:
            problems[p.zone.id] = f"cannot read {p.zone.energy_path}: {err}"

    for p in plans:
        if p.selected and p.zone.id not in problems:
            try:
                check_wraps_visible(p.zone, p.zone.ceiling_w)
            except MeterError as err:
                problems[p.zone.id], fixes[p.zone.id] = err.message, err.hint
    readable = [p for p in plans if p.selected and p.zone.id not in problems]
    problems.update(_frozen(readable, reader, busy))
    readable = [p for p in readable if p.zone.id not in problems]
    try:
        checked = {
            p.zone.id: p
            for p in find_mirrors(readable, reader, probe_s=mirror_probe_s, sleep=sleep)
        }
    except MeterError as err:
        problems.setdefault("mirror probe", err.message)
        checked = {}
    plans = [checked.get(p.zone.id, p) for p in plans]

    report["zones"] = [_zone(p, problems.get(p.zone.id), fixes.get(p.zone.id)) for p in plans]
    selected = [p for p in plans if p.selected]
    report["selected"] = [p.domain for p in selected]
    blocking = [p.zone.id for p in selected if p.zone.id in problems]
    if not selected:
        report.update(problem=f"no RAPL {zones} zone to meter", fix=MISSING_HINT)
    elif blocking:
        first = blocking[0]
        report.update(problem=problems[first], fix=fixes.get(first, ""))
    else:
        report["available"] = True
    return report


def _frozen(
    plans: Sequence[ZonePlan], reader: Reader, busy: Callable[[float], None]
) -> dict[str, str]:
    """Zones whose counter does not move while this process keeps a CPU busy."""
    if not plans:
        return {}
    try:
        before = {p.zone.id: read_energy(reader, p.zone.energy_path) for p in plans}
        busy(FROZEN_PROBE_S)
        after = {p.zone.id: read_energy(reader, p.zone.energy_path) for p in plans}
    except (JouledError, OSError, ValueError):
        return {}  # a failing read is reported where it fails, by the meter
    return {
        zone_id: f"the counter did not advance over {FROZEN_PROBE_S * 1000:.0f} ms of a busy "
        "CPU: it is frozen (an emulated or disabled RAPL), and every window would be null"
        for zone_id, value in after.items()
        if value == before[zone_id]
    }


def _zone(p: ZonePlan, problem: str | None, fix: str | None) -> dict[str, object]:
    entry = p.to_dict()
    entry["readable"] = problem is None
    if problem is not None:
        entry["problem"] = problem
    if fix:
        entry["fix"] = fix
    entry["wrap"] = (
        "handled (max_energy_range_uj)"
        if p.zone.max_range_uj
        else "unknown: no max_energy_range_uj, a backwards step is a fault"
    )
    return entry


def probe_nvml(
    nvml_module: Any = None,
    *,
    gpus: Sequence[str] | None = None,
    probe_s: float = COUNTER_PROBE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, object]:
    report: dict[str, object] = {"available": False, "gpus": [], "selected": []}
    try:
        nvml = load_nvml(nvml_module)
        init(nvml)
    except JouledError as err:
        report.update(problem=err.message, fix=err.hint)
        return report
    try:
        found = inspect_gpus(nvml, gpus, probe_s=probe_s, sleep=sleep)
    except Exception as err:
        message = err.message if isinstance(err, JouledError) else str(err)
        report.update(problem=f"NVML: {message}")
        return report
    finally:
        shutdown(nvml)

    entries = []
    for g in found:
        entry = g.to_dict()
        entry["selected"] = not g.mig
        entry["reason"] = "MIG mode: MIG slices cannot be metered separately" if g.mig else g.how
        entries.append(entry)
    report["gpus"] = entries
    mig = [g for g in found if g.mig]
    if not found:
        report["problem"] = "NVML found no NVIDIA GPU"
    elif mig:
        report["problem"] = (
            f"GPU {mig[0].index} is in MIG mode: MIG slices cannot be metered separately"
        )
        report["fix"] = f"disable MIG (nvidia-smi -i {mig[0].index} -mig 0) or select other GPUs"
    else:
        report["available"] = True
        report["selected"] = [g.domain for g in found]
    return report


def _auto(rapl: dict[str, object], nvml: dict[str, object]) -> dict[str, object]:
    sources: list[str] = []
    domains: list[str] = []
    for name, section in (("rapl", rapl), ("nvml", nvml)):
        if section.get("available"):
            sources.append(name)
            chosen = section.get("selected")
            assert isinstance(chosen, list)
            domains.extend(str(d) for d in chosen)
    if not sources:
        return {
            "source": "estimator",
            "domains": ["estimated"],
            "why": "no measured source reads; figures would be estimates, not measurements",
        }
    return {
        "source": "+".join(sources),
        "domains": domains,
        "why": "every measured domain that reads, summed",
    }
