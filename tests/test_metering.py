"""Metered phases under the two attribution policies (fake meter at the hardware boundary)."""

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from jouled.meter.base import Domain, Meter, Snapshot
from jouled.meter.metering import _CLK_TCK, Metering, host_busy_cpu_ns


class StepMeter(Meter):
    """A fake counter: each snapshot advances one second and 10 J."""

    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    @property
    def source(self) -> str:
        return "rapl"

    def domains(self) -> Sequence[Domain]:
        return (Domain("package-0", "rapl", "package", 61, 10),)

    def snapshot(self) -> Snapshot:
        with self.lock:
            self.n += 1
            return Snapshot(self.n * 1_000_000_000, {"package-0": self.n * 10_000_000})


def test_exclusive_phases_do_not_overlap() -> None:
    metering = Metering(StepMeter(), None, "exclusive")
    inside = []
    active = threading.Event()

    def phase() -> None:
        with metering.phase() as window:
            inside.append(active.is_set())
            active.set()
            threading.Event().wait(0.05)
            active.clear()
        assert window.energy is not None and window.energy.attribution == "exclusive"

    threads = [threading.Thread(target=phase) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert inside == [False] * 4


def test_shared_phases_are_charged_their_cpu_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stat = tmp_path / "stat"
    busy = iter([1000, 1400])  # jiffies of busy time at the window's edges

    def fake_busy(path: str = "/proc/stat") -> int | None:
        stat.write_text(f"cpu  {next(busy)} 0 0 5000 0 0 0 0 0 0\n")
        return host_busy_cpu_ns(str(stat))

    monkeypatch.setattr("jouled.meter.metering.host_busy_cpu_ns", fake_busy)
    metering = Metering(StepMeter(), None, "shared")
    with metering.phase() as window:
        # a quarter of the host's busy time in the window was this phase's
        window.cpu_ns = 400 * 1_000_000_000 // _CLK_TCK // 4
    assert window.energy is not None
    assert window.energy.attribution == "cpu-share"
    assert window.energy.gross_mj == 2_500  # a quarter of 10 J


def test_host_busy_cpu_reads_the_kernel_accounting(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 10 50 1000 20 5 5 0 0 0\ncpu0 ...\n")
    # user+nice+system+irq+softirq+steal = 170 jiffies; idle and iowait excluded
    assert host_busy_cpu_ns(str(stat)) == 170 * 1_000_000_000 // _CLK_TCK
    assert host_busy_cpu_ns(str(tmp_path / "missing")) is None


def test_energy_total_adds_valid_ops_and_says_what_it_left_out() -> None:
    from jouled.pipeline.result_fields import energy_total

    ok = {
        "gross_mj": 100,
        "idle_mj": 40,
        "marginal_mj": 60,
        "wall_ms": 5,
        "valid": True,
        "reliable": True,
        "source": "rapl",
    }
    bad = {
        "gross_mj": None,
        "idle_mj": None,
        "marginal_mj": None,
        "wall_ms": 7,
        "valid": False,
        "reliable": False,
        "source": "rapl",
    }
    total = energy_total({"seed": ok, "grade": ok, "solve": bad})
    assert total["gross_mj"] == 200 and total["marginal_mj"] == 120 and total["wall_ms"] == 17
    assert total["invalid_ops"] == 1 and total["reliable"] is False
    assert total["ops"] == ["grade", "seed", "solve"] and total["source"] == "rapl"
    mixed = energy_total({"grade": ok, "solve": {**ok, "source": "estimator"}})
    assert mixed["source"] == "mixed:estimator,rapl" and mixed["reliable"] is True
