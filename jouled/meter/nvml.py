"""NVIDIA GPUs through NVML (NVIDIA's `nvidia-ml-py`, import name `pynvml`).

Each selected GPU is one domain. The total-energy counter (mJ since the driver
loaded, Volta and newer) is used where two reads at open show it working;
otherwise power is sampled and integrated, and the domain's kind says so
("gpu-power"). The counter is 64-bit and never wraps in practice, so a
backwards step is a driver reload: the domain is rebased and the window that
holds the reload is invalid. A GPU in MIG mode is refused: the counter covers
the whole board, and MIG slices cannot be metered separately.

`pynvml` is imported when a meter opens, never at module import, so hosts
without it lose nothing but this meter.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jouled.errors import ConfigError, MeterUnavailableError
from jouled.meter.base import Domain
from jouled.meter.sampler import Channel, CounterChannel, PowerChannel, SampledMeter, Sampler

SOURCE = "nvml"
# Above any single board's power (a GB200 superchip draws ~2.7 kW).
CEILING_W = 3000.0
COUNTER_PROBE_S = 0.05
# Nothing wraps; polling only notices a driver reload soon after it happens.
COUNTER_INTERVAL_S = 1.0
POWER_INTERVAL_S = 0.1
COUNTER_MIN_WINDOW_MS = 100
# Sampled power is a trailing average (about a second on many boards), so
# shorter windows smear their neighbours in.
POWER_MIN_WINDOW_MS = 1000
RESOLUTION_UJ = 1000
# The counter updates in chunks (some boards every few hundred ms): judge a
# step's power over at least this long.
COUNTER_SLACK_S = 1.0
# Until a calibration measures it, a window's edges allow that long a step.
COUNTER_UPDATE_US = round(COUNTER_SLACK_S * 1e6)
MIG_ENABLED = 1
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED

INSTALL_HINT = "pip install 'joule-bench[nvml]' on a host with an NVIDIA driver"
RELOAD = "counter went backwards: driver reload"


def load_nvml(module: Any = None) -> Any:
    """The `pynvml` module, imported only now; `module` substitutes it in tests."""
    if module is not None:
        return module
    try:
        return importlib.import_module("pynvml")
    except ImportError as err:
        raise MeterUnavailableError(
            "NVML unavailable: nvidia-ml-py (import pynvml) is not installed", hint=INSTALL_HINT
        ) from err


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _not_supported(nvml: Any, err: BaseException) -> bool:
    code = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", NOT_SUPPORTED)
    return getattr(err, "value", None) == code


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML shows it, and how it would be metered."""

    index: int
    uuid: str
    name: str
    handle: Any
    mig: bool
    counter: bool  # the total-energy counter works; else power sampling
    how: str  # why: the counter, or the reason for the fallback

    @property
    def domain(self) -> str:
        return f"gpu-{self.index}"

    def to_dict(self) -> dict[str, object]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "domain": self.domain,
            "mig": self.mig,
            "energy_counter": self.counter,
            "kind": "gpu" if self.counter else "gpu-power",
            "how": self.how,
        }


def init(nvml: Any) -> None:
    try:
        nvml.nvmlInit()
    except Exception as err:
        raise MeterUnavailableError(
            f"NVML unavailable: {_text(err) or type(err).__name__}", hint=INSTALL_HINT
        ) from err


def shutdown(nvml: Any) -> None:
    # Nothing useful can be done about a failed release.
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


def inspect_gpus(
    nvml: Any,
    gpus: Sequence[str] | None = None,
    *,
    probe_s: float = COUNTER_PROBE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Gpu]:
    """The selected GPUs (index or UUID; None = all), each probed. NVML must be initialised."""
    count = int(nvml.nvmlDeviceGetCount())
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
    chosen = _select(gpus, uuids)
    support = _probe_counters(nvml, [handles[i] for i in chosen], probe_s=probe_s, sleep=sleep)
    return [
        Gpu(
            index=i,
            uuid=uuids[i],
            name=_name(nvml, handles[i]),
            handle=handles[i],
            mig=_mig(nvml, handles[i]),
            counter=ok,
            how=how,
        )
        for i, (ok, how) in zip(chosen, support, strict=True)
    ]


def _select(gpus: Sequence[str] | None, uuids: Sequence[str]) -> list[int]:
    if gpus is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for raw in gpus:
        sel = str(raw).strip()
        if sel.isdigit():
            index = int(sel)
            if index >= len(uuids):
                raise ConfigError(f"no GPU with index {index}: NVML sees {len(uuids)}")
        elif sel in uuids:
            index = uuids.index(sel)
        else:
            raise ConfigError(f"no GPU with UUID {sel!r} (try nvidia-smi -L)")
        if index not in chosen:
            chosen.append(index)
    return chosen


def _name(nvml: Any, handle: Any) -> str:
    try:
        return _text(nvml.nvmlDeviceGetName(handle))
    except Exception:
        return ""


def _mig(nvml: Any, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # not MIG-capable, or bindings older than MIG
        return False
    return int(current) == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", MIG_ENABLED)


def _probe_counters(
    nvml: Any, handles: Sequence[Any], *, probe_s: float, sleep: Callable[[float], None]
) -> list[tuple[bool, str]]:
    def read(h: Any) -> int | BaseException:
        try:
            return int(nvml.nvmlDeviceGetTotalEnergyConsumption(h))
        except Exception as err:
            return err

    if not handles:
        return []
    first = [read(h) for h in handles]
    sleep(probe_s)
    second = [read(h) for h in handles]
    out = []
    for a, b in zip(first, second, strict=True):
        err = a if isinstance(a, BaseException) else b if isinstance(b, BaseException) else None
        if err is not None:
            why = "not supported" if _not_supported(nvml, err) else f"unreadable ({_text(err)})"
            out.append((False, f"energy counter {why}: power sampled and integrated"))
        elif isinstance(a, int) and isinstance(b, int) and b < a:
            out.append((False, "energy counter went backwards while probed: power sampled"))
        elif a == b == 0:
            out.append((False, "energy counter reads 0: power sampled and integrated"))
        else:
            out.append((True, "total-energy counter (mJ)"))
    return out


class NvmlMeter(SampledMeter):
    """Selected NVIDIA GPUs, one domain each, polled by a sampler thread."""

    def __init__(
        self,
        gpus: Sequence[str] | None = None,
        *,
        nvml_module: Any = None,
        ceiling_w: float = CEILING_W,
        probe_s: float = COUNTER_PROBE_S,
        interval_s: float | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        nvml = load_nvml(nvml_module)
        init(nvml)
        self._nvml: Any = nvml
        try:
            self.gpus = self._open(gpus, probe_s=probe_s, sleep=sleep)
        except BaseException:
            shutdown(nvml)
            raise
        self._domains = tuple(
            Domain(
                name=g.domain,
                source=SOURCE,
                kind="gpu" if g.counter else "gpu-power",
                resolution_uj=RESOLUTION_UJ,
                min_window_ms=COUNTER_MIN_WINDOW_MS if g.counter else POWER_MIN_WINDOW_MS,
                # The counter shows new energy in steps of up to this long.
                update_us=COUNTER_UPDATE_US if g.counter else 0,
            )
            for g in self.gpus
        )
        channels = [self._channel(g, ceiling_w) for g in self.gpus]
        if interval_s is None:
            sampled = not all(g.counter for g in self.gpus)
            interval_s = POWER_INTERVAL_S if sampled else COUNTER_INTERVAL_S
        self._sampler = Sampler(channels, interval_s=interval_s, clock=clock, name="jouled-nvml")
        self._ceiling_w = ceiling_w
        self._closed = False

    def _open(
        self, gpus: Sequence[str] | None, *, probe_s: float, sleep: Callable[[float], None]
    ) -> list[Gpu]:
        nvml = self._nvml
        try:
            found = inspect_gpus(nvml, gpus, probe_s=probe_s, sleep=sleep)
        except ConfigError:
            raise
        except Exception as err:
            raise MeterUnavailableError(f"NVML unavailable: {_text(err)}") from err
        if not found:
            raise MeterUnavailableError(
                "NVML found no NVIDIA GPU" if gpus is None else "no GPU selected"
            )
        for g in found:
            if g.mig:
                raise MeterUnavailableError(
                    f"GPU {g.index} ({g.uuid}) is in MIG mode: MIG slices cannot be metered "
                    "separately (the energy counter covers the whole GPU)",
                    hint=f"disable MIG (nvidia-smi -i {g.index} -mig 0), select other GPUs, "
                    "or use --energy rapl or estimator",
                )
            if not g.counter:
                try:
                    int(nvml.nvmlDeviceGetPowerUsage(g.handle))
                except Exception as err:
                    raise MeterUnavailableError(
                        f"GPU {g.index}: neither the energy counter nor power reads ({_text(err)})"
                    ) from err
        return found

    def _last(self, g: Gpu, last: dict[str, tuple[int, int]]) -> dict[str, object]:
        info: dict[str, object] = {"ceiling_w": self._ceiling_w}
        if g.domain in last:
            value, age_ns = last[g.domain]
            # The counter reads in mJ, sampled power in mW.
            info["last_read"] = value
            info["last_read_unit"] = "mJ" if g.counter else "mW"
            info["last_read_age_ms"] = age_ns // 1_000_000
        return info

    def _channel(self, g: Gpu, ceiling_w: float) -> Channel:
        nvml, handle = self._nvml, g.handle
        if g.counter:
            return CounterChannel(
                g.domain,
                lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),
                ceiling_w=ceiling_w,
                unit_uj=1000,
                slack_s=COUNTER_SLACK_S,
                backwards=RELOAD,
            )
        return PowerChannel(
            g.domain, lambda: nvml.nvmlDeviceGetPowerUsage(handle), ceiling_w=ceiling_w
        )

    @property
    def source(self) -> str:
        return SOURCE

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._sampler.close()
        shutdown(self._nvml)

    def describe(self) -> dict[str, object]:
        info = super().describe()
        last = self._sampler.last_reads()
        info["nvml"] = {
            "interval_s": self.interval_s,
            "gpus": [{**g.to_dict(), **self._last(g, last)} for g in self.gpus],
        }
        return info
