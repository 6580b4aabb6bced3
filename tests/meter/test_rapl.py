from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jouled.errors import ConfigError, MeterPermissionError, MeterUnavailableError
from jouled.meter.rapl import RaplMeter, read_text
from jouled.meter.window import PhaseEnergy, phase_energy

from .fakes import FakeClock, FakePowercap

IDLE = 3600.0  # the polling thread never wakes inside a test: snapshots drive reads


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(tmp_path: Path) -> FakePowercap:
    return FakePowercap(tmp_path / "powercap")


def open_rapl(fake: FakePowercap, clock: FakeClock, **kw: Any) -> RaplMeter:
    return RaplMeter(fake.root, clock=clock, sleep=clock.sleep, interval_s=IDLE, **kw)


def window(meter: RaplMeter, clock: FakeClock, seconds: float) -> PhaseEnergy:
    start = meter.snapshot()
    clock.sleep(seconds)
    end = meter.snapshot()
    return phase_energy(meter.source, meter.domains(), start, end, None)


def names(meter: RaplMeter) -> list[str]:
    return [d.name for d in meter.domains()]


def reasons(meter: RaplMeter) -> dict[str, str]:
    return {p.zone.id: p.reason for p in meter.plans}


@pytest.fixture
def two_sockets(fake: FakePowercap, clock: FakeClock) -> FakePowercap:
    """package + core/uncore/dram on socket 0, package + dram on socket 1."""
    for n in (0, 1):
        fake.package(n)
    fake.subzone("intel-rapl:0", 0, "core")
    fake.subzone("intel-rapl:0", 1, "uncore")
    fake.subzone("intel-rapl:0", 2, "dram")
    fake.subzone("intel-rapl:1", 0, "dram")
    fake.drive(
        clock,
        {
            "intel-rapl:0": 30.0,
            "intel-rapl:0:0": 20.0,
            "intel-rapl:0:1": 5.0,
            "intel-rapl:0:2": 4.0,
            "intel-rapl:1": 25.0,
            "intel-rapl:1:0": 3.0,
        },
    )
    return fake


def test_packages_are_summed_and_core_uncore_never_added(
    two_sockets: FakePowercap, clock: FakeClock
) -> None:
    with open_rapl(two_sockets, clock) as m:
        assert m.source == "rapl"
        assert names(m) == ["package-0", "package-1"]
        assert {d.kind for d in m.domains()} == {"package"}
        pe = window(m, clock, 2.0)
        why = reasons(m)
    assert pe.valid
    assert pe.domains == {"package-0": 60_000, "package-1": 50_000}
    assert pe.gross_mj == 110_000
    assert "inside its package" in why["intel-rapl:0:0"]
    assert "inside its package" in why["intel-rapl:0:1"]
    assert "opt-in" in why["intel-rapl:0:2"]


def test_dram_is_opt_in(two_sockets: FakePowercap, clock: FakeClock) -> None:
    with open_rapl(two_sockets, clock, dram=True) as m:
        assert names(m) == ["package-0", "dram-0", "package-1", "dram-1"]
        pe = window(m, clock, 1.0)
    assert pe.domains == {
        "package-0": 30_000,
        "dram-0": 4_000,
        "package-1": 25_000,
        "dram-1": 3_000,
    }


def test_psys_is_an_alternative_never_an_addition(fake: FakePowercap, clock: FakeClock) -> None:
    fake.package(0)
    fake.subzone("intel-rapl:0", 0, "dram")
    fake.psys(1)
    fake.drive(clock, {"intel-rapl:0": 10.0, "intel-rapl:0:0": 2.0, "intel-rapl:1": 18.0})
    with open_rapl(fake, clock, dram=True) as m:
        assert names(m) == ["package-0", "dram-0"]
        assert "alternative" in reasons(m)["intel-rapl:1"]
    with open_rapl(fake, clock, zones="psys", dram=True) as m:
        assert names(m) == ["psys"]
        assert [d.kind for d in m.domains()] == ["psys"]
        assert "inside psys" in reasons(m)["intel-rapl:0"]
        assert "inside psys" in reasons(m)["intel-rapl:0:0"]
        pe = window(m, clock, 1.0)
    assert pe.gross_mj == 18_000


def test_psys_asked_for_but_absent_is_unavailable(fake: FakePowercap, clock: FakeClock) -> None:
    fake.package(0)
    with pytest.raises(MeterUnavailableError, match="psys"):
        open_rapl(fake, clock, zones="psys")


def test_unknown_zone_choice_is_a_config_error(fake: FakePowercap, clock: FakeClock) -> None:
    fake.package(0)
    with pytest.raises(ConfigError):
        open_rapl(fake, clock, zones="core")


def test_mmio_duplicate_of_a_package_is_ignored(fake: FakePowercap, clock: FakeClock) -> None:
    fake.package(0)
    fake.mmio_package(0)
    fake.drive(clock, {"intel-rapl:0": 15.0, "intel-rapl-mmio:0": 15.0})
    with open_rapl(fake, clock) as m:
        assert names(m) == ["package-0"]
        assert "MMIO" in reasons(m)["intel-rapl-mmio:0"]
        pe = window(m, clock, 1.0)
    assert pe.gross_mj == 15_000


def test_mmio_zone_is_used_when_no_msr_zone_shows_that_package(
    fake: FakePowercap, clock: FakeClock
) -> None:
    fake.mmio_package(0)
    fake.drive(clock, {"intel-rapl-mmio:0": 9.0})
    with open_rapl(fake, clock) as m:
        assert names(m) == ["package-0"]
        assert window(m, clock, 1.0).gross_mj == 9_000


def test_mirrored_dies_are_read_once(fake: FakePowercap, clock: FakeClock) -> None:
    fake.package(0, name="package-0-die-0", energy_uj=123_456)
    fake.package(1, name="package-0-die-1")
    fake.mirror("intel-rapl:1", of="intel-rapl:0")
    fake.drive(clock, {"intel-rapl:0": 68.0})
    with open_rapl(fake, clock, mirror_probe_s=0.05) as m:
        assert names(m) == ["package-0-die-0"]
        assert "mirrors package-0-die-0" in reasons(m)["intel-rapl:1"]
        pe = window(m, clock, 1.0)
    assert pe.gross_mj == 68_000


def test_two_sockets_that_advance_identically_both_count(
    fake: FakePowercap, clock: FakeClock
) -> None:
    """Two sockets under the same load: their packages and their DRAM advance by
    the very same microjoules, which is no sign that they are one counter."""
    for n in (0, 1):
        fake.package(n, energy_uj=1_000_000 * (n + 1))
        fake.subzone(f"intel-rapl:{n}", 0, "dram", energy_uj=3_000_000 * (n + 1))
    fake.drive(
        clock,
        {"intel-rapl:0": 50.0, "intel-rapl:1": 50.0, "intel-rapl:0:0": 6.0, "intel-rapl:1:0": 6.0},
    )
    with open_rapl(fake, clock, dram=True, mirror_probe_s=0.05) as m:
        assert names(m) == ["package-0", "dram-0", "package-1", "dram-1"]
        pe = window(m, clock, 1.0)
    assert pe.valid and pe.gross_mj == 112_000, pe
    assert pe.domains == {
        "package-0": 50_000,
        "dram-0": 6_000,
        "package-1": 50_000,
        "dram-1": 6_000,
    }


def test_the_dram_of_mirrored_dies_is_read_once(fake: FakePowercap, clock: FakeClock) -> None:
    """Dies of one socket that expose one package counter and one DRAM counter."""
    fake.package(0, name="package-0-die-0")
    fake.package(1, name="package-0-die-1")
    fake.subzone("intel-rapl:0", 0, "dram", energy_uj=5_000)
    fake.subzone("intel-rapl:1", 0, "dram")
    fake.mirror("intel-rapl:1", of="intel-rapl:0")
    fake.mirror("intel-rapl:1:0", of="intel-rapl:0:0")
    fake.drive(clock, {"intel-rapl:0": 68.0, "intel-rapl:0:0": 7.0})
    with open_rapl(fake, clock, dram=True, mirror_probe_s=0.05) as m:
        assert names(m) == ["package-0-die-0", "dram-0-die-0"]
        assert "same socket" in reasons(m)["intel-rapl:1:0"]
        pe = window(m, clock, 1.0)
    assert pe.gross_mj == 75_000


def test_distinct_packages_and_idle_packages_are_both_kept(
    fake: FakePowercap, clock: FakeClock
) -> None:
    fake.package(0)
    fake.package(1)
    fake.package(2)
    fake.package(3)
    # 2 and 3 are idle: equal (zero) deltas prove nothing.
    fake.drive(clock, {"intel-rapl:0": 40.0, "intel-rapl:1": 41.0})
    with open_rapl(fake, clock) as m:
        assert names(m) == ["package-0", "package-1", "package-2", "package-3"]


def test_flat_sysfs_links_list_each_zone_once(two_sockets: FakePowercap, clock: FakeClock) -> None:
    two_sockets.flat_links()
    with open_rapl(two_sockets, clock, dram=True) as m:
        assert names(m) == ["package-0", "dram-0", "package-1", "dram-1"]
        assert window(m, clock, 1.0).gross_mj == 62_000


def test_single_wrap_is_counted_through_the_top(fake: FakePowercap, clock: FakeClock) -> None:
    top = 10**9  # a 1 kJ counter, crossed in 200 ms at the 5 kW ceiling
    fake.package(0, energy_uj=top - 1_000_000, max_uj=top)
    fake.drive(clock, {"intel-rapl:0": 20.0})
    with open_rapl(fake, clock) as m:
        before = fake.read("intel-rapl:0")
        pe = window(m, clock, 0.1)
        assert fake.read("intel-rapl:0") < before  # it did wrap
    assert pe.valid and pe.gross_mj == 2_000


def test_missing_max_file_makes_a_backwards_step_a_fault(
    fake: FakePowercap, clock: FakeClock
) -> None:
    fake.package(0, energy_uj=50_000_000, max_uj=None)
    fake.drive(clock, {"intel-rapl:0": 10.0})
    with open_rapl(fake, clock) as m:
        assert window(m, clock, 1.0).gross_mj == 10_000
        start = m.snapshot()
        fake.set("intel-rapl:0", 1_000)  # a wrap or a reset: nothing can tell
        clock.sleep(1.0)
        end = m.snapshot()
        broken = phase_energy(m.source, m.domains(), start, end, None)
        after = window(m, clock, 1.0)
    assert not broken.valid and broken.gross_mj is None
    assert any("max_energy_range_uj" in r for r in broken.reasons)
    assert after.valid and after.gross_mj == 10_000


def test_permission_error_at_open_says_how_to_fix_it(
    two_sockets: FakePowercap, clock: FakeClock
) -> None:
    def reader(path: Path) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    with pytest.raises(MeterPermissionError) as info:
        open_rapl(two_sockets, clock, reader=reader)
    err = info.value
    assert "\n" not in err.message and "energy_uj" in err.message
    assert "CVE-2020-8694" in err.hint
    assert "deploy/99-jouled-powercap.rules" in err.hint
    assert "jouled" in err.hint and "CAP_DAC_READ_SEARCH" in err.hint


def test_permission_lost_after_open_is_a_fault(two_sockets: FakePowercap, clock: FakeClock) -> None:
    denied = False

    def reader(path: Path) -> str:
        if denied and path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    with open_rapl(two_sockets, clock, reader=reader) as m:
        start = m.snapshot()
        denied = True
        clock.sleep(1.0)
        end = m.snapshot()
    pe = phase_energy(m.source, m.domains(), start, end, None)
    assert not pe.valid and pe.gross_mj is None


def test_implausible_spike_is_a_fault_and_the_window_invalid(
    fake: FakePowercap, clock: FakeClock
) -> None:
    fake.package(0)
    fake.drive(clock, {"intel-rapl:0": 20.0})
    with open_rapl(fake, clock) as m:
        start = m.snapshot()
        clock.sleep(1.0)
        fake.add("intel-rapl:0", 10**10)  # 10 kJ more in that second: 10 kW, not a CPU
        end = m.snapshot()
        pe = phase_energy(m.source, m.domains(), start, end, None)
        after = window(m, clock, 1.0)
    assert end.faults == start.faults + 1
    assert not pe.valid and pe.gross_mj is None and pe.marginal_mj is None
    assert any("implausible" in r for r in pe.reasons)
    assert after.valid and after.gross_mj == 20_000


def test_non_integer_content_is_a_fault_never_zero(fake: FakePowercap, clock: FakeClock) -> None:
    fake.package(0, energy_uj=1_000)
    with open_rapl(fake, clock) as m:
        start = m.snapshot()
        fake.write_raw("intel-rapl:0", "")
        end = m.snapshot()
    pe = phase_energy(m.source, m.domains(), start, end, None)
    assert not pe.valid and pe.gross_mj is None


def test_no_rapl_zones_is_unavailable(tmp_path: Path, clock: FakeClock) -> None:
    with pytest.raises(MeterUnavailableError, match="no RAPL zones") as info:
        RaplMeter(tmp_path / "absent", clock=clock, sleep=clock.sleep)
    assert "\n" not in info.value.message


def test_poll_interval_follows_the_counter_range(fake: FakePowercap, clock: FakeClock) -> None:
    fake.package(0, max_uj=5_000_000)
    with RaplMeter(fake.root, ceiling_w=100.0, clock=clock, sleep=clock.sleep) as m:
        # 5 J at 100 W is crossed in 50 ms; at most a quarter of that between reads.
        assert m.interval_s * 100.0 * 1e6 <= 5_000_000 / 4
        assert m.describe()["rapl"]["interval_s"] == m.interval_s  # type: ignore[index]


def test_the_sampler_thread_counts_every_wrap_between_a_windows_edges(
    fake: FakePowercap,
) -> None:
    """A counter wrapping several times between two snapshots: only the sampler
    thread's reads in between see each wrap, and the window's energy is exact.

    The counter advances with the meter's clock: the sampler reads the clock
    before and after every counter read, and each clock read moves time and the
    counter half a poll interval on, so each read (the sampler thread's or a
    snapshot's) finds it one poll interval further on, at 140 W through a 6 J
    range, and it wraps every few polls. The counter only moves at a clock read,
    so a read sees the value set at the first clock read of its bracket, which
    the snapshot states as `t_ns - spread_ns`. The sampler runs as in
    production, on its own thread at the interval derived from the range and
    ceiling; what the test controls is only how far the counter moves between
    two reads, so a slow host cannot make reads look too far apart.
    """
    top, watts = 6_000_000, 140.0
    fake.package(0, max_uj=top)
    lock = threading.Lock()
    state = {"t_ns": 1_000_000_000, "written_uj": 0, "step_ns": 0}
    written_at: dict[int, int] = {}  # the counter's true total from each clock read on
    wrapped = threading.Event()

    def clock() -> int:
        # Called under the sampler's lock, before and after each counter read.
        with lock:
            state["t_ns"] += state["step_ns"]
            state["written_uj"] += round(watts * state["step_ns"] / 1000)  # W x ns = nJ
            fake.set("intel-rapl:0", state["written_uj"] % (top + 1))
            written_at[state["t_ns"]] = state["written_uj"]
            if state["written_uj"] > 5 * top:
                wrapped.set()
            return state["t_ns"]

    with RaplMeter(fake.root, ceiling_w=150.0, clock=clock) as m:
        # A quarter of the time the ceiling needs to cross the range, as derived.
        assert m.interval_s * 150.0 * 1e6 <= top / 4
        with lock:
            state["step_ns"] = round(m.interval_s * 1e9) // 2
        start = m.snapshot()
        assert wrapped.wait(300), "the sampler thread stopped polling"
        end = m.snapshot()
    pe = phase_energy(m.source, m.domains(), start, end, None)
    assert start.spread_ns == end.spread_ns == state["step_ns"] // 2  # one read, mid-bracket
    truth_uj = written_at[end.t_ns - end.spread_ns] - written_at[start.t_ns - start.spread_ns]
    assert truth_uj > 4 * top  # it wrapped several times between the edges
    assert pe.valid, pe.reasons
    assert pe.gross_mj is not None
    assert abs(pe.gross_mj - truth_uj / 1000) <= 1  # exact, to the millijoule


def test_a_mirror_is_found_when_a_counter_update_falls_between_two_reads() -> None:
    """Scripted reads: in one of three intervals the twin's read sees one more update."""
    from pathlib import Path

    from jouled.meter.rapl import MIRROR_INTERVALS, Zone, ZonePlan, find_mirrors

    die0 = Zone("intel-rapl:0", Path("/z0"), "package-0-die-0", "", False, None)
    die1 = Zone("intel-rapl:1", Path("/z1"), "package-0-die-1", "", False, None)
    series = {
        Path("/z0/energy_uj"): iter([0, 1_000_000, 2_000_000, 3_000_000]),
        # same counter, but the second interval's read caught one extra 61 uJ update
        Path("/z1/energy_uj"): iter([0, 1_000_000, 2_000_061, 3_000_000]),
    }
    plans = [
        ZonePlan(die0, "package-0", True, "selected"),
        ZonePlan(die1, "package-1", True, "selected"),
    ]
    result = find_mirrors(plans, lambda p: str(next(series[p])), sleep=lambda s: None)
    assert MIRROR_INTERVALS == 3
    assert [p.selected for p in result] == [True, False]


def test_sockets_that_match_once_by_chance_are_not_mirrors() -> None:
    from pathlib import Path

    from jouled.meter.rapl import Zone, ZonePlan, find_mirrors

    s0 = Zone("intel-rapl:0", Path("/z0"), "package-0", "", False, None)
    s1 = Zone("intel-rapl:1", Path("/z1"), "package-1", "", False, None)
    series = {
        Path("/z0/energy_uj"): iter([0, 1_000_000, 2_000_000, 3_000_000]),
        Path("/z1/energy_uj"): iter([0, 1_000_000, 2_000_500, 3_001_100]),
    }
    plans = [
        ZonePlan(s0, "package-0", True, "selected"),
        ZonePlan(s1, "package-1", True, "selected"),
    ]
    result = find_mirrors(plans, lambda p: str(next(series[p])), sleep=lambda s: None)
    assert [p.selected for p in result] == [True, True]


# -- ceilings from the zone's own constraints ---------------------------------------------


def test_a_small_counter_at_laptop_power_gives_figures(
    fake: FakePowercap, clock: FakeClock
) -> None:
    """50 J of range at 30 W, read every 40 ms: every wrap is seen."""
    fake.package(0, energy_uj=40_000_000, max_uj=50_000_000, max_power_uw=(28_000_000, 45_000_000))
    fake.drive(clock, {"intel-rapl:0": 30.0})
    with open_rapl(fake, clock) as m:
        windows = [window(m, clock, 0.04) for _ in range(50)]  # 60 J: a wrap inside
    assert all(pe.valid and pe.gross_mj == 1_200 for pe in windows), windows


# Public powercap dumps of shipping parts: what each zone declares, and the
# power it really draws under turbo. Constraint 0 is long term, 1 short term.
PARTS = {
    # A desktop part rated PBP 125 W / PL2 253 W: max_power_uw says 125 W (and 0
    # for short term), the limits say 253 W; it runs at 253 W for as long as it may.
    "desktop 125/253 W at 253 W": (
        {"max_power_uw": (125_000_000, 0), "power_limit_uw": (125_000_000, 253_000_000)},
        253.0,
    ),
    # A 28 W laptop part that bursts to 60 W and declares only its 28 W.
    "laptop 28 W at 60 W": ({"max_power_uw": (28_000_000, 0)}, 60.0),
    # The same laptop part whose driver exposes no power figure at all.
    "laptop without figures at 64 W": ({}, 64.0),
    # A 500 W server socket at its rating, 15 % above it.
    "server 500 W at 575 W": (
        {"max_power_uw": (500_000_000, 0), "power_limit_uw": (500_000_000, 600_000_000)},
        575.0,
    ),
}


@pytest.mark.parametrize("part", sorted(PARTS))
def test_a_shipping_part_under_turbo_reads_valid(
    fake: FakePowercap, clock: FakeClock, part: str
) -> None:
    declared, watts = PARTS[part]
    fake.package(0, **declared)  # type: ignore[arg-type]
    fake.drive(clock, {"intel-rapl:0": watts})
    with open_rapl(fake, clock) as m:
        ceiling = m.describe()["rapl"]["zones"][0]["ceiling_w"]  # type: ignore[index]
        windows = [window(m, clock, 1.0) for _ in range(5)]
    assert ceiling >= 2 * watts, ceiling
    assert all(pe.valid and pe.gross_mj == watts * 1000 for pe in windows), windows


def test_the_ceiling_takes_the_largest_figure_the_zone_declares(
    fake: FakePowercap, clock: FakeClock
) -> None:
    fake.package(0, max_power_uw=(125_000_000, 0), power_limit_uw=(125_000_000, 253_000_000))
    fake.package(1, max_power_range_uw=700_000_000)
    fake.package(2, power_limit_uw=(4_095_875_000,))  # a firmware's "unlimited"
    with open_rapl(fake, clock) as m:
        zones = {z["id"]: z for z in m.describe()["rapl"]["zones"]}  # type: ignore[index]
    assert zones["intel-rapl:0"]["ceiling_w"] == 1000.0
    assert "floor" in zones["intel-rapl:0"]["ceiling_from"]
    assert "253 W" in zones["intel-rapl:0"]["ceiling_from"]
    assert zones["intel-rapl:1"]["ceiling_w"] == 1400.0
    assert zones["intel-rapl:2"]["ceiling_w"] == pytest.approx(8191.75)


def test_a_zone_without_constraints_gets_its_kinds_floor(
    fake: FakePowercap, clock: FakeClock
) -> None:
    fake.package(0, max_uj=50_000_000)
    fake.subzone("intel-rapl:0", 0, "dram", max_uj=50_000_000)
    with open_rapl(fake, clock, dram=True) as m:
        zones = {z["name"]: z for z in m.describe()["rapl"]["zones"]}  # type: ignore[index]
    assert zones["package-0"]["ceiling_w"] == 1000.0
    assert zones["dram"]["ceiling_w"] == 500.0
    assert "declares no power figure" in zones["dram"]["ceiling_from"]


def test_a_counter_that_can_wrap_between_two_fastest_reads_is_refused(
    fake: FakePowercap, clock: FakeClock
) -> None:
    # 5 J at 2 x 400 W is crossed in 6 ms; the sampler cannot read every 3 ms.
    fake.package(0, max_uj=5_000_000, max_power_uw=(400_000_000,))
    with pytest.raises(MeterUnavailableError, match="cannot see every wrap") as info:
        open_rapl(fake, clock)
    assert "\n" not in info.value.message and info.value.hint


# -- what is a wrap -----------------------------------------------------------------------


def test_a_small_drop_is_not_a_wrap(fake: FakePowercap, clock: FakeClock) -> None:
    """A 10 J drop on a 60 J counter reads as 51.5 J through the top in 50 ms:
    1030 W, under the zone's 1100 W ceiling, but over thirty times the 30 W the
    counter was showing."""
    fake.package(0, energy_uj=20_000_000, max_uj=60_000_000, max_power_uw=(550_000_000,))
    fake.drive(clock, {"intel-rapl:0": 30.0})
    with open_rapl(fake, clock) as m:
        for _ in range(4):
            m.snapshot()
            clock.sleep(0.05)
        start = m.snapshot()
        clock.sleep(0.05)
        fake.add("intel-rapl:0", -10_000_000)
        end = m.snapshot()
        broken = phase_energy(m.source, m.domains(), start, end, None)
        after = window(m, clock, 0.05)
    assert not broken.valid and broken.gross_mj is None
    assert any("not a wrap" in r for r in broken.reasons), broken.reasons
    assert after.valid and after.gross_mj == 1_500


def test_a_reset_to_zero_far_below_the_top_is_not_a_wrap(
    fake: FakePowercap, clock: FakeClock
) -> None:
    top = 262_143_328_850
    fake.package(0, energy_uj=top - 1_000_000_000)  # 1 kJ below the top
    fake.drive(clock, {"intel-rapl:0": 30.0})
    with open_rapl(fake, clock) as m:
        for _ in range(3):
            window(m, clock, 1.0)
        start = m.snapshot()
        clock.sleep(1.0)
        fake.set("intel-rapl:0", 0)  # 1 kJ in a second, were it a wrap: 1 kW from 30 W
        end = m.snapshot()
    pe = phase_energy(m.source, m.domains(), start, end, None)
    assert not pe.valid and pe.gross_mj is None
    assert any("not a wrap" in r for r in pe.reasons), pe.reasons


def test_a_wrap_at_a_surge_is_still_a_wrap(fake: FakePowercap, clock: FakeClock) -> None:
    """Idle at 20 W, then 150 W from the read before the wrap: 7.5x, a wrap."""
    top = 60_000_000
    fake.package(0, energy_uj=top - 2_000_000, max_uj=top, max_power_uw=(500_000_000,))
    with open_rapl(fake, clock) as m:
        for _ in range(4):
            fake.add("intel-rapl:0", 300_000)  # 20 W over 15 ms
            clock.sleep(0.015)
            m.snapshot()
        start = m.snapshot()
        fake.add("intel-rapl:0", 2_250_000)  # 150 W over 15 ms, through the top
        clock.sleep(0.015)
        end = m.snapshot()
    pe = phase_energy(m.source, m.domains(), start, end, None)
    assert fake.read("intel-rapl:0") < 2_000_000  # it did wrap
    assert pe.valid and pe.gross_mj == 2_250


# -- a frozen counter -----------------------------------------------------------------


def test_a_counter_that_stands_still_while_the_phase_is_busy_is_frozen_not_zero(
    fake: FakePowercap, clock: FakeClock
) -> None:
    fake.package(0, energy_uj=7_000_000)
    fake.package(1)
    fake.drive(clock, {"intel-rapl:1": 20.0})  # package-0 never moves
    with open_rapl(fake, clock) as m:
        start = m.snapshot()
        clock.sleep(1.0)
        end = m.snapshot()
    busy = phase_energy(m.source, m.domains(), start, end, None, busy_ns=300_000_000)
    assert not busy.valid and busy.gross_mj is None and busy.marginal_mj is None
    assert busy.domains == {"package-0": None, "package-1": None}
    assert any("package-0" in r and "frozen" in r for r in busy.reasons), busy.reasons
    # Without CPU time (or without knowing it) nothing says the host was busy.
    for quiet in (0, None):
        pe = phase_energy(m.source, m.domains(), start, end, None, busy_ns=quiet)
        assert pe.valid and pe.domains == {"package-0": 0, "package-1": 20_000}


# -- every figure of an invalid window is null --------------------------------------------


def test_a_counter_unreadable_the_whole_window_has_no_figure(
    two_sockets: FakePowercap, clock: FakeClock
) -> None:
    denied = False

    def reader(path: Path) -> str:
        if denied and path.name == "energy_uj" and path.parent.name == "intel-rapl:0":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    with open_rapl(two_sockets, clock, reader=reader) as m:
        denied = True
        m.snapshot()  # the read that fails: the window below starts after it
        start = m.snapshot()
        clock.sleep(1.0)
        end = m.snapshot()
    pe = phase_energy(m.source, m.domains(), start, end, None)
    wire = pe.to_wire()
    assert not pe.valid
    assert wire["domains"] == {"package-0": None, "package-1": None}
    assert wire["gross_mj"] is None and wire["idle_mj"] is None and wire["marginal_mj"] is None


# -- the clock brackets every read --------------------------------------------------------


def test_a_slow_read_sits_inside_its_stated_spread(fake: FakePowercap) -> None:
    """The counter is produced at the moment of the read (as sysfs does) and the
    read takes 4 ms: the snapshot's time moves to the middle of the read and says
    how far off it can be, and the window's energy matches its wall time within
    the stated edges."""
    from .fakes import LiveCounters

    watts = 200.0
    fake.package(0, max_uj=10**12)
    t0 = time.monotonic_ns()

    def slow(path: Path) -> str:
        text = read_text(path)
        if path.name == "energy_uj":
            time.sleep(0.004)
        return text

    with (
        LiveCounters(fake, {"intel-rapl:0": lambda t: round(watts * (t - t0) / 1000)}) as live,
        RaplMeter(fake.root, reader=slow, interval_s=IDLE) as m,
    ):
        start = m.snapshot()
        time.sleep(0.05)
        end = m.snapshot()
    assert not live.errors
    pe = phase_energy(m.source, m.domains(), start, end, None)
    assert start.spread_ns >= 2_000_000 and end.spread_ns >= 2_000_000
    assert pe.wall_us * 1000 == pytest.approx(end.t_ns - start.t_ns, abs=500)
    assert pe.edge_us * 1000 >= start.spread_ns + end.spread_ns
    assert pe.gross_mj is not None
    # W x us = uJ; gross is whole mJ, so 1 mJ of rounding
    assert abs(pe.gross_mj * 1000 - watts * pe.wall_us) <= watts * pe.edge_us + 1000
