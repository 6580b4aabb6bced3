from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from jouled.meter.probe import probe
from jouled.meter.rapl import read_text

from .fakes import FakeClock, FakeGpu, FakeNVML, FakePowercap


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def host(tmp_path: Path, clock: FakeClock) -> FakePowercap:
    """Every kind of zone a probe has to explain."""
    fake = FakePowercap(tmp_path / "powercap")
    fake.package(0, name="package-0-die-0")
    fake.package(1, name="package-0-die-1")
    fake.mirror("intel-rapl:1", of="intel-rapl:0")
    fake.subzone("intel-rapl:0", 0, "core")
    fake.subzone("intel-rapl:0", 1, "uncore")
    fake.subzone("intel-rapl:0", 2, "dram")
    fake.psys(2)
    fake.zone("intel-rapl-mmio:0", "package-0-die-0", max_uj=None)
    fake.drive(clock, {"intel-rapl:0": 60.0, "intel-rapl:0:2": 3.0, "intel-rapl:2": 90.0})
    return fake


def zones_by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {z["id"]: z for z in report["rapl"]["zones"]}


def test_probe_explains_every_zone(host: FakePowercap, clock: FakeClock) -> None:
    gpus = FakeNVML([FakeGpu("GPU-a"), FakeGpu("GPU-b", energy_supported=False)])
    report: dict[str, Any] = probe(host.root, gpus, sleep=clock.sleep, busy=clock.sleep)
    zones = zones_by_id(report)
    assert report["rapl"]["available"] is True
    assert report["rapl"]["selected"] == ["package-0-die-0"]
    assert zones["intel-rapl:0"]["selected"] is True
    assert "mirrors package-0-die-0" in zones["intel-rapl:1"]["reason"]
    assert "inside its package" in zones["intel-rapl:0:0"]["reason"]
    assert "inside its package" in zones["intel-rapl:0:1"]["reason"]
    assert "opt-in" in zones["intel-rapl:0:2"]["reason"]
    assert "alternative" in zones["intel-rapl:2"]["reason"]
    assert "MMIO" in zones["intel-rapl-mmio:0"]["reason"]
    assert zones["intel-rapl-mmio:0"]["wrap"].startswith("unknown")
    assert all(z["readable"] for z in zones.values())

    nvml = report["nvml"]
    assert nvml["available"] is True
    assert [(g["domain"], g["energy_counter"], g["kind"]) for g in nvml["gpus"]] == [
        ("gpu-0", True, "gpu"),
        ("gpu-1", False, "gpu-power"),
    ]
    assert report["auto"]["source"] == "rapl+nvml"
    assert report["auto"]["domains"] == ["package-0-die-0", "gpu-0", "gpu-1"]


def test_probe_with_options_selects_what_the_meter_would(
    host: FakePowercap, clock: FakeClock
) -> None:
    report: dict[str, Any] = probe(
        host.root, FakeNVML(), zones="psys", dram=True, sleep=clock.sleep, busy=clock.sleep
    )
    assert report["rapl"]["selected"] == ["psys"]
    assert "inside psys" in zones_by_id(report)["intel-rapl:0:2"]["reason"]
    assert report["nvml"]["available"] is False
    assert report["auto"]["source"] == "rapl"


def test_probe_reports_permission_problems_with_the_fix(
    host: FakePowercap, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)

    def reader(path: Path) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path)

    report: dict[str, Any] = probe(host.root, reader=reader, sleep=clock.sleep)
    rapl = report["rapl"]
    assert rapl["available"] is False
    assert "permission denied" in rapl["problem"]
    assert "CVE-2020-8694" in rapl["fix"]
    zone = zones_by_id(report)["intel-rapl:0"]
    assert zone["readable"] is False and "99-jouled-powercap.rules" in zone["fix"]
    assert report["nvml"]["available"] is False
    assert "nvidia-ml-py" in report["nvml"]["problem"]
    assert report["nvml"]["fix"]
    assert report["auto"]["source"] == "estimator"


def test_probe_reports_mig_and_missing_rapl(tmp_path: Path, clock: FakeClock) -> None:
    gpus = FakeNVML([FakeGpu("GPU-a", mig=True)])
    report: dict[str, Any] = probe(tmp_path / "nothing", gpus, sleep=clock.sleep)
    assert report["rapl"]["available"] is False
    assert "no RAPL zones" in report["rapl"]["problem"]
    gpu = report["nvml"]["gpus"][0]
    assert gpu["mig"] is True and gpu["selected"] is False
    assert "MIG slices cannot be metered separately" in report["nvml"]["problem"]
    assert report["auto"]["source"] == "estimator"
    assert gpus.inits == 0


def test_probe_reports_a_frozen_counter(tmp_path: Path, clock: FakeClock) -> None:
    """A package whose counter stands still while the probe keeps a CPU busy would
    sign every window 0 J: the probe says so, and auto would not meter it."""
    fake = FakePowercap(tmp_path / "powercap")
    fake.package(0)
    fake.package(1)
    fake.drive(clock, {"intel-rapl:0": 20.0})  # package-1 never moves
    spun: list[float] = []

    def busy(seconds: float) -> None:
        spun.append(seconds)
        clock.sleep(seconds)

    report: dict[str, Any] = probe(fake.root, FakeNVML(), sleep=clock.sleep, busy=busy)
    rapl = report["rapl"]
    assert spun, "the probe never kept a CPU busy"
    assert rapl["available"] is False
    assert "frozen" in rapl["problem"]
    zones = zones_by_id(report)
    assert "frozen" in zones["intel-rapl:1"]["problem"]
    assert "problem" not in zones["intel-rapl:0"]
    assert report["auto"]["source"] == "estimator"
