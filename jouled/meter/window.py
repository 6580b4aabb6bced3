"""From two snapshots to the energy of a phase: gross, idle, marginal, reliable.

marginal = gross - idle power x wall time, clamped at zero (and flagged). A
window is `reliable: false` when it is shorter than the meter's floor, when a
read failed inside it, or when its marginal energy is within the idle noise:
the phase's grade stands, its joules are not comparable. An invalid window (a
read failed or was implausible inside it, or a measured counter did not
advance at all while the phase kept a CPU busy: a frozen counter) has no
figure at all: gross, idle, marginal and every domain's figure are null, never
zero.

Time: `wall_us` is the window in microseconds (`wall_ms`, whole milliseconds
rounded down, stays for readers of older entries); `edge_us` bounds how far
the time the energy covers can differ from wall_us: how far the counter reads
may sit from the window's two edges in total, plus the longest update period
of its domains (a counter shows energy in steps, so each read can miss up to
one period's energy, and the two edges' misses differ by at most one period),
as the calibration measured it or, before one, as the hardware documents it.
The energy covers wall_us +- edge_us of time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from jouled.meter.base import Calibration, Domain, Snapshot

# A window's marginal energy must exceed this many standard deviations of idle
# energy over the same wall time before it counts as signal.
NOISE_SIGMAS = 2

EXCLUSIVE = "exclusive"
CPU_SHARE = "cpu-share"


@dataclass(frozen=True)
class PhaseEnergy:
    gross_mj: int | None  # None when the window is invalid: a failed read is never zero
    idle_mj: int | None
    marginal_mj: int | None
    source: str
    reliable: bool
    attribution: str
    wall_ms: int  # rounded down; wall_us is the precise figure
    # gross mJ per domain; None for every domain of an invalid window
    domains: dict[str, int | None] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()  # why a window is unreliable or clamped
    valid: bool = True  # False: a read failed; the figures are null, not zero
    calibration_seq: int | None = None
    wall_us: int = 0
    edge_us: int = 0

    def to_wire(self) -> dict[str, object]:
        """The per-phase object of a result entry (docs/ledger.md, `result`)."""
        wire: dict[str, object] = {
            "gross_mj": self.gross_mj,
            "idle_mj": self.idle_mj,
            "marginal_mj": self.marginal_mj,
            "source": self.source,
            "reliable": self.reliable,
            "attribution": self.attribution,
            "wall_ms": self.wall_ms,
            "wall_us": self.wall_us,
            "edge_us": self.edge_us,
            "valid": self.valid,
            "domains": dict(self.domains),
        }
        if self.reasons:
            wire["reasons"] = list(self.reasons)
        if self.calibration_seq is not None:
            wire["calibration_seq"] = self.calibration_seq
        return wire


def phase_energy(
    source: str,
    domains: Sequence[Domain],
    start: Snapshot,
    end: Snapshot,
    calibration: Calibration | None,
    *,
    share: float | None = None,
    busy_ns: int | None = None,
    cpu_uncounted: str = "",
) -> PhaseEnergy:
    """Energy of the window [start, end].

    `share` (0..1) apportions the window's marginal energy to one attempt by
    its CPU time when phases run concurrently (attribution "cpu-share").
    `busy_ns` is the CPU time the phase's processes used (None: not known); a
    measured domain that shows no energy at all over a window at least its
    floor long while that is positive is frozen, and the window invalid.
    `cpu_uncounted` says why CPU the phase used was not counted: with a `share`
    the window's whole energy is given instead, and neither that nor an estimate
    by CPU time is reliable.
    """
    wall_ns = max(0, end.t_ns - start.t_ns)
    wall_ms = wall_ns // 1_000_000
    wall_us = (wall_ns + 500) // 1000
    cal_domains = calibration.domains if calibration else {}
    # Each domain's update period: as calibration measured it, else as documented.
    period_us = {
        d.name: cal_domains[d.name].update_us
        if d.name in cal_domains and cal_domains[d.name].update_us
        else d.update_us
        for d in domains
    }
    # rounded up: a bound
    edge_us = -(-(start.spread_ns + end.spread_ns) // 1000) + max(period_us.values(), default=0)
    reasons: list[str] = []

    gross_uj: dict[str, int] = {}
    for d in domains:
        a, b = start.totals_uj.get(d.name), end.totals_uj.get(d.name)
        if a is None or b is None:
            reasons.append(f"{d.name}: no reading")
            continue
        if b < a:
            reasons.append(f"{d.name}: counter went backwards")
            continue
        gross_uj[d.name] = b - a
        # A window that spans two of the counter's periods (and its floor) must see a step.
        spans_ns = max(d.min_window_ms * 1_000_000, 2 * period_us[d.name] * 1000, 1)
        if b == a and d.measured and busy_ns and wall_ns >= spans_ns:
            reasons.append(
                f"{d.name}: the counter did not advance in {wall_ns / 1e6:.0f} ms while the "
                f"phase used {busy_ns / 1e6:.0f} ms of CPU: a frozen counter, not 0 J"
            )
    if end.faults != start.faults:
        reasons.append(f"{end.faults - start.faults} failed read(s) inside the window")
    for name, note in end.notes.items():
        if start.notes.get(name) != note:
            reasons.append(f"{name}: {note}")
    valid = not reasons

    # idle_mw x ns / 1e9 = mJ
    idle_mj = sum(
        cal_domains[n].idle_mw * wall_ns // 1_000_000_000 for n in gross_uj if n in cal_domains
    )
    noise_mj = sum(
        NOISE_SIGMAS * cal_domains[n].stddev_mw * wall_ns // 1_000_000_000
        for n in gross_uj
        if n in cal_domains
    )
    gross_mj = sum(gross_uj.values()) // 1000
    marginal_mj = gross_mj - idle_mj
    if marginal_mj < 0:
        if valid:
            reasons.append("marginal below idle, clamped to 0")
        marginal_mj = 0

    min_window_ms = max((d.min_window_ms for d in domains), default=0)
    reliable = valid
    if wall_ns < min_window_ms * 1_000_000:
        reliable = False
        reasons.append(f"window {wall_us / 1000:g} ms is under the {min_window_ms} ms floor")
    measured = any(d.measured for d in domains)
    if valid and measured and cal_domains and marginal_mj <= noise_mj:
        reliable = False
        reasons.append(f"marginal {marginal_mj} mJ is within idle noise ({noise_mj} mJ)")

    attribution = EXCLUSIVE
    if cpu_uncounted and share is not None:
        reliable = False
        reasons.append(f"{cpu_uncounted}: its share is not known, this is the whole window's")
        share = 1.0
    elif cpu_uncounted and any(d.kind == "cpu-time" for d in domains):
        reliable = False
        reasons.append(f"{cpu_uncounted}: the estimate by CPU time leaves it out")
    domain_mj = {name: uj // 1000 for name, uj in gross_uj.items()}
    if share is not None:
        share = min(1.0, max(0.0, share))
        attribution = CPU_SHARE
        gross_mj = round(gross_mj * share)
        idle_mj = round(idle_mj * share)
        marginal_mj = round(marginal_mj * share)
        # Each domain's gross is the phase's too: its share, as the total is.
        domain_mj = {name: round(mj * share) for name, mj in domain_mj.items()}

    return PhaseEnergy(
        gross_mj=gross_mj if valid else None,
        idle_mj=idle_mj if valid else None,
        marginal_mj=marginal_mj if valid else None,
        source=source,
        reliable=reliable,
        attribution=attribution,
        wall_ms=wall_ms,
        domains={
            d.name: domain_mj[d.name] if valid else None
            for d in sorted(domains, key=lambda d: d.name)
        },
        reasons=tuple(reasons),
        calibration_seq=calibration.seq if calibration else None,
        valid=valid,
        wall_us=wall_us,
        edge_us=edge_us,
    )
