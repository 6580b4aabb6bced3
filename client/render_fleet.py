"""A fleet's tables: its merged frontier, a row per host, and its hosts' receipts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jb_client import cells as fmt
from jb_client.columns import verdict
from jb_client.render import compact_table, make_table, marked, receipt_line, terminal

if TYPE_CHECKING:
    from jb_client.fleet_documents import FleetFrontier
    from rich.console import Console
    from rich.table import Table

    from jouled.documents.sent import Receipt


def fleet_receipt_line(host: str, r: Receipt) -> None:
    """A receipt from one host of a fleet: the host first, then the usual line."""
    terminal(False).print(marked("[bold]{}[/]", host), end=" ")
    receipt_line(r, lead=len(host) + 1)


FLEET_WIDE_MIN = 140


def fleet_frontier_table(doc: FleetFrontier, *, console: Console | None = None) -> None:
    """A merged frontier: a row per host, then the cross-host rows (or why there are none).

    Below `FLEET_WIDE_MIN` columns the compact layout folds host and solver names
    onto more lines; a host name or a figure is never cut."""
    console = console or terminal(False)
    compact = console.width < FLEET_WIDE_MIN
    console.print(_fleet_compact(doc) if compact else _fleet_full(doc), markup=False)
    labels = host_labels([r.host for r in doc.rows]) if compact else {}
    for name, label in sorted(labels.items(), key=lambda kv: kv[1]):
        if label != name:  # the legend: each shortened host's whole name
            console.print(f"{label} = {name}", highlight=False, markup=False)
    for d in doc.duplicates:
        console.print(
            f"{d.task_id} on {d.host} is a retry of an attempt counted on "
            f"{d.counted_on} (key {d.idempotency_key}): counted once",
            highlight=False,
            markup=False,
        )
    for u in doc.unreachable:
        console.print(f"{u.host}: not merged ({u.reason})", highlight=False, markup=False)


def _fleet_full(doc: FleetFrontier) -> Table:
    table = make_table(
        "resolution vs energy per host (each host's ledger verified against its pinned key; "
        "~ = energy not reliable; * = Pareto within the host)"
    )
    cols = ("", "host", "suite", "solver", "model", "attempts", "resolved", "resolution")
    for col in (*cols, "J total", "J/resolved", "source", "reliable"):
        table.add_column(col, justify="left" if col in cols[:5] else "right")
    for r in [*doc.rows, *doc.summary]:
        reliable = r.reliable_share == 1
        summary = r.host == "*"
        table.add_row(
            verdict(r),
            f"all ({len(r.hosts or [])})" if summary else r.host,
            r.suite,
            r.solver,
            r.model or "-",
            str(r.attempts),
            str(r.resolved),
            fmt.pct(r.resolution),
            fmt.joules(r.joules_total, reliable),
            fmt.joules(r.joules_per_resolved, reliable),
            r.energy_source,
            fmt.pct(r.reliable_share),
        )
    return table


def host_labels(names: Sequence[str]) -> dict[str, str]:
    """Each host's name less the path components every host shares at its start and end
    (`unix:/srv/a/jouled.sock`, `unix:/srv/b/jouled.sock` -> `a`, `b`); a name
    shared by no other host's prefix or suffix stays whole."""
    parts = {n: n.split("/") for n in set(names)}
    if len(parts) < 2:
        return {n: n for n in names}
    shortest = min(len(p) for p in parts.values())
    lists = list(parts.values())

    def shared(index: int) -> bool:
        return len({p[index] for p in lists}) == 1

    tail = 0  # the socket's file name first: what tells hosts apart is usually above it
    while tail < shortest - 1 and shared(-1 - tail):
        tail += 1
    head = 0
    while head < shortest - 1 - tail and shared(head):
        head += 1
    labels = {n: "/".join(p[head : len(p) - tail]) for n, p in parts.items()}
    if len(set(labels.values())) < len(labels) or not all(labels.values()):
        return {n: n for n in names}
    return labels


def _fleet_compact(doc: FleetFrontier) -> Table:
    from rich.text import Text

    rows = [*doc.rows, *doc.summary]
    labels = host_labels([r.host for r in doc.rows])
    suites = len({r.suite for r in rows})
    sources = sorted({r.energy_source for r in rows})
    table = compact_table(
        f"frontier per host, energy: {', '.join(sources) or 'none'} (each host's ledger verified "
        "against its pinned key). * Pareto within the host, ~ energy not reliable; "
        "all (n) = the rows merged across n hosts"
    )
    table.add_column("", no_wrap=True)
    table.add_column("host", overflow="fold", min_width=8)
    table.add_column("solver model", overflow="fold", min_width=10)
    for col in ("res/att", "resolved", "J total", "J/res"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        reliable = r.reliable_share == 1
        host = f"all ({len(r.hosts or [])})" if r.host == "*" else labels[r.host]
        table.add_row(
            verdict(r),
            Text(host),  # Text, not markup: a host name comes from the fleet file.
            fmt.name_cell(r, suites),
            f"{r.resolved}/{r.attempts}",
            fmt.pct(r.resolution),
            fmt.joules(r.joules_total, reliable),
            fmt.joules(r.joules_per_resolved, reliable),
        )
    return table
