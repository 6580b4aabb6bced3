"""NVML check: the GPU's total-energy counter against sampled power, on real hardware.

For the GPU `--gpu` names (default 0) and each load (idle, steady, bursty),
over one window of `--window` seconds:

- `counter J`: `nvmlDeviceGetTotalEnergyConsumption` at the window's two ends
  (the figure the daemon's NVML meter signs);
- `power J`: `nvmlDeviceGetPowerUsage` read every `--sample-ms` (10 ms) and
  integrated by trapezoids over the same window (what a meter without the
  counter would sign);
- `counter / power`: their ratio, and `diff %`, the counter's difference from
  the integral;
- the counter's own update period: before each window the counter is read
  back to back for `--period-s` seconds and the gaps between the reads where
  it showed new energy are kept (median and max, ms). A reading can miss up
  to one period's energy at each end of a window, so `edge J` (the load's
  mean power x the max period) is how far the counter's figure may sit from
  the true energy for that reason alone.

Loads run on the GPU with torch or cupy when one is installed (a matrix
product in a loop; bursty: 200 ms on, 300 ms off); without either, only the
idle row is measured and the table says so. Nothing here asserts: it is a
measurement. It needs `nvidia-ml-py` (import `pynvml`) and an NVIDIA driver;
the tests run it against `tests/meter/fakes.FakeNVML`.

Run: .venv/bin/python bench/nvml_check.py [--window 5] [--results]
The Markdown goes to stdout and bench/out/nvml.md; `--results` also puts it in
bench/RESULTS.md under "## NVML check" (replacing an earlier one).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"
RESULTS = REPO / "bench" / "RESULTS.md"
HEADING = "## NVML check"

Clock = Callable[[], int]
Sleep = Callable[[float], None]


class Load(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass
class Row:
    gpu: str
    load: str
    window_s: float
    counter_j: float
    power_j: float
    samples: int
    period_med_ms: float | None
    period_max_ms: float | None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return self.counter_j / self.power_j if self.power_j > 0 else None

    @property
    def edge_j(self) -> float | None:
        if self.period_max_ms is None or self.window_s <= 0:
            return None
        return self.power_j / self.window_s * self.period_max_ms / 1000


# -- measuring --------------------------------------------------------------------------


def update_period(
    nvml: Any, handle: Any, seconds: float, *, clock: Clock, sleep: Sleep, gap_s: float = 0.001
) -> tuple[float | None, float | None]:
    """Median and max ms between the reads at which the counter showed new energy."""
    end = clock() + round(seconds * 1e9)
    last = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    seen: list[int] = []
    while clock() < end:
        sleep(gap_s)
        value = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        if value != last:
            seen.append(clock())
            last = value
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(seen)]
    if not gaps:
        return None, None
    return statistics.median(gaps), max(gaps)


def window(
    nvml: Any, handle: Any, seconds: float, *, sample_s: float, clock: Clock, sleep: Sleep
) -> tuple[float, float, int]:
    """Counter joules and integrated-power joules over one window, and the samples taken."""
    e0 = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    t0 = clock()
    p0 = nvml.nvmlDeviceGetPowerUsage(handle)
    end = t0 + round(seconds * 1e9)
    t_prev, p_prev, pj, samples = t0, p0, 0, 1
    while True:
        sleep(sample_s)
        now = clock()
        p = nvml.nvmlDeviceGetPowerUsage(handle)
        pj += (p_prev + p) * (now - t_prev) // 2  # mW x ns = pJ
        t_prev, p_prev, samples = now, p, samples + 1
        if now >= end:
            break
    e1 = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    return (e1 - e0) / 1000, pj / 1e12, samples


def measure(
    nvml: Any,
    loads: Sequence[Load],
    *,
    gpu: int | None = None,
    window_s: float = 5.0,
    sample_s: float = 0.01,
    period_s: float = 1.0,
    settle_s: float = 1.0,
    clock: Clock = time.monotonic_ns,
    sleep: Sleep = time.sleep,
) -> list[Row]:
    """Every (GPU, load) row; NVML is initialised and shut down here."""
    nvml.nvmlInit()
    try:
        count = nvml.nvmlDeviceGetCount()
        indices = range(count) if gpu is None else [gpu]
        rows = []
        for index in indices:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            label = f"{index}: {name.decode() if isinstance(name, bytes) else name}"
            for load in loads:
                load.start()
                try:
                    sleep(settle_s)  # let the board's power follow the load
                    med, most = update_period(nvml, handle, period_s, clock=clock, sleep=sleep)
                    counter_j, power_j, samples = window(
                        nvml, handle, window_s, sample_s=sample_s, clock=clock, sleep=sleep
                    )
                finally:
                    load.stop()
                rows.append(Row(label, load.name, window_s, counter_j, power_j, samples, med, most))
        return rows
    finally:
        nvml.nvmlShutdown()


# -- loads ------------------------------------------------------------------------------


class Idle:
    name = "idle"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class MatmulLoad:
    """A matrix product in a loop on the GPU, from a thread; `on_s`/`off_s` make it bursty."""

    def __init__(
        self, name: str, step: Callable[[], None], *, on_s: float = 0.0, off_s: float = 0.0
    ) -> None:
        self.name = name
        self._step = step
        self._on_s, self._off_s = on_s, off_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"load-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            until = time.monotonic() + (self._on_s or 3600.0)
            while time.monotonic() < until and not self._stop.is_set():
                self._step()
            if self._off_s:
                self._stop.wait(self._off_s)


def gpu_step(gpu: int) -> tuple[Callable[[], None] | None, str]:
    """One synchronous burst of GPU work, from torch or cupy; None and why if neither."""
    why = []
    try:
        torch = importlib.import_module("torch")
        if torch.cuda.is_available():
            return _torch_step(torch, gpu), "a 4096 x 4096 torch matmul in a loop"
        why.append("torch sees no CUDA device")
    except Exception as err:  # not installed, or installed without a working CUDA
        why.append(f"torch: {type(err).__name__}")
    try:
        cupy = importlib.import_module("cupy")
        return _cupy_step(cupy, gpu), "a 4096 x 4096 cupy matmul in a loop"
    except Exception as err:
        why.append(f"cupy: {type(err).__name__}")
    return None, f"no GPU load ({'; '.join(why)}): only the idle row is measured"


def _torch_step(torch: Any, gpu: int) -> Callable[[], None]:
    a = torch.randn(4096, 4096, device=torch.device(f"cuda:{gpu}"))

    def step() -> None:
        (a @ a).sum().item()  # .item() waits for the GPU

    return step


def _cupy_step(cupy: Any, gpu: int) -> Callable[[], None]:
    with cupy.cuda.Device(gpu):
        b = cupy.random.rand(4096, 4096, dtype=cupy.float32)

    def step() -> None:
        with cupy.cuda.Device(gpu):
            float((b @ b).sum())  # float() waits for the GPU

    return step


def default_loads(gpu: int) -> tuple[list[Load], str]:
    step, how = gpu_step(gpu)
    loads: list[Load] = [Idle()]
    if step is not None:
        loads.append(MatmulLoad("steady", step))
        loads.append(MatmulLoad("bursty (200 ms on, 300 ms off)", step, on_s=0.2, off_s=0.3))
    return loads, how


# -- report -----------------------------------------------------------------------------


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def render(rows: Sequence[Row], *, how: str, sample_s: float, facts: Sequence[str] = ()) -> str:
    out = [
        HEADING,
        "",
        "`python bench/nvml_check.py`: NVML's total-energy counter over each window "
        f"against `nvmlDeviceGetPowerUsage` read every {sample_s * 1000:g} ms and "
        "integrated by trapezoids, and the counter's own update period (gaps between "
        f"the reads at which it showed new energy). Loads: {how}.",
        "",
    ]
    out += [f"- {fact}" for fact in facts]
    out += [
        "",
        "| GPU | load | window s | counter J | power J | counter / power | diff % "
        "| samples | period med ms | period max ms | edge J |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r.ratio
        diff = None if ratio is None else (ratio - 1) * 100
        out.append(
            f"| {r.gpu} | {r.load} | {r.window_s:g} | {r.counter_j:.3f} | {r.power_j:.3f} "
            f"| {_num(ratio, '.4f')} | {_num(diff, '+.2f')} | {r.samples} "
            f"| {_num(r.period_med_ms, '.1f')} | {_num(r.period_max_ms, '.1f')} "
            f"| {_num(r.edge_j, '.3f')} |"
        )
    return "\n".join([*out, ""])


def put_in_results(section: str, path: Path = RESULTS) -> None:
    """Replace the `HEADING` section of RESULTS.md with `section`, or append it."""
    text = path.read_text() if path.exists() else ""
    start = text.find(f"\n{HEADING}\n")
    if start < 0:
        path.write_text(text.rstrip("\n") + "\n\n" + section)
        return
    rest = text.find("\n## ", start + 1)
    tail = text[rest:] if rest >= 0 else ""
    path.write_text(text[: start + 1] + section + tail)


def main(argv: Sequence[str] | None = None, nvml: Any = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0, help="the GPU to load and measure")
    parser.add_argument("--window", type=float, default=5.0, help="seconds per window")
    parser.add_argument("--sample-ms", type=float, default=10.0)
    parser.add_argument("--period-s", type=float, default=1.0)
    parser.add_argument("--results", action="store_true", help="also write bench/RESULTS.md")
    args = parser.parse_args(argv)
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            sys.exit("nvml_check: needs nvidia-ml-py (pip install 'joule-bench[nvml]')")
    loads, how = default_loads(args.gpu)
    rows = measure(
        nvml,
        loads,
        gpu=args.gpu,
        window_s=args.window,
        sample_s=args.sample_ms / 1000,
        period_s=args.period_s,
    )
    facts = [f"{platform.node()}, Python {platform.python_version()}"]
    with_driver = getattr(nvml, "nvmlSystemGetDriverVersion", None)
    if with_driver is not None:
        try:
            nvml.nvmlInit()
            version = with_driver()
            facts.append(f"driver {version.decode() if isinstance(version, bytes) else version}")
            nvml.nvmlShutdown()
        except Exception as err:  # the table matters more than the driver's version
            facts.append(f"driver version unknown ({err})")
    section = render(rows, how=how, sample_s=args.sample_ms / 1000, facts=facts)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "nvml.md").write_text(section)
    if args.results:
        put_in_results(section)
    print(section)
    return section


if __name__ == "__main__":
    main()
