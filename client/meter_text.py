"""The meter's status in words: (key, value) lines and one row per metered zone, for
the terminal's meter table and the report's meter section. Nested figures are
spelled out, never printed as dicts, and no host path is shown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jb_client.documents import MeterStatus

ZONE_COLUMNS = ("zone", "source", "range", "ceiling", "last read", "timing")


def _sections(status: MeterStatus) -> list[Mapping[str, Any]]:
    """The status and, for a combined meter, each of its parts, as the daemon sends them:
    what each part holds (`domains`, `rapl`, `nvml`) is the meter's own to say."""
    raw = status.to_dict()
    parts = raw.get("meters")
    return [raw, *(p for p in parts if isinstance(p, dict))] if isinstance(parts, list) else [raw]


def zone_rows(status: MeterStatus) -> list[dict[str, str]]:
    """One row per metered RAPL zone and GPU, keyed by `ZONE_COLUMNS`."""
    cal = status.calibration
    signed = cal.get("domains") if isinstance(cal, dict) else None
    signed = signed if isinstance(signed, dict) else {}
    nominal = {
        d.get("name"): d.get("update_us")
        for section in _sections(status)
        for d in section.get("domains") or []
        if isinstance(d, dict)
    }

    def timing(name: str) -> str:
        d = signed.get(name)
        if isinstance(d, dict) and d.get("update_us"):
            return (
                f"idle ± {d.get('timing_mw', 0)} mW, steps ≤ {d['update_us'] / 1000:g} ms "
                "(calibrated)"
            )
        period = nominal.get(name)
        return f"steps ~{period / 1000:g} ms (documented)" if period else "not calibrated"

    rows = []
    for section in _sections(status):
        rapl = section.get("rapl")
        for z in (rapl.get("zones") or []) if isinstance(rapl, dict) else []:
            if not isinstance(z, dict) or not z.get("selected"):
                continue
            name = str(z.get("domain") or z.get("name", "?"))
            top = z.get("max_energy_range_uj")
            rows.append(
                {
                    "zone": f"{name} ({z.get('id', '?')})",
                    "source": "rapl",
                    "range": f"{top / 1e6:,.1f} J" if top else "unknown",
                    "ceiling": f"{z.get('ceiling_w', '?'):g} W"
                    if isinstance(z.get("ceiling_w"), int | float)
                    else "?",
                    "last read": _last_read(z.get("last_read_uj"), "uJ", z.get("last_read_age_ms")),
                    "timing": timing(name),
                }
            )
        nvml = section.get("nvml")
        for g in (nvml.get("gpus") or []) if isinstance(nvml, dict) else []:
            if not isinstance(g, dict):
                continue
            name = str(g.get("domain", "?"))
            ceiling = g.get("ceiling_w")
            rows.append(
                {
                    "zone": f"{name} ({g.get('name', '?')})",
                    "source": "nvml" + ("" if g.get("energy_counter") else " power"),
                    "range": "no wrap" if g.get("energy_counter") else "sampled power",
                    "ceiling": f"{ceiling:g} W" if isinstance(ceiling, int | float) else "?",
                    "last read": _last_read(
                        g.get("last_read"),
                        str(g.get("last_read_unit", "")),
                        g.get("last_read_age_ms"),
                    ),
                    "timing": timing(name),
                }
            )
    return rows


def _last_read(value: Any, unit: str, age_ms: Any) -> str:
    if not isinstance(value, int | float):
        return "none yet"
    shown = {
        "uJ": f"{value / 1e6:,.3f} J",
        "mJ": f"{value / 1e3:,.3f} J",
        "mW": f"{value / 1e3:,.3f} W",
    }
    text = shown.get(unit, f"{value} {unit}")
    return f"{text}, {age_ms} ms ago" if isinstance(age_ms, int | float) else text


def meter_lines(status: MeterStatus, *, zones: bool = True) -> list[tuple[str, str]]:
    """(key, value) lines for `meter_table` and the report's meter section; with
    `zones`, each row of `zone_rows` as one more line (the table prints them as
    a table instead). No host path is shown."""
    more = status.extra  # what this meter says beyond the fields every meter has
    lines: list[tuple[str, str]] = []
    lines.append(
        (
            "source",
            f"{status.source}"
            + (" (measured)" if status.measured else " (an estimate, not a measurement)"),
        )
    )
    if "min_window_ms" in more:
        lines.append(("floor", f"windows under {more['min_window_ms']} ms are not reliable"))
    if "policy" in status:
        lines.append(("attribution", str(status.policy)))
    for d in status.domains or []:
        lines.append(
            (
                f"domain {d.get('name', '?')}",
                f"{d.get('kind', '?')} via {d.get('source', '?')}, resolution "
                f"{d.get('resolution_uj', '?')} uJ, floor {d.get('min_window_ms', '?')} ms",
            )
        )
    est = more.get("estimator")
    if isinstance(est, dict):
        lines.append(("estimator", f"{est.get('mode', '?')}, {est.get('watts', '?')} W"))
    cal = status.calibration
    if isinstance(cal, dict):
        lines += calibration_lines(cal)
    elif "calibration" in status:
        lines.append(("calibration", "none yet (marginal energy is gross energy)"))
    for section in _sections(status):
        for kind in ("rapl", "nvml"):
            part = section.get(kind)
            if isinstance(part, dict) and "interval_s" in part:
                lines.append((f"{kind} polling", f"every {part['interval_s']:g} s at most"))
        rapl = section.get("rapl")
        for z in (rapl.get("zones") or []) if isinstance(rapl, dict) else []:
            if isinstance(z, dict) and not z.get("selected"):
                lines.append(
                    (f"skipped {z.get('id', '?')}", f"{z.get('name', '?')}: {z.get('reason', '')}")
                )
    if zones:
        for row in zone_rows(status):
            lines.append(
                (f"zone {row['zone']}", "; ".join(f"{c} {row[c]}" for c in ZONE_COLUMNS[1:]))
            )
    known = {
        "source", "measured", "min_window_ms", "policy", "domains", "estimator", "calibration",
        "rapl", "nvml", "meters",
    }  # fmt: skip
    for key, value in more.items():
        if key not in known:
            lines.append((str(key), _compact_json(value)))
    return lines


def calibration_lines(cal: dict[str, Any]) -> list[tuple[str, str]]:
    seq = cal.get("seq")
    when = cal.get("time") or ""
    age = cal.get("age_s")
    head = f"ledger entry {seq}" if seq is not None else "calibration"
    head += f", {when}" if when else ""
    head += f" ({_age(age)} ago)" if isinstance(age, int | float) else ""
    seconds, source = cal.get("seconds", "?"), cal.get("source", "?")
    if seconds == 0:  # no domain is measured: an estimator has no idle draw to sample
        head += f", {source}: nothing measured, so no idle to sample"
    else:
        head += f", {seconds} s of {source}"
    lines = [("calibration", head)]
    for name, d in sorted((cal.get("domains") or {}).items()):
        if isinstance(d, dict):
            lines.append(
                (
                    f"idle {name}",
                    f"{d.get('idle_mw', 0) / 1000:.3f} W ± {d.get('stddev_mw', 0) / 1000:.3f} W"
                    f", timing ± {d.get('timing_mw', 0) / 1000:.3f} W",
                )
            )
    return lines


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def _compact_json(value: Any) -> str:
    import json

    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), default=str)
