"""The frontier table's columns, listed once for the terminal (`render`) and the HTML
report (`report`): their order, headings and values; each surface formats a value by
its kind."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Row = Mapping[str, Any]
Kind = Literal["text", "pct", "ci", "joules", "seconds", "usd", "flag"]


@dataclass(frozen=True)
class Column:
    head: str  # as the report heads it
    value: Callable[[Row], Any]
    kind: Kind = "text"
    short: str = ""  # the terminal's narrower heading, where it has one
    left: bool = False  # names and labels; figures are right-aligned
    name: bool = False  # a name the terminal folds rather than lets stretch the table
    ident: bool = False  # an id the terminal never wraps: cut short it would mislead
    terminal: bool = True
    report: bool = True
    revised_only: bool = False  # shown only when some row graded a changed task
    reliable: Callable[[Row], bool] | None = None  # joules: whether to mark them ~

    @property
    def terminal_head(self) -> str:
        return self.short or self.head


def verdict(r: Row) -> str:
    """A row's Pareto mark: * on the frontier, ? no verdict (its $ partly claimed)."""
    return {True: "*", None: "?"}.get(r.get("pareto"), "")


def revision(r: Row) -> str:
    """Which versions of its tasks a row graded: its revision, or how many it merged."""
    if r.get("revision") is None:
        return f"merged {r.get('merged_digests', 0)}"
    return f"r{r['revision']}"


def _reliable(r: Row) -> bool:
    return r.get("reliable_share") == 1


def _op_joules(r: Row) -> float | None:
    # The agent's own metered operations: beside the grade energy, never in it.
    return float(r.get("op_joules") or 0) if r.get("op_windows") else None


FRONTIER = (
    Column("", verdict, left=True),
    Column("suite", lambda r: r["suite"], left=True, name=True),
    Column("solver", lambda r: r["solver"], left=True, name=True),
    Column("model", lambda r: r.get("model") or "-", left=True, name=True),
    Column("rev", revision, left=True, ident=True, report=False, revised_only=True),
    Column(
        "digest set",
        lambda r: str(r.get("digest_set", "")),
        ident=True,
        report=False,
        revised_only=True,
    ),
    Column("attempts", lambda r: r["attempts"]),
    Column("tasks", lambda r: r["tasks"]),
    Column("resolved", lambda r: r["resolved"]),
    Column("resolution", lambda r: r["resolution"], "pct"),
    Column("95% CI", lambda r: (r["ci_low"], r["ci_high"]), "ci"),
    Column("J total", lambda r: r["joules_total"], "joules", reliable=_reliable),
    Column("J/resolved", lambda r: r["joules_per_resolved"], "joules", reliable=_reliable),
    Column("wall median s", lambda r: r.get("wall_median_s"), "seconds", short="wall med s"),
    Column("$ claimed", lambda r: r, "usd"),
    Column("energy source", lambda r: r.get("energy_source", ""), short="source", left=True),
    Column("reliable", lambda r: r.get("reliable_share"), "pct"),
    Column("tampered", lambda r: r.get("tampered", 0), "flag"),
    Column("audit flagged", lambda r: r.get("audit_flagged", 0), "flag"),
    Column("integrity", lambda r: r.get("integrity") or "-", left=True),
    Column("errors", lambda r: r.get("errors", 0), terminal=False),
    Column("op J", _op_joules, "joules", reliable=lambda r: r.get("op_reliable_share") == 1),
)
