"""How one figure reads in a terminal table's cell: joules, dollars, shares, intervals,
names (`render` lays the tables out)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jb_client.columns import Column

if TYPE_CHECKING:
    from jb_client.documents import BestOfKRow
    from jb_client.fleet_documents import FleetRow
    from rich.text import Text

    from jouled.documents.comparison import Summary
    from jouled.documents.sent import FrontierRow


def joules(value: float | None, reliable: bool = True) -> str:
    if value is None:
        return "-"
    if value == float("inf"):
        return "inf"
    text = f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"
    return text if reliable else f"~{text}"


def usd(r: FrontierRow) -> str:
    """Claimed dollars, with the share of attempts that claimed them when not all did."""
    total, share = r.usd_total, r.usd_claimed_share
    if total is None:
        return "-"  # nothing claimed: unknown, never $0
    text = f"{float(total):.4f}"
    return text if share is None or share >= 1 else f"{text} ({pct(share)})"


def usd_cumulative(r: BestOfKRow) -> str:
    """Best-of-k's claimed dollars: "-" when none of the first k claimed, as in `_usd`."""
    total = r.usd_cumulative
    return "-" if total is None else f"{float(total):.4f}"


def revised(rows: Sequence[FrontierRow]) -> bool:
    return any(r.revision != 0 for r in rows)


def count(n: int, noun: str) -> str:
    """`n` and `noun`, plural but for one: "1 task", "3 tasks"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def frontier_cell(col: Column, r: FrontierRow) -> str:
    """One frontier cell as the terminal shows it."""
    value = col.value(r)
    if col.kind == "pct":
        return pct(value)
    if col.kind == "ci":
        return f"{pct(value[0])}-{pct(value[1])}"
    if col.kind == "joules":
        return joules(value, col.reliable is None or col.reliable(r))
    if col.kind == "seconds":
        return "-" if value is None else f"{value:.2f}"
    if col.kind == "usd":
        return usd(value)
    return str(value)


def name_cell(r: FrontierRow | BestOfKRow | FleetRow, suites: int, revision: str = "") -> Text:
    """Suite (when there are several), solver and model; then `revision`, when given
    (`columns.revision`: the tasks' revision the row graded)."""
    from rich.text import Text

    # Text, not markup: names come from results.
    cell = Text(f"{r.suite}/" if suites > 1 else "", style="dim")
    cell.append(str(r.solver))
    if r.model:
        cell.append(f" {r.model}", style="dim")
    if revision:
        cell.append(f" {revision}", style="dim")
    return cell


def ci(r: FrontierRow) -> str:
    return f"{100 * r.ci_low:.0f}-{100 * r.ci_high:.0f}"


def weak(r: FrontierRow) -> bool:
    """Whether the row's successes were graded below the integrity monitor."""
    return r.integrity not in (None, "monitor")


def num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "$":
        return f"{value:.4f}"
    return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def spread(s: Summary | None, unit: str) -> str:
    """Median and interquartile range of one side's per-task values."""
    if s is None:
        return "-"
    return f"{num(s.median, unit)} ({num(s.q1, unit)}-{num(s.q3, unit)})"
