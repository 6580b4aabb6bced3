from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jouled.errors import ConfigError, MeterUnavailableError
from jouled.meter.auto import CompositeMeter, open_meter
from jouled.meter.base import Domain, Meter, Snapshot
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.nvml import NvmlMeter
from jouled.meter.rapl import RaplMeter
from jouled.meter.window import phase_energy

from .fakes import FakeNVML, FakePowercap, LiveCounters


@pytest.fixture
def no_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)


@pytest.fixture
def powercap(tmp_path: Path) -> Iterator[FakePowercap]:
    """A package and its DRAM whose counters advance in real time (20 W, 3 W)."""
    fake = FakePowercap(tmp_path / "powercap")
    fake.package(0)
    fake.subzone("intel-rapl:0", 0, "dram")
    t0 = time.monotonic_ns()
    live = {
        "intel-rapl:0": lambda t: 20 * (t - t0) // 1000,
        "intel-rapl:0:0": lambda t: 3 * (t - t0) // 1000,
    }
    with LiveCounters(fake, live) as counters:
        yield fake
    assert not counters.errors, counters.errors


def test_auto_combines_every_measured_source(powercap: FakePowercap) -> None:
    with open_meter(
        "auto", powercap_root=powercap.root, nvml_module=FakeNVML.with_gpus(2), dram=True
    ) as m:
        assert isinstance(m, CompositeMeter)
        assert m.source == "rapl+nvml"
        assert m.measured
        assert [d.name for d in m.domains()] == ["package-0", "dram-0", "gpu-0", "gpu-1"]
        snap = m.snapshot()
        assert set(snap.totals_uj) == {"package-0", "dram-0", "gpu-0", "gpu-1"}
        meters = m.describe()["meters"]
        assert isinstance(meters, list)
        assert [s["source"] for s in meters] == ["rapl", "nvml"]


@pytest.mark.usefixtures("no_pynvml")
def test_auto_with_rapl_alone(powercap: FakePowercap) -> None:
    with open_meter("auto", powercap_root=powercap.root) as m:
        assert isinstance(m, RaplMeter)
        assert m.source == "rapl"


def test_auto_with_gpus_alone(tmp_path: Path) -> None:
    with open_meter("auto", powercap_root=tmp_path, nvml_module=FakeNVML.with_gpus(1)) as m:
        assert isinstance(m, NvmlMeter)


@pytest.mark.usefixtures("no_pynvml")
@pytest.mark.usefixtures("no_pynvml")
def test_auto_does_not_pick_a_frozen_counter(tmp_path: Path) -> None:
    """A RAPL zone that stands still while a CPU is kept busy would sign 0 J for
    every phase: auto skips it and says so, as for a source that does not read."""
    fake = FakePowercap(tmp_path / "powercap")
    fake.package(0, energy_uj=123_456)  # never moves
    spun: list[float] = []
    with open_meter("auto", powercap_root=fake.root, busy=spun.append) as m:
        assert isinstance(m, EstimatorMeter)
    assert spun
    # Asked for by name, it opens: its windows are null, with the reason, while busy.
    with open_meter("rapl", powercap_root=fake.root) as m:
        assert m.source == "rapl"


def test_auto_estimates_when_nothing_measured_reads(tmp_path: Path) -> None:
    with open_meter("auto", powercap_root=tmp_path, active_watts=42.0) as m:
        assert isinstance(m, EstimatorMeter)
        assert m.source == "estimator" and not m.measured
        assert m.watts == 42.0


def test_auto_skips_a_gpu_in_mig_mode(powercap: FakePowercap) -> None:
    fake = FakeNVML.with_gpus(1, mig=True)
    with open_meter("auto", powercap_root=powercap.root, nvml_module=fake) as m:
        assert m.source == "rapl"


@pytest.mark.usefixtures("no_pynvml")
def test_explicit_sources_fail_at_start_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(MeterUnavailableError) as rapl:
        open_meter("rapl", powercap_root=tmp_path)
    with pytest.raises(MeterUnavailableError) as nvml:
        open_meter("nvml", powercap_root=tmp_path)
    for err in (rapl.value, nvml.value):
        assert err.message and "\n" not in err.message


def test_explicit_sources_open_only_themselves(powercap: FakePowercap) -> None:
    fake = FakeNVML.with_gpus(1)
    with open_meter("rapl", powercap_root=powercap.root, nvml_module=fake) as m:
        assert m.source == "rapl"
    with open_meter("nvml", powercap_root=powercap.root, nvml_module=fake, gpus=["0"]) as m:
        assert m.source == "nvml"
    with open_meter(
        "estimator", powercap_root=powercap.root, estimator_mode="cpu", watts_per_core=3.0
    ) as m:
        assert isinstance(m, EstimatorMeter) and m.mode == "cpu"


def test_unknown_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        open_meter("measured")


class Scripted(Meter):
    def __init__(self, source: str, name: str) -> None:
        self._source = source
        self._domain = Domain(name, source, "package", 1, 10)
        self.total = 0
        self.faults = 0
        self.t_ns = 0
        self.closed = False

    @property
    def source(self) -> str:
        return self._source

    def domains(self) -> list[Domain]:
        return [self._domain]

    def snapshot(self) -> Snapshot:
        return Snapshot(self.t_ns, {self._domain.name: self.total}, self.faults)

    def close(self) -> None:
        self.closed = True


def test_composite_sums_domains_and_faults() -> None:
    cpu, gpu = Scripted("rapl", "package-0"), Scripted("nvml", "gpu-0")
    m = CompositeMeter([cpu, gpu])
    start = m.snapshot()
    cpu.total, gpu.total = 3_000_000, 5_000_000
    cpu.t_ns = gpu.t_ns = 1_000_000_000
    end = m.snapshot()
    pe = phase_energy(m.source, m.domains(), start, end, None)
    assert pe.valid and pe.gross_mj == 8_000 and pe.wall_ms == 1000
    gpu.faults = 1
    assert not phase_energy(m.source, m.domains(), end, m.snapshot(), None).valid
    m.close()
    assert cpu.closed and gpu.closed


def test_composite_refuses_colliding_domain_names() -> None:
    with pytest.raises(ValueError, match="collide"):
        CompositeMeter([Scripted("rapl", "x"), Scripted("nvml", "x")])
