"""End to end: the real daemon metering RAPL from a fake powercap tree that runs in real time.

Only the hardware boundary is fake: `PoweredTree` serves `energy_uj` the way the
kernel's powercap driver does, producing each counter's value at the moment it
is read, advancing at a known power and wrapping at a small
`max_energy_range_uj`. Everything above it (zone discovery, ceilings from the
constraint files, the sampler's wraparound handling, start-up idle
calibration, metered phases, the signed receipts, `jb-client`) is the real
daemon in its own process.

Nothing here compares against wall-clock expectations of its own: the daemon
brackets every counter read with its clock and states, per window, how far
the reads may sit from its edges (`edge_us`) and, per calibrated domain, how
far that can move idle power (`timing_mw`). A counter produced at the moment
of the read is inside that bracket however late either process runs, so
every figure is checked exactly against the power schedule, to within those
stated bounds and whole-millijoule rounding.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from ..meter.fakes import FakePowercap, LiveCounters
from .conftest import Daemon, start_daemon

# Two sockets at different powers: a mirror probe (which looks for identical
# deltas) must keep both, and the receipts must sum them.
IDLE_W = {"intel-rapl:0": 60.0, "intel-rapl:1": 40.0}
BUSY_W = {"intel-rapl:0": 300.0, "intel-rapl:1": 200.0}
DOMAIN = {"intel-rapl:0": "package-0", "intel-rapl:1": "package-1"}
# What each zone's constraint files declare (long term, short term); twice the
# larger is under the 1000 W floor for a package, which is the ceiling then.
MAX_POWER_UW = {"intel-rapl:0": (250_000_000, 320_000_000), "intel-rapl:1": (250_000_000,)}
P_IDLE = sum(IDLE_W.values())
P_BUSY = sum(BUSY_W.values())

# 640 J wraps every 2.1 s / 3.2 s at the busy powers above, several times per
# run; at the zones' 1000 W ceilings the daemon reads every 160 ms (more often
# near the top) and only calls a gap a fault past 640 ms, slack a loaded 2-core
# machine needs. The watts are higher than a laptop's only so that this range
# wraps during a ~10 s test.
MAX_RANGE_UJ = 640_000_000
# Start close to the top so that a wrap also lands inside start-up calibration.
START_UJ = {"intel-rapl:0": MAX_RANGE_UJ - 50_000_000, "intel-rapl:1": MAX_RANGE_UJ - 70_000_000}
CALIBRATE_SECONDS = 2


class PoweredTree:
    """Fakes the hardware boundary only: RAPL package counters that advance in
    real time at a settable constant power and wrap at `max_energy_range_uj`.

    Each counter's unwrapped value is the exact integral of the power schedule
    (kept in integer picojoules, so no rounding accumulates), evaluated at the
    moment the daemon reads `energy_uj` (`LiveCounters`), or, with `step_ns`, at
    the last multiple of `step_ns` before it: a counter that shows new energy
    only every `step_ns`, as RAPL does about every millisecond.
    """

    def __init__(self, root: Path, step_ns: int = 0) -> None:
        self.step_ns = step_ns
        self.fake = FakePowercap(root)
        for zone_id, start in START_UJ.items():
            self.fake.zone(
                zone_id,
                DOMAIN[zone_id],
                energy_uj=start,
                max_uj=MAX_RANGE_UJ,
                max_power_uw=MAX_POWER_UW[zone_id],
            )
        self._lock = threading.Lock()
        self._t0 = time.monotonic_ns()
        self._base_pj = {z: uj * 1_000_000 for z, uj in START_UJ.items()}
        self._mw = {z: round(w * 1000) for z, w in IDLE_W.items()}
        self._live = LiveCounters(self.fake, {z: self._counter(z) for z in START_UJ})

    def _counter(self, zone_id: str) -> Any:
        step = self.step_ns
        if step:
            return lambda t_ns: self.unwrapped_uj(t_ns - t_ns % step)[zone_id]
        return lambda t_ns: self.unwrapped_uj(t_ns)[zone_id]

    @property
    def errors(self) -> list[BaseException]:
        return self._live.errors

    def close(self) -> None:
        self._live.close()

    def set_power(self, watts: Mapping[str, float]) -> None:
        """Change power from now on; energy so far is folded into the base."""
        with self._lock:
            now = time.monotonic_ns()
            for zone_id in self._base_pj:
                self._base_pj[zone_id] += self._mw[zone_id] * (now - self._t0)  # mW x ns = pJ
                self._mw[zone_id] = round(watts[zone_id] * 1000)
            self._t0 = now

    def unwrapped_uj(self, t_ns: int | None = None) -> dict[str, int]:
        with self._lock:
            dt = max(0, (time.monotonic_ns() if t_ns is None else t_ns) - self._t0)
            return {z: (pj + self._mw[z] * dt) // 1_000_000 for z, pj in self._base_pj.items()}

    def wraps(self) -> dict[str, int]:
        """How many times each counter has passed its top since the tree was built."""
        return {z: uj // (MAX_RANGE_UJ + 1) for z, uj in self.unwrapped_uj().items()}


@pytest.fixture
def powered(tmp_path: Path) -> Iterator[PoweredTree]:
    # In memory where possible, like sysfs: a rename on a journalling disk
    # filesystem can take milliseconds, and every such stall is energy the
    # daemon sees late at a window's edge.
    shm = Path("/dev/shm")
    in_memory = shm.is_dir() and os.access(shm, os.W_OK)
    with tempfile.TemporaryDirectory(prefix="powercap-", dir=shm if in_memory else tmp_path) as d:
        tree = PoweredTree(Path(d) / "powercap")
        try:
            yield tree
        finally:
            tree.close()
    assert not tree.errors, tree.errors


def start_rapl_daemon(data_dir: Path, powered: PoweredTree, *extra: str) -> Daemon:
    """A daemon metering `powered` with RAPL after a real start-up calibration."""
    # start_daemon passes `--energy estimator --calibrate-seconds 0` first; a
    # repeated option's last value wins, so these flags take effect.
    return start_daemon(
        data_dir,
        "--energy",
        "rapl",
        "--calibrate-seconds",
        str(CALIBRATE_SECONDS),
        *extra,
        env={"JOULED_POWERCAP_ROOT": str(powered.fake.root)},
    )


@pytest.fixture
def rapl_daemon(tmp_path: Path, powered: PoweredTree) -> Iterator[Daemon]:
    d = start_rapl_daemon(tmp_path / "data", powered)
    try:
        yield d
    finally:
        if d.proc.poll() is None:
            assert d.stop() == 0, d.log.read_text()


def within(actual: int | None, watts: float, e: Mapping[str, Any]) -> bool:
    """`actual` mJ is `watts` over the window's wall time, give or take what its
    stated edges allow at that power and 2 mJ of rounding to whole millijoules."""
    assert actual is not None
    # W x us = uJ
    return abs(actual * 1000 - watts * e["wall_us"]) <= watts * e["edge_us"] + 2000


def check_phase(
    phase: str, task: str, e: Mapping[str, Any], cal: Mapping[str, Any], log: str
) -> None:
    where = f"{task} {phase}: {e}\n--- daemon log ---\n{log}"
    assert e["source"] == "rapl", where
    assert e["valid"] is True, where
    assert e["reliable"] is True, where
    assert e["attribution"] == "exclusive", where
    assert e["calibration_seq"] == cal["seq"], where
    assert within(e["gross_mj"], P_BUSY, e), where
    assert set(e["domains"]) == set(DOMAIN.values()), where
    for zone_id, name in DOMAIN.items():
        assert within(e["domains"][name], BUSY_W[zone_id], e), where
    # Idle is the signed calibration's power over the same wall time, exactly: each
    # domain rounds down to whole millijoules of the window timed in nanoseconds, which
    # wall_us rounds to the nearest microsecond (half of one at idle power either way).
    idle_mw = sum(d["idle_mw"] for d in cal["domains"].values())
    half_us = idle_mw / 2e6
    assert -half_us <= idle_mw * e["wall_us"] / 1e6 - e["idle_mj"] < len(DOMAIN) + 1, where
    assert e["marginal_mj"] == e["gross_mj"] - e["idle_mj"], where


def test_daemon_meters_a_wrapping_rapl_counter(rapl_daemon: Daemon, powered: PoweredTree) -> None:
    # Calibration ran inside start-up, before the daemon reported SERVING.
    wraps_at_serving = powered.wraps()
    powered.set_power(BUSY_W)

    report = rapl_daemon.client_json("run", "--suite", "smoke", "--solvers", "reference")
    wraps_after_run = powered.wraps()
    meter = rapl_daemon.client_json("meter")
    log = rapl_daemon.log.read_text()

    cal = meter["calibration"]
    assert cal is not None and cal["source"] == "rapl", meter
    assert cal["seq"] is not None
    # The idle power the daemon signed is the true one, to within the timing
    # bound it signed with it (and 1 mW of rounding).
    for zone_id, name in DOMAIN.items():
        d = cal["domains"][name]
        assert abs(d["idle_mw"] - IDLE_W[zone_id] * 1000) <= d["timing_mw"] + 1, cal

    receipts = report["receipts"]
    assert receipts, report
    for r in receipts:
        assert r["status"] == "resolved", r
        check_phase("grade", r["task_id"], r["energy"]["grade"], cal, log)
        # The baseline run is metered the same way: a second window to check.
        if "baseline" in r["energy"]:
            check_phase("baseline", r["task_id"], r["energy"]["baseline"], cal, log)

    # Wraps really happened while the daemon metered: in calibration and during the run.
    assert all(n >= 1 for n in wraps_at_serving.values()), wraps_at_serving
    during_run = {z: wraps_after_run[z] - wraps_at_serving[z] for z in DOMAIN}
    assert sum(during_run.values()) >= 3, during_run
    # Sampler faults outside the metered windows are not checked: on a loaded
    # machine the daemon's poll can slip past its gap limit while, say, the server
    # starts, and the daemon then rightly invalidates only windows spanning it.

    assert meter["source"] == "rapl" and meter["measured"] is True, meter
    assert sorted(d["name"] for d in meter["domains"]) == sorted(DOMAIN.values()), meter
    assert {d["source"] for d in meter["domains"]} == {"rapl"}, meter
    assert meter["rapl"]["root"] == str(powered.fake.root), meter
    ceilings = {z["id"]: z["ceiling_w"] for z in meter["rapl"]["zones"]}
    assert ceilings == {"intel-rapl:0": 1000.0, "intel-rapl:1": 1000.0}, meter

    # The text form: a row per zone with its range, ceiling, last read and timing,
    # and no host path (the JSON above has them).
    rapl_daemon.extra_env["COLUMNS"] = "200"
    shown = rapl_daemon.client("meter")
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert str(powered.fake.root) not in text and "/dev/shm" not in text, text
    for zone_id, name in DOMAIN.items():
        row = next(line for line in text.splitlines() if f"{name} ({zone_id})" in line)
        assert "640.0 J" in row and "1000 W" in row and "ms ago" in row, text
        assert "(calibrated)" in row, text


def test_a_frozen_counter_makes_a_graded_window_null_never_zero(
    tmp_path: Path, powered: PoweredTree
) -> None:
    """Both packages stop counting (an emulated RAPL, a firmware stub) while the
    graded tests run: the daemon signs no figure for that window, and says why."""
    powered.set_power(dict.fromkeys(DOMAIN, 0.0))
    frozen = powered.unwrapped_uj()
    d = start_rapl_daemon(tmp_path / "data", powered)
    try:
        report = d.client_json("run", "--suite", "smoke", "--solvers", "reference")
        log = d.log.read_text()
    finally:
        assert d.stop() == 0, d.log.read_text()
    assert powered.unwrapped_uj() == frozen  # the counters really stood still
    receipts = report["receipts"]
    assert receipts, report
    for r in receipts:
        # The grade itself stands; only its energy has no figure.
        assert r["status"] == "resolved", r
        e = r["energy"]["grade"]
        where = f"{r['task_id']}: {e}\n--- daemon log ---\n{log}"
        assert e["source"] == "rapl" and e["valid"] is False and e["reliable"] is False, where
        assert e["gross_mj"] is None and e["marginal_mj"] is None, where
        assert set(e["domains"].values()) == {None}, where
        assert any("frozen counter" in reason for reason in e["reasons"]), where


@pytest.fixture
def stepped(tmp_path: Path) -> Iterator[PoweredTree]:
    """Counters that show new energy only every 5 ms."""
    shm = Path("/dev/shm")
    in_memory = shm.is_dir() and os.access(shm, os.W_OK)
    with tempfile.TemporaryDirectory(prefix="powercap-", dir=shm if in_memory else tmp_path) as d:
        tree = PoweredTree(Path(d) / "powercap", step_ns=5_000_000)
        try:
            yield tree
        finally:
            tree.close()
    assert not tree.errors, tree.errors


def test_edges_cover_the_counters_own_update_period(tmp_path: Path, stepped: PoweredTree) -> None:
    """A counter read at any point of a 5 ms step misses up to 5 ms of energy: the
    daemon measures that period at calibration from the counter's own steps,
    signs it, and every window's `edge_us` includes it, so each window's energy
    is the power over its wall time within its own stated edges."""
    import json
    import sys

    d = start_rapl_daemon(tmp_path / "data", stepped)
    try:
        stepped.set_power(BUSY_W)
        windows = []
        for _ in range(6):
            done = d.client(
                "meter-run", "--label", "step", "--json", "--",
                sys.executable, "-c", "import time; time.sleep(0.2)",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            windows.append(json.loads(done.stdout)["energy"])
        cal = d.client_json("meter")["calibration"]
        log = d.log.read_text()
    finally:
        assert d.stop() == 0, d.log.read_text()
    for zone_id, name in DOMAIN.items():
        signed = cal["domains"][name]
        # An upper bound: a read that comes late only lengthens it.
        assert 5000 <= signed["update_us"] <= 50_000, cal
        assert abs(signed["idle_mw"] - IDLE_W[zone_id] * 1000) <= signed["timing_mw"] + 1, cal
    for e in windows:
        where = f"{e}\n--- daemon log ---\n{log}"
        assert e["valid"] is True, where
        assert e["edge_us"] >= 5000, where
        assert within(e["gross_mj"], P_BUSY, e), where
        for zone_id, name in DOMAIN.items():
            assert within(e["domains"][name], BUSY_W[zone_id], e), where
