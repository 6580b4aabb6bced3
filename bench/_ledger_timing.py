"""How the ledger benchmark times and profiles: medians of wall-clock runs, their
formatting against an aim, and the optional cProfile passes."""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from _ledger_fixtures import OUT, log

T = TypeVar("T")


@dataclass
class Timing:
    runs: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def spread(self) -> str:
        if len(self.runs) == 1:
            return "1 run"
        return f"{seconds(min(self.runs))} – {seconds(max(self.runs))} over {len(self.runs):,}"


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def repeat(fn: Callable[[], object], repeats: int) -> Timing:
    return Timing([timed(fn)[0] for _ in range(repeats)])


def seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def verdict(measured: float, aim: float, higher_is_better: bool) -> tuple[str, bool]:
    ratio = measured / aim
    met = ratio >= 1 if higher_is_better else ratio <= 1
    return f"{ratio:.3g}× aim, {'met' if met else 'MISSED'}", met


@dataclass
class Profiles:
    enabled: bool
    summaries: dict[str, list[str]] = field(default_factory=dict)

    def run(self, name: str, fn: Callable[[], object]) -> None:
        """One untimed pass under cProfile; the full listing goes to bench/out."""
        if not self.enabled:
            return
        log(f"profiling {name}")
        prof = cProfile.Profile()
        prof.enable()
        fn()
        prof.disable()
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(30)
        (OUT / f"profile-{name}.txt").write_text(buf.getvalue())
        raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
        total = sum(v[2] for v in raw.values()) or 1.0
        top = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:6]
        self.summaries[name] = [
            f"{v[2]:.2f} s ({v[2] / total:.0%}) {v[1]:,} calls  {_where(k)}" for k, v in top
        ]


def _where(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func
    parts = Path(filename).parts
    short = "/".join(parts[parts.index("jouled") :]) if "jouled" in parts else Path(filename).name
    return f"{short}:{line} {func}"
