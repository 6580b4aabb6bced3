"""Fakes of the hardware boundary only.

`FakePowercap` is a real directory tree shaped like /sys/class/powercap
(name, energy_uj, max_energy_range_uj files), and `FakeNVML` stands in for the
`pynvml` module. Everything above that boundary (zone discovery and selection,
wraparound, the sampler, NVML fallbacks, windows) is the real code under test.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What a common Intel package reports: 2^32 energy units of 61.035 uJ.
DEFAULT_MAX_UJ = 262_143_328_850


class FakeClock:
    """A `time.monotonic_ns` stand-in whose `sleep` moves time and runs listeners
    (counters that advance with it)."""

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self.now_ns = start_ns
        self._listeners: list[Callable[[float], None]] = []

    def __call__(self) -> int:
        return self.now_ns

    def on_advance(self, listener: Callable[[float], None]) -> None:
        self._listeners.append(listener)

    def sleep(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1e9)
        for listener in self._listeners:
            listener(seconds)


class FakePowercap:
    """A powercap sysfs tree on disk. Fakes the hardware boundary only."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._paths: dict[str, Path] = {}
        self._max: dict[str, int | None] = {}
        self._mirrors: dict[str, list[str]] = {}

    # -- building ---------------------------------------------------------------------

    def zone(
        self,
        zone_id: str,
        name: str,
        *,
        energy_uj: int = 0,
        max_uj: int | None = DEFAULT_MAX_UJ,
        max_power_uw: Sequence[int] = (),
        power_limit_uw: Sequence[int] = (),
        max_power_range_uw: int | None = None,
    ) -> str:
        """A zone; `max_power_uw` and `power_limit_uw` give one
        `constraint_N_max_power_uw` / `constraint_N_power_limit_uw` file per value
        (long term, short term, ...), as the intel_rapl driver exposes them;
        `max_power_range_uw` the zone's own file."""
        parent = zone_id.rsplit(":", 1)[0] if zone_id.count(":") == 2 else ""
        path = (self._paths[parent] if parent else self.root) / zone_id
        path.mkdir(parents=True)
        (path / "name").write_text(f"{name}\n")
        (path / "enabled").write_text("1\n")
        if max_uj is not None:
            (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
        for n in range(max(len(max_power_uw), len(power_limit_uw))):
            (path / f"constraint_{n}_name").write_text("long_term\n" if n == 0 else "short_term\n")
        for n, uw in enumerate(max_power_uw):
            (path / f"constraint_{n}_max_power_uw").write_text(f"{uw}\n")
        for n, uw in enumerate(power_limit_uw):
            (path / f"constraint_{n}_power_limit_uw").write_text(f"{uw}\n")
        if max_power_range_uw is not None:
            (path / "max_power_range_uw").write_text(f"{max_power_range_uw}\n")
        self._paths[zone_id] = path
        self._max[zone_id] = max_uj
        self.set(zone_id, energy_uj)
        return zone_id

    def package(
        self,
        n: int,
        *,
        name: str = "",
        energy_uj: int = 0,
        max_uj: int | None = DEFAULT_MAX_UJ,
        max_power_uw: Sequence[int] = (),
        power_limit_uw: Sequence[int] = (),
        max_power_range_uw: int | None = None,
    ) -> str:
        return self.zone(
            f"intel-rapl:{n}",
            name or f"package-{n}",
            energy_uj=energy_uj,
            max_uj=max_uj,
            max_power_uw=max_power_uw,
            power_limit_uw=power_limit_uw,
            max_power_range_uw=max_power_range_uw,
        )

    def psys(self, n: int = 1, *, energy_uj: int = 0, max_uj: int | None = DEFAULT_MAX_UJ) -> str:
        return self.zone(f"intel-rapl:{n}", "psys", energy_uj=energy_uj, max_uj=max_uj)

    def subzone(
        self,
        parent: str,
        m: int,
        name: str,
        *,
        energy_uj: int = 0,
        max_uj: int | None = DEFAULT_MAX_UJ,
    ) -> str:
        return self.zone(f"{parent}:{m}", name, energy_uj=energy_uj, max_uj=max_uj)

    def mmio_package(
        self, n: int, *, energy_uj: int = 0, max_uj: int | None = DEFAULT_MAX_UJ
    ) -> str:
        return self.zone(f"intel-rapl-mmio:{n}", f"package-{n}", energy_uj=energy_uj, max_uj=max_uj)

    def mirror(self, zone_id: str, *, of: str) -> None:
        """`zone_id` shows the very counter `of` shows (one counter per die)."""
        self._mirrors.setdefault(of, []).append(zone_id)
        self.set(of, self.read(of))

    def flat_links(self) -> None:
        """List subzones flat at the root as well, as /sys/class/powercap does."""
        for zone_id, path in self._paths.items():
            flat = self.root / zone_id
            if not flat.exists():
                flat.symlink_to(path, target_is_directory=True)

    def max_uj(self, zone_id: str) -> int | None:
        return self._max[zone_id]

    def remove_max(self, zone_id: str) -> None:
        (self._paths[zone_id] / "max_energy_range_uj").unlink()
        self._max[zone_id] = None

    # -- counters ---------------------------------------------------------------------

    def energy_path(self, zone_id: str) -> Path:
        return self._paths[zone_id] / "energy_uj"

    def read(self, zone_id: str) -> int:
        return int(self.energy_path(zone_id).read_text())

    def set(self, zone_id: str, value: int) -> None:
        # Replace, not rewrite: a reader on another thread never sees half a number.
        for target in (zone_id, *self._mirrors.get(zone_id, ())):
            path = self.energy_path(target)
            tmp = path.with_name(".energy_uj.tmp")
            tmp.write_text(f"{value}\n")
            os.replace(tmp, path)

    def write_raw(self, zone_id: str, text: str) -> None:
        self.energy_path(zone_id).write_text(text)

    def add(self, zone_id: str, uj: int) -> None:
        """Advance a counter by `uj`, wrapping the way the hardware does."""
        top = self._max[zone_id]
        value = self.read(zone_id) + uj
        self.set(zone_id, value % (top + 1) if top is not None else value)

    def drive(self, clock: FakeClock, watts: Mapping[str, float]) -> None:
        """Advance the named counters at constant power whenever `clock` sleeps."""

        def advance(seconds: float) -> None:
            for zone_id, w in watts.items():
                self.add(zone_id, round(w * seconds * 1e6))

        clock.on_advance(advance)


# -- counters read at the moment of the read --------------------------------------------

_IN_OPEN = 0x20
_IN_CLOSE_NOWRITE = 0x10
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")


class LiveCounters:
    """`energy_uj` files that, like sysfs, produce their value when they are read.

    Each chosen zone's `energy_uj` becomes a FIFO that this object holds open
    for reading and writing, so a reader's open never blocks and its read waits
    for data. An inotify watch reports every open; for each one a thread writes
    `counter(time.monotonic_ns())` wrapped at the zone's range. The value is
    therefore the counter at an instant between the reader's open and the end of
    its read, however late any thread runs: a meter that brackets its read with
    the clock has the true instant inside the bracket. Works across processes.
    A FIFO that a reader opened and closed without reading is drained, so the
    next reader never sees a stale value. A reader must read once, as the
    meter does: one that reads to end of file waits forever. Linux only.
    """

    def __init__(self, fake: FakePowercap, counters: Mapping[str, Callable[[int], int]]) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._inotify = self._libc.inotify_init1(_IN_CLOEXEC)
        if self._inotify < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._zones: dict[int, tuple[int, Callable[[int], int], int | None]] = {}
        self.reads = dict.fromkeys(counters, 0)
        self._names: dict[int, str] = {}
        for zone_id, counter in counters.items():
            path = fake.energy_path(zone_id)
            path.unlink()
            os.mkfifo(path)
            # O_RDWR: the FIFO always has a writer (a reader never blocks in open)
            # and this side can drain what nobody read.
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            wd = self._libc.inotify_add_watch(
                self._inotify, os.fsencode(path), _IN_OPEN | _IN_CLOSE_NOWRITE
            )
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {path} failed")
            self._zones[wd] = (fd, counter, fake.max_uj(zone_id))
            self._names[wd] = zone_id
        self.errors: list[BaseException] = []
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="fake-sysfs", daemon=True)
        self._thread.start()

    def close(self) -> None:
        os.write(self._stop_w, b"x")
        self._thread.join(timeout=10)
        for fd, _, _ in self._zones.values():
            os.close(fd)
        for fd in (self._inotify, self._stop_r, self._stop_w):
            os.close(fd)

    def __enter__(self) -> LiveCounters:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self._inotify, self._stop_r], [], [])
                if self._stop_r in ready:
                    return
                data = os.read(self._inotify, 65536)
                for offset in _event_offsets(data):
                    wd, mask, _, _ = _EVENT.unpack_from(data, offset)
                    if wd in self._zones:
                        self._serve(wd, mask)
        except BaseException as err:  # surfaced by the test, not lost on a thread
            self.errors.append(err)

    def _serve(self, wd: int, mask: int) -> None:
        fd, counter, top = self._zones[wd]
        if mask & _IN_OPEN:
            uj = counter(time.monotonic_ns())
            os.write(fd, f"{uj % (top + 1) if top is not None else uj}\n".encode())
            self.reads[self._names[wd]] += 1
        elif mask & _IN_CLOSE_NOWRITE:
            # Opens and closes come in order: whatever is left now was never read.
            with contextlib.suppress(BlockingIOError):
                os.read(fd, 4096)


def _event_offsets(data: bytes) -> list[int]:
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += _EVENT.size + _EVENT.unpack_from(data, offset)[3]
    return offsets


# -- NVML ---------------------------------------------------------------------------------

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_UNINITIALIZED = 1
NVML_DEVICE_MIG_ENABLE = 1
COUNTER_STEP_NS = 100_000_000  # the energy counter updates every 100 ms


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    power_mw: int = 70_000
    energy_supported: bool = True
    mig: bool = False
    mig_capable: bool = True
    power_fails: bool = False
    # Energy since the (fake) driver loaded: a counter that starts far from zero.
    energy_uj: int = 5_000_000_000
    shown_mj: int = field(default=-1)

    def __post_init__(self) -> None:
        if self.shown_mj < 0:
            self.shown_mj = self.energy_uj // 1000


class FakeNVML:
    """Stands in for the `pynvml` module. Fakes the hardware boundary only.

    Time is fake: `advance()` (also `sleep`) moves it; each GPU's total-energy
    counter advances at its `power_mw` but, as on real boards, only shows new
    energy at every 100 ms boundary.
    """

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE

    def __init__(self, gpus: Sequence[FakeGpu] = (), *, driver_loaded: bool = True) -> None:
        self.gpus = list(gpus)
        self.driver_loaded = driver_loaded
        self.now_ns = 1_000_000_000
        self.inits = 0

    @classmethod
    def with_gpus(cls, count: int, **kw: Any) -> FakeNVML:
        return cls([FakeGpu(uuid=f"GPU-{i:08d}-fake", **kw) for i in range(count)])

    # -- test controls ----------------------------------------------------------------

    def clock(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        remaining = round(seconds * 1e9)
        while remaining > 0:
            dt = min(remaining, COUNTER_STEP_NS - self.now_ns % COUNTER_STEP_NS)
            for g in self.gpus:
                g.energy_uj += g.power_mw * dt // 1_000_000  # mW x ns = pJ
            self.now_ns += dt
            remaining -= dt
            if self.now_ns % COUNTER_STEP_NS == 0:
                for g in self.gpus:
                    g.shown_mj = g.energy_uj // 1000

    sleep = advance

    def reload_driver(self, index: int) -> None:
        """The driver reloads: the energy counter starts again from zero."""
        g = self.gpus[index]
        g.energy_uj = 0
        g.shown_mj = 0

    # -- the pynvml surface -----------------------------------------------------------

    def _check(self) -> None:
        if self.inits <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def nvmlInit(self) -> None:
        if not self.driver_loaded:
            raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        self._check()
        return handle.uuid

    def nvmlDeviceGetName(self, handle: FakeGpu) -> bytes:
        self._check()
        return handle.name.encode()  # older bindings return bytes

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeGpu) -> int:
        self._check()
        if not handle.energy_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle.shown_mj

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        self._check()
        if handle.power_fails:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle.power_mw

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> list[int]:
        self._check()
        if not handle.mig_capable:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        mode = NVML_DEVICE_MIG_ENABLE if handle.mig else 0
        return [mode, mode]
