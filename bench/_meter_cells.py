"""The fault cells (4): the cases where a meter can sign a wrong figure or none at all."""

from __future__ import annotations

import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _meter_setup import REPO, log

from jouled.meter.rapl import RaplMeter, read_text
from jouled.meter.window import phase_energy
from tests.meter.fakes import FakeClock, FakePowercap, LiveCounters

TOP_UJ = 262_143_328_850  # the common package range: 2^32 units of 61 uJ


@dataclass
class Cell:
    name: str
    result: str


class _Clock:
    """Fake time for the scripted cells: moves only when told to, counters with it."""

    def __init__(self) -> None:
        self.now_ns = 1_000_000_000

    def __call__(self) -> int:
        return self.now_ns


def _window_text(pe: Any, truth_mj: float | None) -> str:
    wire = pe.to_wire()
    if not pe.valid:
        why = pe.reasons[-1] if pe.reasons else "no reason given"  # the note says why
        why = why if len(why) <= 110 else why[:107] + "..."
        return f"null (gross {wire['gross_mj']}, domains {wire['domains']}): {why}"
    err = "" if truth_mj is None else f", error {100 * (pe.gross_mj - truth_mj) / truth_mj:+.1f} %"
    return f"valid, reliable={pe.reliable}, {pe.gross_mj} mJ{err}"


def cell_small_counter(tmp: Path) -> Cell:
    """50 J range at 30 W, no constraint files, the sampler thread in real time."""
    from tests.meter.fakes import LiveCounters

    fake = FakePowercap(tmp / "cell-small")
    fake.package(0, max_uj=50_000_000)
    t0 = time.monotonic_ns()
    name = "50 J counter at 30 W: 10 windows of 0.5 s"
    with LiveCounters(fake, {"intel-rapl:0": lambda t: 30 * (t - t0) // 1000}):
        try:
            meter = RaplMeter(fake.root)
        except Exception as err:
            return Cell(name, f"refused at open: {err}")
        with meter as m:
            errs, invalid = [], 0
            for _ in range(10):
                a = m.snapshot()
                time.sleep(0.5)
                b = m.snapshot()
                pe = phase_energy(m.source, m.domains(), a, b, None)
                if not pe.valid or pe.gross_mj is None:
                    invalid += 1
                    continue
                truth = 30 * (b.t_ns - a.t_ns) / 1e6
                errs.append(100 * abs(pe.gross_mj - truth) / truth)
    worst = f", worst error {max(errs):.2f} %" if errs else ""
    return Cell(name, f"{invalid} of 10 windows null{worst}")


def cell_unreadable(tmp: Path) -> Cell:
    fake = FakePowercap(tmp / "cell-unreadable")
    fake.package(0)
    fake.package(1, energy_uj=5_000_000)
    denied = [False]

    def reader(path: Path) -> str:
        if denied[0] and path.name == "energy_uj" and path.parent.name == "intel-rapl:0":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    clock = _Clock()
    with RaplMeter(fake.root, reader=reader, clock=clock, interval_s=3600.0) as m:
        denied[0] = True
        m.snapshot()
        a = m.snapshot()
        clock.now_ns += 1_000_000_000
        fake.add("intel-rapl:1", 20_000_000)
        b = m.snapshot()
    pe = phase_energy(m.source, m.domains(), a, b, None)
    return Cell("package-0 unreadable for the whole window", _window_text(pe, None))


def _scripted(
    tmp: Path, tag: str, max_uj: int, start_uj: int, poll_s: float, polls: int, glitch: Any
) -> Any:
    """30 W through `polls` reads `poll_s` apart; `glitch(fake)` runs before the middle one."""
    fake = FakePowercap(tmp / f"cell-{tag}")
    fake.package(0, energy_uj=start_uj, max_uj=max_uj)
    clock = _Clock()
    with RaplMeter(fake.root, clock=clock, interval_s=3600.0) as m:
        for _ in range(4):  # the counter's recent power is known
            clock.now_ns += round(poll_s * 1e9)
            fake.add("intel-rapl:0", round(30 * poll_s * 1e6))
            m.snapshot()
        a = m.snapshot()
        for k in range(polls):
            clock.now_ns += round(poll_s * 1e9)
            fake.add("intel-rapl:0", round(30 * poll_s * 1e6))
            if k == polls // 2:
                glitch(fake)
            m.snapshot()
        b = m.snapshot()
    return phase_energy(m.source, m.domains(), a, b, None), 30 * poll_s * polls * 1000


def cell_drop(tmp: Path) -> Cell:
    pe, truth = _scripted(
        tmp, "drop", 55_000_000, 20_000_000, 0.01, 50, lambda f: f.add("intel-rapl:0", -(10**7))
    )
    return Cell(
        "55 J counter at 30 W, 10 ms reads, a 10 J drop in a 0.5 s window", _window_text(pe, truth)
    )


def cell_reset(tmp: Path) -> Cell:
    top = 262_143_328_850
    pe, truth = _scripted(
        tmp, "reset", top, top - 1_000_000_000, 1.0, 5, lambda f: f.set("intel-rapl:0", 0)
    )
    return Cell(
        "262 kJ counter at 30 W, 1 s reads, reset to 0 from 1 kJ below the top, 5 s window",
        _window_text(pe, truth),
    )


_SERVE = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tests.meter.fakes import FakePowercap, LiveCounters
fake = FakePowercap(Path(sys.argv[2]))
fake.package(0, max_uj=10**15)
t0 = int(sys.argv[3])
with LiveCounters(fake, {"intel-rapl:0": lambda t: 200 * (t - t0) // 1000}):
    print("ready", flush=True)
    sys.stdin.read()
"""


def cell_busy_thread(tmp: Path, windows: int = 20) -> Cell:
    """200 W produced at each read by another process; a thread in the meter's process
    spins the whole time. Error of each 0.5 s window against 200 W x its wall time."""
    import subprocess

    t0 = time.monotonic_ns()
    root = tmp / "cell-busy"
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(REPO), str(root), str(t0)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    busy = threading.Thread(target=spin, daemon=True)
    errs: list[float] = []
    inside = 0  # windows whose error is within the edges they state (a tree that states them)
    try:
        with RaplMeter(root) as m:
            busy.start()
            for _ in range(windows):
                a = m.snapshot()
                time.sleep(0.5)
                b = m.snapshot()
                pe = phase_energy(m.source, m.domains(), a, b, None)
                if pe.valid:
                    # uJ over W x ns / 1000
                    got = b.totals_uj[m.domains()[0].name] - a.totals_uj[m.domains()[0].name]
                    truth = 200 * (b.t_ns - a.t_ns) / 1000
                    errs.append(100 * (got - truth) / truth)
                    inside += abs(got - truth) <= 200 * getattr(pe, "edge_us", -1)
    finally:
        stop.set()
        server.communicate("", timeout=10)
    abs_errs = [abs(e) for e in errs]
    return Cell(
        f"0.5 s windows at 200 W with a busy thread ({windows} windows)",
        f"|error| median {statistics.median(abs_errs):.2f} %, max {max(abs_errs):.2f} %; "
        f"{inside} of {len(errs)} within their stated edges"
        if errs
        else "no valid window",
    )


def _scripted_zone(
    tmp: Path,
    tag: str,
    watts: float,
    polls: int,
    glitch: Any = None,
    *,
    start_uj: int = 5_000_000_000,
    max_uj: int = TOP_UJ,
    poll_s: float = 1.0,
    **zone: Any,
) -> tuple[Any, float, Any]:
    """`watts` through `polls` reads `poll_s` apart in fake time, after four reads
    that show the counter's power; `glitch(fake)` runs before the middle read.
    Returns the window, its truth in mJ and the meter's description."""
    fake = FakePowercap(tmp / f"cell-{tag}")
    fake.package(0, energy_uj=start_uj, max_uj=max_uj, **zone)
    clock = _Clock()
    with RaplMeter(fake.root, clock=clock, interval_s=3600.0) as m:
        step = round(watts * poll_s * 1e6)
        for _ in range(4):
            clock.now_ns += round(poll_s * 1e9)
            fake.add("intel-rapl:0", step)
            m.snapshot()
        a = m.snapshot()
        for k in range(polls):
            clock.now_ns += round(poll_s * 1e9)
            fake.add("intel-rapl:0", step)
            if glitch is not None and k == polls // 2:
                glitch(fake)
            m.snapshot()
        b = m.snapshot()
        info = m.describe()
    return phase_energy(m.source, m.domains(), a, b, None), watts * poll_s * polls * 1000, info


def _ceiling_text(info: Any) -> str:
    zone = info["rapl"]["zones"][0]
    return f"ceiling {zone['ceiling_w']:g} W"


def cell_desktop_turbo(tmp: Path) -> Cell:
    pe, truth, info = _scripted_zone(
        tmp,
        "desktop",
        253.0,
        5,
        max_power_uw=(125_000_000, 0),
        power_limit_uw=(125_000_000, 253_000_000),
    )
    return Cell(
        "desktop part (PBP 125 W, PL2 253 W; max_power_uw 125 W / 0) at 253 W, 1 s reads, 5 s",
        f"{_window_text(pe, truth)}; {_ceiling_text(info)}",
    )


def cell_laptop_turbo(tmp: Path) -> Cell:
    pe, truth, info = _scripted_zone(tmp, "laptop", 60.0, 5, max_power_uw=(28_000_000, 0))
    return Cell(
        "28 W laptop part (max_power_uw 28 W / 0) at 60 W, 1 s reads, 5 s window",
        f"{_window_text(pe, truth)}; {_ceiling_text(info)}",
    )


def cell_frozen(tmp: Path) -> Cell:
    fake = FakePowercap(tmp / "cell-frozen")
    fake.package(0, energy_uj=7_000_000)
    clock = _Clock()
    with RaplMeter(fake.root, clock=clock, interval_s=3600.0) as m:
        a = m.snapshot()
        clock.now_ns += 5_000_000_000
        b = m.snapshot()
    try:
        pe = phase_energy(m.source, m.domains(), a, b, None, busy_ns=3_000_000_000)
    except TypeError:  # a tree that cannot be told the phase was busy
        pe = phase_energy(m.source, m.domains(), a, b, None)
    return Cell(
        "frozen counter, 5 s window while the phase used 3 s of CPU", _window_text(pe, None)
    )


def cell_step_back_scripted(tmp: Path) -> Cell:
    pe, truth, _ = _scripted_zone(
        tmp, "back", 30.0, 5, lambda f: f.add("intel-rapl:0", -10_000_000)
    )
    return Cell(
        "262 kJ counter at 30 W, reads 1 s apart (no sampler thread), a 10 J step back, 5 s",
        _window_text(pe, truth),
    )


def cell_step_back_live(tmp: Path) -> Cell:
    """The sampler thread in real time; the counter is produced at each read."""
    fake = FakePowercap(tmp / "cell-back-live")
    fake.package(0)
    t0 = time.monotonic_ns()
    back_at: list[int] = []

    def counter(t: int) -> int:
        back = 10_000_000 if back_at and t >= back_at[0] else 0
        return 5_000_000_000 + 30 * (t - t0) // 1000 - back

    with LiveCounters(fake, {"intel-rapl:0": counter}), RaplMeter(fake.root) as m:
        a = m.snapshot()
        time.sleep(0.5)
        back_at.append(time.monotonic_ns())
        time.sleep(1.5)
        b = m.snapshot()
    pe = phase_energy(m.source, m.domains(), a, b, None)
    truth = 30 * (b.t_ns - a.t_ns) / 1e6
    return Cell(
        "262 kJ counter at 30 W, the sampler thread in real time, a 10 J step back, 2 s window",
        _window_text(pe, truth),
    )


def cell_reset_near(tmp: Path, below_j: int) -> Cell:
    # The reset happens at the middle read, `below_j` below the top at the read before.
    start = TOP_UJ - below_j * 1_000_000 - 6 * 30_000_000
    pe, truth, _ = _scripted_zone(
        tmp, f"reset-{below_j}", 30.0, 5, lambda f: f.set("intel-rapl:0", 0), start_uj=start
    )
    return Cell(
        f"262 kJ counter at 30 W, 1 s reads, reset to 0 from {below_j} J below the top, 5 s",
        _window_text(pe, truth),
    )


def cell_wrap_before_close(tmp: Path) -> Cell:
    # 30 J a read: the counter crosses its top 20 ms before the window's last read.
    start = TOP_UJ + 1 - 9 * 30_000_000 + 600_000
    pe, truth, _ = _scripted_zone(tmp, "wrap-close", 30.0, 5, start_uj=start)
    return Cell(
        "262 kJ counter at 30 W, 1 s reads, a wrap 20 ms before the close", _window_text(pe, truth)
    )


def cell_identical_dram(tmp: Path) -> Cell:
    fake = FakePowercap(tmp / "cell-dram")
    for n in (0, 1):
        fake.package(n, energy_uj=1_000_000 * (n + 1))
        fake.subzone(f"intel-rapl:{n}", 0, "dram", energy_uj=3_000_000 * (n + 1))
    clock = FakeClock()
    watts = {
        "intel-rapl:0": 50.0,
        "intel-rapl:1": 50.0,
        "intel-rapl:0:0": 6.0,
        "intel-rapl:1:0": 6.0,
    }
    fake.drive(clock, watts)
    with RaplMeter(
        fake.root, dram=True, clock=clock, sleep=clock.sleep, interval_s=3600.0, mirror_probe_s=0.05
    ) as m:
        a = m.snapshot()
        clock.sleep(1.0)
        b = m.snapshot()
    pe = phase_energy(m.source, m.domains(), a, b, None)
    return Cell(
        "two sockets, packages 50 W and DRAM 6 W each, advancing identically, 1 s window",
        f"{_window_text(pe, sum(watts.values()) * 1000)}; domains {sorted(pe.domains)}",
    )


def cell_stepped_edges(tmp: Path) -> Cell:
    from jouled.meter.calibration import calibrate

    fake = FakePowercap(tmp / "cell-stepped")
    fake.package(0)
    clock = FakeClock()
    elapsed = [0]

    def advance(seconds: float) -> None:
        elapsed[0] += round(seconds * 1e9)
        fake.set("intel-rapl:0", elapsed[0] // 5_000_000 * 5_000_000 * 40 // 1000)

    clock.on_advance(advance)
    outside, edges, errs = 0, [], []
    with RaplMeter(fake.root, clock=clock, sleep=clock.sleep, interval_s=3600.0) as m:
        cal = calibrate(m, 1.0, interval_s=0.1, sleep=clock.sleep)
        for k in range(20):
            clock.sleep(0.0007 * (k + 1))
            a = m.snapshot()
            clock.sleep(0.0503)
            b = m.snapshot()
            pe = phase_energy(m.source, m.domains(), a, b, cal)
            if pe.gross_mj is None:  # a null window claims nothing to be outside of
                continue
            err_uj = abs(pe.gross_mj * 1000 - 40 * pe.wall_us)
            errs.append(err_uj / (40 * pe.wall_us) * 100)
            edges.append(pe.edge_us)
            outside += err_uj > 40 * pe.edge_us + 1000
    period = getattr(cal.domains["package-0"], "update_us", None)
    return Cell(
        "40 W shown in 5 ms steps: 20 windows of 50.3 ms after a 1 s calibration",
        f"{outside} of 20 outside power x (wall ± edge); |error| median "
        f"{statistics.median(errs):.2f} %, max {max(errs):.2f} %; edge_us median "
        f"{statistics.median(edges):.0f}; signed update_us {period}",
    )


def bench_cells(tmp: Path) -> list[Cell]:
    log("fault cells")
    cells = [
        cell_small_counter,
        cell_unreadable,
        cell_drop,
        cell_reset,
        cell_busy_thread,
        cell_desktop_turbo,
        cell_laptop_turbo,
        cell_frozen,
        cell_step_back_scripted,
        cell_step_back_live,
        lambda t: cell_reset_near(t, 100),
        lambda t: cell_reset_near(t, 300),
        cell_wrap_before_close,
        cell_identical_dram,
        cell_stepped_edges,
    ]
    out = []
    for cell in cells:
        try:
            out.append(cell(tmp))
        except Exception as err:  # a tree whose meter cannot run the cell says so
            name = getattr(cell, "__name__", "cell")
            out.append(Cell(name, f"error: {type(err).__name__}: {err}"))
    return out


def render_cells(cells: list[Cell]) -> str:
    out = ["### Fault cells", "", "| cell | this tree |", "|---|---|"]
    out += [f"| {c.name} | {c.result.replace('|', chr(92) + '|')} |" for c in cells]
    return "\n".join([*out, ""])
