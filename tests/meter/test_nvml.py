from __future__ import annotations

import sys
from typing import Any

import pytest

from jouled.errors import ConfigError, MeterUnavailableError
from jouled.meter.nvml import NvmlMeter
from jouled.meter.window import PhaseEnergy, phase_energy

from .fakes import FakeGpu, FakeNVML

IDLE = 3600.0  # the polling thread never wakes inside a test: snapshots drive reads


def open_nvml(fake: FakeNVML, **kw: Any) -> NvmlMeter:
    return NvmlMeter(nvml_module=fake, clock=fake.clock, sleep=fake.sleep, interval_s=IDLE, **kw)


def window(meter: NvmlMeter, fake: FakeNVML, seconds: float) -> PhaseEnergy:
    start = meter.snapshot()
    fake.advance(seconds)
    end = meter.snapshot()
    return phase_energy(meter.source, meter.domains(), start, end, None)


def test_energy_counter_per_gpu() -> None:
    fake = FakeNVML.with_gpus(2, power_mw=100_000)
    with open_nvml(fake) as m:
        assert m.source == "nvml"
        assert [(d.name, d.kind, d.min_window_ms) for d in m.domains()] == [
            ("gpu-0", "gpu", 100),
            ("gpu-1", "gpu", 100),
        ]
        pe = window(m, fake, 2.0)
    assert pe.valid
    assert pe.domains == {"gpu-0": 200_000, "gpu-1": 200_000}
    assert fake.inits == 0  # close shut NVML down


def test_gpus_selected_by_index_or_uuid() -> None:
    fake = FakeNVML.with_gpus(3)
    with open_nvml(fake, gpus=["2", fake.gpus[0].uuid, "2"]) as m:
        assert [d.name for d in m.domains()] == ["gpu-2", "gpu-0"]
    with pytest.raises(ConfigError, match="index 7"):
        open_nvml(fake, gpus=["7"])
    with pytest.raises(ConfigError, match="UUID"):
        open_nvml(fake, gpus=["GPU-nope"])
    assert fake.inits == 0


def test_counter_not_supported_falls_back_to_sampled_power() -> None:
    fake = FakeNVML([FakeGpu("GPU-a", power_mw=70_000, energy_supported=False), FakeGpu("GPU-b")])
    with open_nvml(fake) as m:
        kinds = {d.name: (d.kind, d.min_window_ms) for d in m.domains()}
        assert kinds == {"gpu-0": ("gpu-power", 1000), "gpu-1": ("gpu", 100)}
        described = m.describe()["nvml"]["gpus"]  # type: ignore[index]
        assert "not supported" in described[0]["how"]
        pe = window(m, fake, 2.0)
    assert pe.valid
    assert pe.domains["gpu-0"] == 140_000  # 70 W x 2 s, integrated


def test_counter_stuck_at_zero_falls_back_to_sampled_power() -> None:
    fake = FakeNVML([FakeGpu("GPU-a", energy_uj=0, power_mw=0)])
    with open_nvml(fake) as m:
        assert m.domains()[0].kind == "gpu-power"


def test_driver_reload_rebases_and_invalidates_only_its_window() -> None:
    fake = FakeNVML.with_gpus(1, power_mw=50_000)
    with open_nvml(fake) as m:
        start = m.snapshot()
        fake.advance(1.0)
        fake.reload_driver(0)
        fake.advance(0.5)
        end = m.snapshot()
        reloaded = phase_energy(m.source, m.domains(), start, end, None)
        after = window(m, fake, 1.0)
    assert end.faults == start.faults + 1
    assert "driver reload" in end.notes["gpu-0"]
    assert not reloaded.valid and reloaded.gross_mj is None
    assert any("driver reload" in r for r in reloaded.reasons)
    # Rebased, not wrapped: the next window is whole and right.
    assert after.valid and after.gross_mj == 50_000


def test_mig_mode_is_refused() -> None:
    fake = FakeNVML([FakeGpu("GPU-a"), FakeGpu("GPU-b", mig=True)])
    with pytest.raises(MeterUnavailableError) as info:
        open_nvml(fake)
    assert "MIG slices cannot be metered separately" in info.value.message
    assert "\n" not in info.value.message
    assert fake.inits == 0
    # The GPU that is not in MIG mode can still be metered on its own.
    with open_nvml(fake, gpus=["0"]) as m:
        assert [d.name for d in m.domains()] == ["gpu-0"]


def test_gpu_without_mig_support_is_fine() -> None:
    fake = FakeNVML([FakeGpu("GPU-a", mig_capable=False)])
    with open_nvml(fake) as m:
        assert m.domains()[0].kind == "gpu"


def test_no_pynvml_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if nvidia-ml-py were absent
    with pytest.raises(MeterUnavailableError, match="nvidia-ml-py") as info:
        NvmlMeter()
    assert "\n" not in info.value.message


def test_no_driver_or_no_gpu_is_unavailable() -> None:
    with pytest.raises(MeterUnavailableError, match="NVML unavailable"):
        open_nvml(FakeNVML(driver_loaded=False))
    empty = FakeNVML()
    with pytest.raises(MeterUnavailableError, match="no NVIDIA GPU"):
        open_nvml(empty)
    assert empty.inits == 0


def test_neither_counter_nor_power_is_unavailable() -> None:
    fake = FakeNVML([FakeGpu("GPU-a", energy_supported=False, power_fails=True)])
    with pytest.raises(MeterUnavailableError, match="neither"):
        open_nvml(fake)
    assert fake.inits == 0


def test_failed_power_read_after_open_is_a_fault() -> None:
    fake = FakeNVML([FakeGpu("GPU-a", energy_supported=False)])
    with open_nvml(fake) as m:
        start = m.snapshot()
        fake.gpus[0].power_fails = True
        fake.advance(1.0)
        end = m.snapshot()
    pe = phase_energy(m.source, m.domains(), start, end, None)
    assert not pe.valid and pe.gross_mj is None


def test_close_is_idempotent() -> None:
    fake = FakeNVML.with_gpus(1)
    m = open_nvml(fake)
    m.close()
    m.close()
    assert fake.inits == 0
