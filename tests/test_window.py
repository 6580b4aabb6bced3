from jouled.meter.base import Calibration, Domain, DomainIdle, Snapshot
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.window import phase_energy

PKG = Domain("package-0", "rapl", "package", 61, 10)


def snap(t_ms: int, uj: int, faults: int = 0) -> Snapshot:
    return Snapshot(t_ns=t_ms * 1_000_000, totals_uj={"package-0": uj}, faults=faults)


def test_gross_idle_and_marginal_from_two_snapshots() -> None:
    cal = Calibration("rapl", 10, {"package-0": DomainIdle(idle_mw=5_000, stddev_mw=100)}, seq=3)
    e = phase_energy("rapl", [PKG], snap(0, 0), snap(2_000, 30_000_000), cal)
    assert (e.gross_mj, e.idle_mj, e.marginal_mj) == (30_000, 10_000, 20_000)
    assert e.reliable and e.valid and e.calibration_seq == 3
    assert e.to_wire()["wall_ms"] == 2_000


def test_marginal_below_idle_is_clamped_and_flagged() -> None:
    cal = Calibration("rapl", 10, {"package-0": DomainIdle(idle_mw=5_000, stddev_mw=100)})
    e = phase_energy("rapl", [PKG], snap(0, 0), snap(1_000, 4_000_000), cal)
    assert e.marginal_mj == 0
    assert not e.reliable
    assert any("clamped" in r for r in e.reasons)


def test_a_short_window_is_not_reliable() -> None:
    e = phase_energy("rapl", [PKG], snap(0, 0), snap(5, 100_000), None)
    assert e.gross_mj == 100 and not e.reliable
    assert any("floor" in r for r in e.reasons)


def test_a_failed_read_makes_the_window_invalid_not_zero() -> None:
    e = phase_energy("rapl", [PKG], snap(0, 0), snap(1_000, 9_000_000, faults=1), None)
    assert not e.valid and not e.reliable
    assert e.gross_mj is None and e.to_wire()["gross_mj"] is None


def test_cpu_share_apportions_the_window() -> None:
    e = phase_energy("rapl", [PKG], snap(0, 0), snap(1_000, 10_000_000), None, share=0.25)
    assert e.gross_mj == 2_500 and e.attribution == "cpu-share"
    assert e.domains == {"package-0": 2_500}  # each domain's gross is the phase's share too


def test_a_share_that_left_out_cpu_is_the_whole_window_and_not_reliable() -> None:
    """A run whose CPU the sandbox could not count has no share to apportion by: its
    phase is given the whole window, said so, rather than a share near zero."""
    why = "a sandboxed run's CPU time is not counted here (no cgroup)"
    e = phase_energy(
        "rapl", [PKG], snap(0, 0), snap(1_000, 10_000_000), None, share=0.001, cpu_uncounted=why
    )
    assert e.gross_mj == 10_000 and e.attribution == "cpu-share"
    assert e.valid and not e.reliable
    assert any(r.startswith(why) for r in e.reasons), e.reasons


def test_an_estimate_by_cpu_time_that_left_out_cpu_is_not_reliable() -> None:
    cpu = Domain("estimated", "estimator", "cpu-time", 1, 100)
    a = Snapshot(t_ns=0, totals_uj={"estimated": 0})
    b = Snapshot(t_ns=10**9, totals_uj={"estimated": 5000})
    why = "a sandboxed run's CPU time is not counted here (no cgroup)"
    e = phase_energy("estimator", [cpu], a, b, None, cpu_uncounted=why)
    assert e.gross_mj == 5 and e.valid and not e.reliable
    assert any(r.startswith(why) for r in e.reasons), e.reasons
    wall = Domain("estimated", "estimator", "wall", 1, 100)  # time, not CPU: nothing left out
    assert phase_energy("estimator", [wall], a, b, None, cpu_uncounted=why).reliable


def test_estimator_charges_active_watts_for_wall_time() -> None:
    now = [0]
    meter = EstimatorMeter(active_watts=20.0, clock=lambda: now[0])
    start = meter.snapshot()
    now[0] = 1_500_000_000
    e = phase_energy(meter.source, meter.domains(), start, meter.snapshot(), None)
    assert e.gross_mj == 30_000 and e.source == "estimator"
    assert e.reliable  # 1.5 s is above the estimator's 100 ms floor
    assert meter.describe()["measured"] is False
