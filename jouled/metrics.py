"""What the daemon counts for its metrics endpoint, apart from how it is served.

`Counts` is fed by the daemon as it signs entries: each `result` (attempts by
status and solver, joules by source and op), each `abort` and each `op`
window. Every label takes few values whatever clients send: statuses, ops and
energy sources are the daemon's own words, and solvers are named only when the
daemon knows them (its hosted solvers and those declared with
`--metrics-solver`); any other solver counts under `OTHER_SOLVER`. Counters
start at zero when the daemon starts, as Prometheus expects of a counter; the
ledger keeps the all-time totals. `Gauges` are read on demand (at scrape time)
from state the daemon already holds, so serving them costs nothing between
scrapes. `jouled.api.metrics` turns both into the
Prometheus exposition format.

Energy is counted in integer millijoules, as the ledger signs it; a window
whose read failed (`valid: false`, or null figures) adds no joules and is
counted in `invalid_windows` instead, so a total short of some energy says so.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The op label of agent-opened op windows: their own labels are the agent's
# free text, which would give every label its own time series.
OP_WINDOW = "op_window"
# The solver label of every solver the daemon was not told to name: solver names
# are the clients' choice, so each would be a time series of its own. No solver
# can be called this (a name starts with a letter or digit).
OTHER_SOLVER = "_other"


@dataclass(frozen=True)
class CountsSnapshot:
    """The counters at one instant."""

    attempts: Mapping[tuple[str, str], int]  # (status, solver) -> results signed
    aborts: Mapping[str, int]  # solver -> aborts signed
    energy_mj: Mapping[tuple[str, str], int]  # (source, op) -> gross mJ of valid windows
    invalid_windows: Mapping[str, int]  # op -> windows without a valid figure
    op_windows: Mapping[bool, int]  # abandoned? -> op windows signed
    journal_refused: int = 0  # journal rows refused at start: nothing signed from them


def _valid(window: Mapping[str, Any]) -> bool:
    if window.get("valid") is False:
        return False
    return window.get("gross_mj") is not None


class Counts:
    """Counters the daemon bumps as it signs; thread-safe, read as a snapshot."""

    def __init__(self, solvers: Iterable[str] = ()) -> None:
        # The solver names the labels carry; any other is counted as OTHER_SOLVER.
        self.solvers = frozenset(solvers)
        self._lock = threading.Lock()
        self._attempts: Counter[tuple[str, str]] = Counter()
        self._aborts: Counter[str] = Counter()
        self._energy_mj: Counter[tuple[str, str]] = Counter()
        self._invalid: Counter[str] = Counter()
        self._op_windows: Counter[bool] = Counter()
        self._journal_refused = 0

    def _window(self, op: str, window: Any) -> None:
        if not isinstance(window, Mapping):
            return
        if _valid(window):
            self._energy_mj[(str(window.get("source") or "none"), op)] += int(window["gross_mj"])
        else:
            self._invalid[op] += 1

    def solver_label(self, solver: Any) -> str:
        """The label a solver is counted under: its name if known, else OTHER_SOLVER."""
        return solver if isinstance(solver, str) and solver in self.solvers else OTHER_SOLVER

    def result(self, body: Mapping[str, Any]) -> None:
        """A signed `result` body: one attempt, and the energy of each of its ops."""
        energy = body.get("energy")
        with self._lock:
            status = str(body.get("status", ""))
            self._attempts[(status, self.solver_label(body.get("solver")))] += 1
            if isinstance(energy, Mapping):
                for op, window in energy.items():
                    self._window(str(op), window)

    def abort(self, body: Mapping[str, Any]) -> None:
        """A signed `abort` body: an accepted attempt that produced no result."""
        with self._lock:
            self._aborts[self.solver_label(body.get("solver"))] += 1

    def op(self, body: Mapping[str, Any]) -> None:
        """A signed `op` body: an agent-opened window, counted under one op label."""
        with self._lock:
            self._op_windows[body.get("abandoned") is True] += 1
            self._window(OP_WINDOW, body.get("energy"))

    def journal_refused(self, rows: int) -> None:
        """Journal rows refused at start (not the daemon's, or out of bounds)."""
        with self._lock:
            self._journal_refused += rows

    def snapshot(self) -> CountsSnapshot:
        with self._lock:
            return CountsSnapshot(
                attempts=dict(self._attempts),
                aborts=dict(self._aborts),
                energy_mj=dict(self._energy_mj),
                invalid_windows=dict(self._invalid),
                op_windows=dict(self._op_windows),
                journal_refused=self._journal_refused,
            )


@dataclass(frozen=True)
class Gauges:
    """The daemon's state at one instant, read when the endpoint is scraped.

    None marks a figure that could not be read this time (the metric is then
    left out of the scrape rather than reported as zero).
    """

    queue_depth: int  # attempts waiting for a worker
    queue_limit: int
    running: int  # attempts holding a worker
    workers: int
    op_windows_open: int
    ledger_entries: int
    checkpoint_age_s: float | None  # since the checkpoint note was last written
    sampler_faults: int | None  # failed or implausible meter reads since the meter opened
    energy_source: str  # the meter's label: "rapl", "nvml", "rapl+nvml" or "estimator"
    calibration_age_s: int | None  # since the idle calibration in use; None: none
