"""The frontier table's columns, listed once for the terminal (`render`) and the HTML
report (`report`): their order, headings and values; each surface formats a value by
its kind."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from jb_client.fleet_documents import FleetRow

    from jouled.documents.sent import FrontierRow

Kind = Literal["text", "pct", "ci", "joules", "seconds", "usd", "flag"]


@dataclass(frozen=True)
class Column:
    head: str  # as the report heads it
    value: Callable[[FrontierRow], Any]
    kind: Kind = "text"
    short: str = ""  # the terminal's narrower heading, where it has one
    left: bool = False  # names and labels; figures are right-aligned
    name: bool = False  # a name the terminal folds rather than lets stretch the table
    ident: bool = False  # an id the terminal never wraps: cut short it would mislead
    terminal: bool = True
    report: bool = True
    revised_only: bool = False  # shown only when some row graded a changed task
    reliable: Callable[[FrontierRow], bool] | None = None  # joules: whether to mark them ~

    @property
    def terminal_head(self) -> str:
        return self.short or self.head


def verdict(r: FrontierRow | FleetRow) -> str:
    """A row's Pareto mark: * on the frontier, ? no verdict (its $ partly claimed)."""
    return {True: "*", None: "?"}.get(r.pareto, "")


def revision(r: FrontierRow) -> str:
    """Which versions of its tasks a row graded: its revision, or how many it merged."""
    if r.revision is None:
        return f"merged {r.merged_digests}"
    return f"r{r.revision}"


def _reliable(r: FrontierRow) -> bool:
    return r.reliable_share == 1


def _op_joules(r: FrontierRow) -> float | None:
    # The agent's own metered operations: beside the grade energy, never in it.
    return float(r.op_joules or 0) if r.op_windows else None


FRONTIER = (
    Column("", verdict, left=True),
    Column("suite", lambda r: r.suite, left=True, name=True),
    Column("solver", lambda r: r.solver, left=True, name=True),
    Column("model", lambda r: r.model or "-", left=True, name=True),
    Column("rev", revision, left=True, ident=True, report=False, revised_only=True),
    Column(
        "digest set",
        lambda r: r.digest_set,
        ident=True,
        report=False,
        revised_only=True,
    ),
    Column("attempts", lambda r: r.attempts),
    Column("tasks", lambda r: r.tasks),
    Column("resolved", lambda r: r.resolved),
    Column("resolution", lambda r: r.resolution, "pct"),
    Column("95% CI", lambda r: (r.ci_low, r.ci_high), "ci"),
    Column("J total", lambda r: r.joules_total, "joules", reliable=_reliable),
    Column("J/resolved", lambda r: r.joules_per_resolved, "joules", reliable=_reliable),
    Column("wall median s", lambda r: r.wall_median_s, "seconds", short="wall med s"),
    Column("$ claimed", lambda r: r, "usd"),
    Column("energy source", lambda r: r.energy_source, short="source", left=True),
    Column("reliable", lambda r: r.reliable_share, "pct"),
    Column("tampered", lambda r: r.tampered, "flag"),
    Column("audit flagged", lambda r: r.audit_flagged, "flag"),
    Column("integrity", lambda r: r.integrity or "-", left=True),
    Column("errors", lambda r: r.errors, terminal=False),
    Column("op J", _op_joules, "joules", reliable=lambda r: r.op_reliable_share == 1),
)
