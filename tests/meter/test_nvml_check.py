"""bench/nvml_check.py against the fake NVML module (no GPU is needed to run these)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from .fakes import FakeNVML

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nvml_check", REPO / "bench" / "nvml_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["nvml_check"] = module
    spec.loader.exec_module(module)
    return module


class Power:
    """A load that sets the fake board's power; `bursty` flips it every few ticks."""

    def __init__(self, nvml: FakeNVML, name: str, mw: int, *, on_ms: int = 0, off_ms: int = 0):
        self.nvml, self.name, self.mw = nvml, name, mw
        self.on_ms, self.off_ms = on_ms, off_ms
        self.running = False
        self.started_ns = 0

    def start(self) -> None:
        self.running = True
        self.started_ns = self.nvml.now_ns
        self.tick()

    def stop(self) -> None:
        self.running = False
        self.tick()

    def tick(self) -> None:
        mw = 70_000
        if self.running:
            mw = self.mw
            if self.on_ms:
                phase_ms = (self.nvml.now_ns - self.started_ns) // 1_000_000
                mw = self.mw if phase_ms % (self.on_ms + self.off_ms) < self.on_ms else 70_000
        for g in self.nvml.gpus:
            g.power_mw = mw


def test_counter_and_power_agree_and_the_counters_period_is_found(check: ModuleType) -> None:
    nvml = FakeNVML.with_gpus(1)
    loads = [
        Power(nvml, "idle", 70_000),
        Power(nvml, "steady", 400_000),
        Power(nvml, "bursty", 400_000, on_ms=200, off_ms=300),
    ]

    def sleep(seconds: float) -> None:
        # Fake time moves in 1 ms steps so a bursty load flips on time.
        remaining = round(seconds * 1e9)
        while remaining > 0:
            step = min(remaining, 1_000_000)
            nvml.advance(step / 1e9)
            remaining -= step
            for load in loads:
                if load.running:
                    load.tick()

    rows = check.measure(
        nvml, loads, window_s=5.0, sample_s=0.01, period_s=1.0, clock=nvml.clock, sleep=sleep
    )
    assert nvml.inits == 0  # initialised and shut down
    assert [r.load for r in rows] == ["idle", "steady", "bursty"]
    expected_j = {"idle": 70 * 5, "steady": 400 * 5, "bursty": (0.4 * 400 + 0.6 * 70) * 5}
    for r in rows:
        # The fake counter shows new energy every 100 ms.
        assert r.period_med_ms == pytest.approx(100, abs=2) and r.period_max_ms <= 102, r
        assert r.samples >= 500, r
        assert r.power_j == pytest.approx(expected_j[r.load], rel=0.02), r
        # The counter sits within one period's energy at each end of the integral.
        assert abs(r.counter_j - r.power_j) <= 2 * r.edge_j + 0.01 * r.power_j, r

    table = check.render(rows, how="fake loads", sample_s=0.01)
    assert table.startswith(check.HEADING)
    assert table.count("\n| 0: NVIDIA H100 80GB HBM3 |") == 3


def test_a_counter_that_never_moves_has_no_period(check: ModuleType) -> None:
    nvml = FakeNVML.with_gpus(1, power_mw=0)
    rows = check.measure(
        nvml,
        [check.Idle()],
        window_s=0.5,
        period_s=0.3,
        settle_s=0.0,
        clock=nvml.clock,
        sleep=nvml.sleep,
    )
    assert rows[0].period_med_ms is None and rows[0].edge_j is None
    assert rows[0].ratio is None  # no power: no ratio, never a division by zero
    assert "| – |" in check.render(rows, how="none", sample_s=0.01)


def test_the_section_replaces_an_earlier_one_in_results(check: ModuleType, tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Issue 3: meter\n\nold\n")
    check.put_in_results(f"{check.HEADING}\n\nfirst\n", results)
    check.put_in_results(f"{check.HEADING}\n\nsecond\n", results)
    text = results.read_text()
    assert text.count(check.HEADING) == 1 and "second" in text and "first" not in text
    assert "## Issue 3: meter\n\nold" in text


def test_the_script_runs_end_to_end_on_the_fake_module(
    check: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The command line, in real time, without a GPU library: the idle row only."""
    monkeypatch.setattr(check, "OUT", tmp_path)
    monkeypatch.setattr(check, "gpu_step", lambda gpu: (None, "no GPU load (test)"))
    section = check.main(
        ["--window", "0.05", "--period-s", "0.05", "--sample-ms", "10"], nvml=FakeNVML.with_gpus(1)
    )
    assert (tmp_path / "nvml.md").read_text() == section
    assert "| 0: NVIDIA H100 80GB HBM3 | idle |" in section and "no GPU load (test)" in section
