"""RAPL energy read straight from Linux powercap sysfs.

Zone selection is where RAPL readers usually go wrong, so it is explicit and
explained (`plan_zones`, shown by `jouled meter probe`):

- top-level `package-N` zones are summed across sockets by default;
- `psys` (the whole platform, packages and DRAM included) is an alternative,
  selected with `zones="psys"`, never added to packages;
- `dram` subzones are outside the package and opt-in;
- `core` and `uncore` are inside the package and never added to it;
- `intel-rapl-mmio:N` re-exposes an MSR package zone: the MSR one is kept;
- zones are summed per socket by identity (the socket in the zone's name or
  its parent's); on multi-die parts every die of one socket can expose the
  same counter, and such zones of one socket whose offset stays constant over
  a short probe are read once. Zones of different sockets are never merged,
  whatever their values.

Counters wrap at `max_energy_range_uj`; the sampler reads often enough that at
most one wrap falls between reads while the zone stays under its *ceiling*, the
most power it can draw at all. Parts often declare only their base power (a
desktop's long-term 125 W with a short-term maximum of 0, while it runs at its
253 W PL2), so the ceiling is never below a floor per kind of zone that no
shipping part reaches (`KIND_FLOOR_W`), and rises above it when any of the
zone's own figures (every `constraint_*_max_power_uw`, every
`constraint_*_power_limit_uw`, `max_power_range_uw`) times `CONSTRAINT_MARGIN`
says more. A reading is judged impossible only against that ceiling over the
time between two reads. A counter whose range the ceiling crosses faster than
the sampler can read twice is refused at open, not metered into null windows.
Since CVE-2020-8694 `energy_uj` is readable
by root only; `deploy/99-jouled-powercap.rules` makes it group-readable.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from jouled.errors import ConfigError, MeterPermissionError, MeterUnavailableError
from jouled.meter.base import Domain
from jouled.meter.sampler import (
    MIN_INTERVAL_S,
    CounterChannel,
    SampledMeter,
    Sampler,
    poll_interval,
)

SOURCE = "rapl"
DEFAULT_ROOT = Path("/sys/class/powercap")
# A zone may briefly draw more than its declared figures (turbo above PL1, PL2
# above a stale max_power_uw): twice the largest is still a bound.
CONSTRAINT_MARGIN = 2.0
# The least ceiling per kind of zone, whatever the zone declares: above the peak
# of every shipping part of that kind (the largest server sockets are rated
# 500 W and peak near 600 W; a workstation platform's psys stays under 1.5 kW;
# a socket's full set of DIMMs under 400 W), and still thousands of times below
# what a misread wrap of the common 262 kJ range implies over a 1 s read gap.
KIND_FLOOR_W = {"package": 1000.0, "psys": 2000.0, "dram": 500.0}
OTHER_FLOOR_W = 1000.0
# Two reads per range-crossing at the sampler's fastest poll is the least that
# still sees every wrap.
MIN_READS_PER_WRAP = 2
MIRROR_PROBE_S = 0.1
# The common RAPL energy status unit is 2^-14 J; sysfs scales it away but the
# counter cannot show finer steps.
RESOLUTION_UJ = 61
# Intel and AMD update the energy status about every millisecond; calibration
# measures the real period from the counter's own steps.
UPDATE_US = 1000
MIN_WINDOW_MS = 10
# A RAPL counter updates about every millisecond: kept busy this long, a zone
# that is metered at all shows dozens of updates.
FROZEN_PROBE_S = 0.05
ZONE_CHOICES = ("package", "psys")

PERMISSION_HINT = (
    "energy_uj is root-only since CVE-2020-8694; install deploy/99-jouled-powercap.rules "
    "(a udev rule making it readable by the `jouled` group, then add the daemon's user to "
    "that group) or run jouled with CAP_DAC_READ_SEARCH"
)
MISSING_HINT = (
    "needs the intel_rapl powercap driver (Intel, or AMD on Linux >= 5.8); in a container, "
    "mount the host's /sys/class/powercap read-only and pass that path as the powercap root"
)

_ZONE_ID = re.compile(r"^intel-rapl(-mmio)?:(\d+)(?::(\d+))?$")

Reader = Callable[[Path], str]


def read_text(path: Path) -> str:
    # os.read on a fresh descriptor is ~3x cheaper than Path.read_text, and
    # sysfs regenerates the value on every open.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 64).decode("ascii")
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Zone:
    """One powercap zone directory."""

    id: str  # "intel-rapl:0", "intel-rapl:0:2", "intel-rapl-mmio:0"
    path: Path
    name: str  # the zone's name file: "package-0", "psys", "dram", "core", ...
    parent: str  # the parent zone's name for a subzone, "" for a top-level zone
    mmio: bool
    max_range_uj: int | None  # None: the wrap point is unknown
    # The largest power figure the zone declares (constraint maxima and limits,
    # max_power_range_uw); None: it declares none.
    max_power_uw: int | None = None

    @property
    def energy_path(self) -> Path:
        return self.path / "energy_uj"

    @property
    def floor_w(self) -> float:
        return KIND_FLOOR_W.get(self.kind, OTHER_FLOOR_W)

    @property
    def ceiling_w(self) -> float:
        """The most power this zone can draw (see the module docstring)."""
        declared = CONSTRAINT_MARGIN * self.max_power_uw / 1e6 if self.max_power_uw else 0.0
        return max(self.floor_w, declared)

    @property
    def ceiling_from(self) -> str:
        floor = f"the {self.floor_w:g} W floor for a {self.kind} zone"
        if not self.max_power_uw:
            return f"{floor} (the zone declares no power figure)"
        most = self.max_power_uw / 1e6
        declared = f"{CONSTRAINT_MARGIN:g} x the largest power it declares ({most:g} W)"
        if CONSTRAINT_MARGIN * self.max_power_uw / 1e6 > self.floor_w:
            return declared
        return f"{floor}, above {declared}"

    @property
    def kind(self) -> str:
        for kind in ("package", "psys", "dram", "core", "uncore"):
            if self.name == kind or self.name.startswith(f"{kind}-"):
                return kind
        return "other"


@dataclass(frozen=True)
class ZonePlan:
    """Whether a zone is metered, as which domain, and why."""

    zone: Zone
    domain: str
    selected: bool
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.zone.id,
            "path": str(self.zone.path),
            "name": self.zone.name,
            "kind": self.zone.kind,
            "domain": self.domain,
            "selected": self.selected,
            "reason": self.reason,
            "max_energy_range_uj": self.zone.max_range_uj,
            "ceiling_w": self.zone.ceiling_w,
            "ceiling_from": self.zone.ceiling_from,
        }


def _sort_key(zone_id: str) -> tuple[int, int, int]:
    m = _ZONE_ID.match(zone_id)
    assert m is not None
    return (1 if m.group(1) else 0, int(m.group(2)), int(m.group(3) or -1))


def discover(root: Path, reader: Reader = read_text) -> list[Zone]:
    """Every RAPL zone under `root`, MSR before MMIO, sockets in order.

    `/sys/class/powercap` lists subzones flat (as links) while the device tree
    nests them; both layouts are walked and each zone id is kept once.
    """
    found: dict[str, Path] = {}

    def walk(directory: Path, depth: int) -> None:
        try:
            entries = sorted(directory.iterdir())
        except OSError:
            return
        for entry in entries:
            if _ZONE_ID.match(entry.name) and entry.is_dir():
                found.setdefault(entry.name, entry)
                if depth < 2:
                    walk(entry, depth + 1)
            elif entry.name in ("intel-rapl", "intel-rapl-mmio") and depth == 0:
                walk(entry, depth + 1)

    walk(root, 0)
    names: dict[str, str] = {}
    for zone_id, path in found.items():
        try:
            names[zone_id] = reader(path / "name").strip()
        except (OSError, ValueError):
            names[zone_id] = ""
    zones = []
    for zone_id in sorted(found, key=_sort_key):
        path = found[zone_id]
        parent_id = zone_id.rsplit(":", 1)[0] if zone_id.count(":") == 2 else ""
        zones.append(
            Zone(
                id=zone_id,
                path=path,
                name=names[zone_id],
                parent=names.get(parent_id, "") if parent_id else "",
                mmio=zone_id.startswith("intel-rapl-mmio"),
                max_range_uj=_read_max(reader, path),
                max_power_uw=_read_max_power(reader, path),
            )
        )
    return zones


def _read_max(reader: Reader, path: Path) -> int | None:
    try:
        value = int(reader(path / "max_energy_range_uj").strip())
    except (OSError, ValueError):
        return None
    return value if value > 0 else None


_POWER_FILE = re.compile(
    r"^(constraint_\d+_max_power_uw|constraint_\d+_power_limit_uw|max_power_range_uw)$"
)


def _read_max_power(reader: Reader, path: Path) -> int | None:
    """The largest power any of the zone's figures declares: each constraint's
    maximum and limit (long term, short term, peak) and the zone's
    `max_power_range_uw`.

    Kernels and parts differ: some zones have no constraints, some report 0 or
    fail the read for a figure they do not implement; those say nothing.
    """
    try:
        names = sorted(e.name for e in path.iterdir() if _POWER_FILE.match(e.name))
    except OSError:
        return None
    values = []
    for name in names:
        try:
            values.append(int(reader(path / name).strip()))
        except (OSError, ValueError):
            continue
    best = max(values, default=0)
    return best if best > 0 else None


def check_wraps_visible(zone: Zone, ceiling_w: float) -> None:
    """Refuse a counter whose range `ceiling_w` crosses faster than the sampler can
    read it twice: every window would hold a fault and give no figure."""
    if zone.max_range_uj is None:
        return
    wrap_s = zone.max_range_uj / (ceiling_w * 1e6)
    if wrap_s < MIN_READS_PER_WRAP * MIN_INTERVAL_S:
        raise MeterUnavailableError(
            f"{zone.id} ({zone.name}): its {zone.max_range_uj / 1e6:g} J counter can wrap every "
            f"{wrap_s * 1000:.1f} ms at its {ceiling_w:g} W ceiling, and reads "
            f"{MIN_INTERVAL_S * 1000:g} ms apart cannot see every wrap",
            hint="meter this host with --energy estimator, or use psys if it has a larger range",
        )


def _domain_name(zone: Zone) -> str:
    if zone.parent:
        # dram under package-0 -> dram-0; under package-0-die-1 -> dram-0-die-1
        suffix = zone.parent.removeprefix("package")
        return f"{zone.name}{suffix}" if suffix else f"{zone.name}-{zone.id.split(':')[1]}"
    return zone.name or zone.id


def plan_zones(
    zones: Sequence[Zone], *, select: str = "package", dram: bool = False
) -> list[ZonePlan]:
    """Decide, without reading counters, which zones to meter and why."""
    if select not in ZONE_CHOICES:
        raise ConfigError(f"RAPL zones {select!r} is not one of {', '.join(ZONE_CHOICES)}")
    msr_names = {z.name for z in zones if not z.mmio and not z.parent}
    plans: list[ZonePlan] = []
    skipped_parent: dict[str, str] = {}
    for z in zones:
        domain = _domain_name(z)
        if z.mmio and not z.parent and z.name in msr_names:
            reason = f"duplicate of the MSR zone named {z.name} (the same counter read via MMIO)"
            skipped_parent[z.id] = reason
            plans.append(ZonePlan(z, domain, False, reason))
            continue
        parent_id = z.id.rsplit(":", 1)[0] if z.parent else ""
        if parent_id in skipped_parent:
            plans.append(ZonePlan(z, domain, False, skipped_parent[parent_id]))
            continue
        selected, reason = _choose(z, select=select, dram=dram)
        plans.append(ZonePlan(z, domain, selected, reason))
    return _unique_domains(plans)


def _choose(z: Zone, *, select: str, dram: bool) -> tuple[bool, str]:
    kind = z.kind
    if kind == "package" and not z.parent:
        if select == "psys":
            return False, "psys selected: package energy is already inside psys"
        return True, "top-level package zone (summed across sockets)"
    if kind == "psys" and not z.parent:
        if select == "psys":
            return True, "psys selected: the whole platform, instead of packages"
        return False, "psys is an alternative to package zones, never added (zones='psys')"
    if kind == "dram":
        if select == "psys":
            return False, "dram is already inside psys"
        if dram:
            return True, "dram opted in (outside the package)"
        return False, "dram is opt-in (dram=True)"
    if kind in ("core", "uncore"):
        return False, f"{kind} is inside its package zone, never added to it"
    return False, f"unrecognised zone name {z.name!r}"


def _unique_domains(plans: list[ZonePlan]) -> list[ZonePlan]:
    seen: set[str] = set()
    out = []
    for p in plans:
        domain = p.domain
        if p.selected and domain in seen:
            domain = f"{domain}@{p.zone.id}"
        if p.selected:
            seen.add(domain)
        out.append(replace(p, domain=domain))
    return out


def spin(seconds: float) -> None:
    """Keep this CPU busy for `seconds` (a load under which a counter must move)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def read_energy(reader: Reader, path: Path) -> int:
    """One counter read; a permission failure says how to fix it."""
    try:
        return int(reader(path).strip())
    except PermissionError as err:
        raise MeterPermissionError(
            f"cannot read {path}: permission denied", hint=PERMISSION_HINT
        ) from err


MIRROR_INTERVALS = 3


_SOCKET = re.compile(r"^package-(\d+)(?:-die-\d+)?$")


def socket_of(zone: Zone) -> str | None:
    """The socket a zone belongs to, from its own name or its parent's
    (`package-1`, `package-1-die-0`, a `dram` under either: "1"); None when the
    names do not say."""
    name = zone.parent if zone.parent else zone.name
    m = _SOCKET.match(name)
    return m.group(1) if m else None


def find_mirrors(
    plans: Sequence[ZonePlan],
    reader: Reader,
    *,
    probe_s: float = MIRROR_PROBE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> list[ZonePlan]:
    """Skip selected zones that mirror an earlier one of the same socket.

    Zones are summed per socket by their identity: two zones are only ever
    compared when they are the same kind of zone on the same socket (dies of
    one package, `package-0-die-0` and `package-0-die-1`, or a dram under
    each), never because their values agree: two sockets whose DRAM advances
    identically both count. Two such zones that are one counter exposed twice
    keep a constant offset from each other; summing them would multiply the
    energy by the die count. The zones are read one after another, so a
    counter update can land between the two reads at one read point: the
    probe reads several times and calls two advancing zones mirrors when most
    read points show the same offset. Idle zones (no advance) prove nothing
    and are kept.
    """
    chosen = [p for p in plans if p.selected]
    keys = [_twin_key(p) for p in chosen]
    if all(k is None or keys.count(k) < 2 for k in keys):
        return list(plans)
    reads = [{p.zone.id: _read_open(reader, p.zone) for p in chosen}]
    for _ in range(MIRROR_INTERVALS):
        sleep(probe_s / MIRROR_INTERVALS)
        reads.append({p.zone.id: _read_open(reader, p.zone) for p in chosen})

    def mirrors(p: ZonePlan, k: ZonePlan) -> bool:
        if _twin_key(p) is None or _twin_key(p) != _twin_key(k):
            return False
        if reads[-1][p.zone.id] == reads[0][p.zone.id]:
            return False
        offsets = Counter(r[p.zone.id] - r[k.zone.id] for r in reads)
        return offsets.most_common(1)[0][1] * 2 > len(reads)

    mirrored: dict[str, ZonePlan] = {}
    kept: list[ZonePlan] = []
    for p in chosen:
        twin = next((k for k in kept if mirrors(p, k)), None)
        if twin is None:
            kept.append(p)
            continue
        mirrored[p.zone.id] = replace(
            p,
            selected=False,
            reason=f"mirrors {twin.zone.name} ({twin.zone.id}) on the same socket: a constant "
            f"offset over a {probe_s * 1000:.0f} ms probe, one counter exposed per die",
        )
    return [mirrored.get(p.zone.id, p) for p in plans]


def _twin_key(p: ZonePlan) -> tuple[str, str, str] | None:
    """Zones that may be one counter exposed twice share this key: the same kind
    and name of zone on the same socket. None: nothing says which socket."""
    socket = socket_of(p.zone)
    if socket is None:
        return None
    return (p.zone.kind, socket, p.zone.name if p.zone.parent else "")


def _read_open(reader: Reader, zone: Zone) -> int:
    """A read while opening the meter: any failure means the meter cannot open."""
    try:
        return read_energy(reader, zone.energy_path)
    except MeterPermissionError:
        raise
    except (OSError, ValueError) as err:
        raise MeterUnavailableError(f"cannot read {zone.energy_path}: {err}") from err


class RaplMeter(SampledMeter):
    """Selected RAPL zones as domains, polled by a sampler thread.

    `ceiling_w` overrides every zone's own ceiling; `interval_s` overrides the
    poll interval derived from the counters' range and ceilings; `clock` and
    `sleep` are injectable for tests.
    """

    def __init__(
        self,
        root: Path = DEFAULT_ROOT,
        *,
        zones: str = "package",
        dram: bool = False,
        reader: Reader = read_text,
        ceiling_w: float | None = None,
        mirror_probe_s: float = MIRROR_PROBE_S,
        interval_s: float | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if zones not in ZONE_CHOICES:
            raise ConfigError(f"RAPL zones {zones!r} is not one of {', '.join(ZONE_CHOICES)}")
        self.root = Path(root)
        found = discover(self.root, reader)
        if not found:
            raise MeterUnavailableError(f"no RAPL zones under {self.root}", hint=MISSING_HINT)
        plans = plan_zones(found, select=zones, dram=dram)
        if not any(p.selected for p in plans):
            names = ", ".join(z.name or z.id for z in found)
            raise MeterUnavailableError(
                f"no RAPL {zones} zone under {self.root} (found: {names})", hint=MISSING_HINT
            )
        self.plans = find_mirrors(plans, reader, probe_s=mirror_probe_s, sleep=sleep)
        selected = [p for p in self.plans if p.selected]
        # Every selected zone must read once before the meter claims it.
        for p in selected:
            _read_open(reader, p.zone)
        self._domains = tuple(
            Domain(
                name=p.domain,
                source=SOURCE,
                kind=p.zone.kind,
                resolution_uj=RESOLUTION_UJ,
                min_window_ms=MIN_WINDOW_MS,
                update_us=UPDATE_US,
            )
            for p in selected
        )
        self._ceiling_given = ceiling_w is not None
        self.ceilings = {
            p.zone.id: p.zone.ceiling_w if ceiling_w is None else ceiling_w for p in selected
        }
        for p in selected:
            check_wraps_visible(p.zone, self.ceilings[p.zone.id])
        channels = [
            CounterChannel(
                p.domain,
                _energy_reader(reader, p.zone.energy_path),
                ceiling_w=self.ceilings[p.zone.id],
                modulus=p.zone.max_range_uj + 1 if p.zone.max_range_uj else None,
                backwards="went backwards and max_energy_range_uj is missing, so a wrap "
                "cannot be told from a reset",
            )
            for p in selected
        ]
        if interval_s is None:
            interval_s = min(
                poll_interval(p.zone.max_range_uj, self.ceilings[p.zone.id]) for p in selected
            )
        self._sampler = Sampler(channels, interval_s=interval_s, clock=clock, name="jouled-rapl")

    @property
    def source(self) -> str:
        return SOURCE

    def describe(self) -> dict[str, object]:
        info = super().describe()
        last = self._sampler.last_reads()
        info["rapl"] = {
            "root": str(self.root),
            "interval_s": self.interval_s,
            "zones": [
                {
                    **p.to_dict(),
                    **self._ceiling(p.zone),
                    **(_last_read(last.get(p.domain)) if p.selected else {}),
                }
                for p in self.plans
            ],
        }
        return info

    def _ceiling(self, zone: Zone) -> dict[str, object]:
        if zone.id in self.ceilings and self._ceiling_given:
            return {"ceiling_w": self.ceilings[zone.id], "ceiling_from": "set when opened"}
        return {}


def _last_read(last: tuple[int, int] | None) -> dict[str, object]:
    if last is None:
        return {}
    return {"last_read_uj": last[0], "last_read_age_ms": last[1] // 1_000_000}


def _energy_reader(reader: Reader, path: Path) -> Callable[[], int]:
    # Permission errors after open are faults like any other failed read.
    return lambda: int(reader(path).strip())
