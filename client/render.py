"""Tables for people on a terminal; `--json` output bypasses all of this."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from jb_client import cells as fmt
from jb_client.columns import FRONTIER, revision, verdict
from jb_client.meter_text import ZONE_COLUMNS, meter_lines, zone_rows

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text


if TYPE_CHECKING:
    from jb_client.documents import BestOfKRow, Logs, MeterStatus
    from jb_client.swebench_coverage import Coverage
    from jb_client.taskinfo import TaskInfo
    from rich.console import Console

    from jouled.documents.base import Document
    from jouled.documents.comparison import Comparison
    from jouled.documents.sent import FrontierRow, OpReceipt, Receipt

    out: Console
    err: Console


@cache
def terminal(stderr: bool) -> Console:
    """The console of stdout or stderr (one each)."""
    # rich loads only when something is printed; --json runs never pay for it.
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output keeps whole rows rather than wrapping at rich's default 80 columns.
    # Markup is off: a string printed, or put in a table's cell or title, shows as
    # written, brackets and all (paths, task ids, the daemon's messages); text that
    # is styled says so with `marked`, whose values are escaped.
    return Console(stderr=stderr, width=None if stream.isatty() else 200, markup=False)


def marked(template: str, *values: object) -> Text:
    """`template`'s rich markup, styled, with each `{}` filled by a value shown exactly
    as written: a value's square brackets are text, never markup."""
    from rich.markup import escape
    from rich.text import Text

    return Text.from_markup(template.format(*(escape(str(v)) for v in values)))


def __getattr__(name: str) -> Console:
    if name in ("out", "err"):
        return terminal(name == "err")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_table(title: str, **kwargs: Any) -> Table:
    from rich.table import Table

    return Table(title=title, **kwargs)


def tasks_table(tasks: Sequence[TaskInfo], *, console: Console | None = None) -> None:
    """One line a task, its id whole (what a reader copies into `fetch` or `submit`), the
    prompt's first line cut to the width left; an id too long for the terminal beside
    the other columns folds onto more lines, never cut."""
    console = console or terminal(False)
    table = make_table(fmt.count(len(tasks), "task"))
    rows = []
    for t in tasks:
        first = t.prompt.strip().splitlines()[0] if t.prompt.strip() else ""
        hidden = str(t.hidden_files or "-")
        rows.append((t.task_id, t.kind, t.digest[:12], f"{t.timeout_s}s", hidden, first))
    headers = ("task", "kind", "digest", "timeout", "hidden")
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    # Each column takes its text, a space either side and a rule: 3 more; one rule closes.
    left = console.width - (sum(widths) + 3 * (len(headers) + 1) + 1)
    if left >= _PROMPT_MIN:
        table.add_column("task", no_wrap=True, min_width=widths[0])
    else:
        table.add_column("task", overflow="fold", min_width=12)
    for col, width in zip(headers[1:], widths[1:], strict=True):  # a digest keeps all 12
        table.add_column(col, no_wrap=True, min_width=width)
    prompt = max(left, _PROMPT_MIN)
    table.add_column("prompt", no_wrap=True, overflow="ellipsis", max_width=prompt)
    for row in rows:
        table.add_row(*row)
    console.print(table)


_PROMPT_MIN = 8  # the prompt column's least width, where the ids fit on one line


def swebench_coverage(rows: Sequence[Coverage]) -> None:
    """Per prediction: graded (status, the official verdict) or why it was not."""
    t = make_table("SWE-bench predictions")
    for col in ("instance", "graded", "status", "official", "why not"):
        t.add_column(col)
    for r in rows:
        graded = "yes" if r.graded else marked("[yellow]no[/]")
        why = f"{r.code}: {r.reason}" if r.code else ""
        official = r.official or "-"
        if r.strict_agrees is False:  # jouled's stricter grading came out otherwise
            official += " (strict differs)"
        t.add_row(r.instance_id, graded, r.status or "-", official, why)
    terminal(False).print(t)


def receipt_line(r: Receipt, lead: int = 0) -> None:
    """A receipt as one line, aligned with the others; on a terminal too narrow for it
    (after `lead` characters already printed), the verdict and tests on one line and
    the energy, rollout and sequence number indented on the next."""
    grade = r.energy.get("grade", {})
    joules = grade.get("gross_mj")
    j = "-" if joules is None else fmt.joules(joules / 1000, bool(grade.get("reliable")))
    colour = "green" if r.resolved else "red"
    status = f"{r.status.value:<10}"
    tests = f"tests {r.tests['passed']}/{r.tests['expected']}"
    rest = f"grade {j} J ({grade.get('source', '?')}){_rollout(r)}  seq {r.seq}" + (
        "  (replayed)" if r.replayed else ""
    )
    console = terminal(False)
    line = f"{r.task_id:<28} {status} {tests}  {rest}"
    if lead + len(line) <= console.width:
        console.print(
            marked(f"{{}} [{colour}]{{}}[/] {{}}  {{}}", f"{r.task_id:<28}", status, tests, rest)
        )
    else:
        console.print(marked(f"{{}} [{colour}]{{}}[/] {{}}", r.task_id, r.status.value, tests))
        console.print(f"  {rest}")
    audit_lines(r)


def _rollout(r: Receipt) -> str:
    """Which rollout the daemon recorded (it numbers a submit that names none), from the
    signed payload; nothing when the entry is withheld or its payload unreadable."""
    from jouled.errors import DocumentError

    if r.entry is None:
        return ""
    try:
        rollout = r.entry.parsed_payload().body.get("rollout")
    except DocumentError:
        return ""
    return f"  rollout {rollout}" if isinstance(rollout, int) else ""


def op_receipt_line(r: OpReceipt) -> None:
    """An op window's receipt, on stderr: the metered command owns stdout."""
    e = r.energy
    gross, marginal = e.get("gross_mj"), e.get("marginal_mj")
    reliable = bool(e.get("reliable"))
    line = (
        f"op {r.label}: {fmt.joules(None if gross is None else gross / 1000, reliable)} J gross, "
        f"{fmt.joules(None if marginal is None else marginal / 1000, reliable)} J marginal "
        f"({e.get('source', '?')}, {e.get('attribution', '?')}), {e.get('wall_ms', 0)} ms, "
        f"agent {r.agent}, seq {r.seq}"
    )
    if r.abandoned:
        terminal(True).print(marked("{}  [yellow]abandoned ({})[/]", line, r.end))
    else:
        terminal(True).print(line, highlight=False)


def audit_lines(r: Receipt, shown: int = 10) -> None:
    """A patch's audit flags under its receipt: evidence for a reader, not the verdict."""
    flags = r.audit
    if not flags:
        return
    console = terminal(False)
    listed = [f for f in flags if f.get("code") != "truncated"]
    more = "+" if len(listed) < len(flags) else ""  # the signed list was cut short
    console.print(
        marked(
            f"  [yellow]audit: {len(listed)}{more} flag(s)[/] (reaching into the test "
            "machinery; the verdict stands)"
        )
    )
    for f in flags[:shown]:
        where = f"{f.get('path', '')}:{f.get('line', 0)}" if f.get("path") else ""
        console.print(
            f"    {f.get('code', '?')!s:<18} {where:<32} {f.get('detail', '')}",
            highlight=False,
            markup=False,
        )
    if len(flags) > shown:
        console.print(f"    ... {len(flags) - shown} more (see --json)", highlight=False)


# Below these widths the full tables would squeeze every column to a character or
# two; the compact layouts keep what a reader compares and fit 80 columns. On a
# terminal the full table is shown only where it fits whole (`_overflows`).
FRONTIER_WIDE_MIN = 160
BESTOFK_WIDE_MIN = 120


def _wide(console: Console, wide: bool | None, minimum: int) -> bool:
    return console.width >= minimum if wide is None else wide


def _overflows(console: Console, wide: bool | None, table: Table) -> bool:
    """Whether the full `table`, chosen for the terminal's width rather than asked for,
    is wider than the terminal: then the compact layout is shown instead. Piped output
    keeps every column, each row on one line, however wide."""
    if wide is not None or not console.is_terminal:
        return False
    from rich.measure import Measurement

    options = console.options.update_width(10_000)
    return Measurement.get(console, options, table).maximum > console.width


def _print_whole(console: Console, table: Table) -> None:
    """Print `table` at the width its columns need, past the terminal's edge if need be:
    a wide table asked for on a narrow terminal runs on to the right (read it with
    `less -S`) rather than squeezing every column to a character or two."""
    from rich.measure import Measurement

    width = console.width
    needed = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if needed <= width:
        console.print(table)
        return
    console.width = needed  # rich caps a print's width at the console's
    try:
        console.print(table, crop=False)
    finally:
        console.width = width
    if console.is_terminal:
        terminal(True).print(
            f"(the full table is {needed} columns wide and this terminal {width}: "
            "widen it, pipe through `less -S`, or leave out --wide for the compact layout)",
            highlight=False,
        )


def frontier_table(
    rows: Sequence[FrontierRow], *, wide: bool | None = None, console: Console | None = None
) -> None:
    """The frontier: every column when the terminal is wide enough (or `wide`), else the
    columns a reader compares, folded into fewer."""
    console = console or terminal(False)
    if not _wide(console, wide, FRONTIER_WIDE_MIN):
        _print_frontier_compact(console, rows)
        return
    revised = fmt.revised(rows)
    table = make_table(
        "resolution vs energy (~ = energy not reliable; * = Pareto; "
        "? = no verdict, $ partly claimed; $ (n%) = share of attempts that claimed)"
    )
    columns = [c for c in FRONTIER if c.terminal and (revised or not c.revised_only)]
    for col in columns:
        table.add_column(
            col.terminal_head,
            justify="left" if col.left else "right",
            no_wrap=col.ident,
            min_width=16 if col.ident and not col.left else None,
            # Names fold rather than stretch the table across several screens.
            overflow="fold",
            max_width=32 if col.name else None,
        )
    for r in rows:
        table.add_row(*(fmt.frontier_cell(col, r) for col in columns))
    if _overflows(console, wide, table):
        _print_frontier_compact(console, rows)
        return
    _print_whole(console, table)


def _print_frontier_compact(console: Console, rows: Sequence[FrontierRow]) -> None:
    table, legend = _frontier_compact(rows)
    console.print(table)
    if legend:
        _legend(console, "; ".join(legend))


def _legend(console: Console, text: str) -> None:
    """What a compact table's marks mean, below it at the terminal's width (a title or
    caption would wrap at the table's)."""
    from rich.text import Text

    console.print(Text(text, style="dim"))


def compact_table(title: str) -> Table:
    from rich import box

    return make_table(
        title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, title_justify="left"
    )


def _frontier_compact(rows: Sequence[FrontierRow]) -> tuple[Table, list[str]]:
    """The compact frontier, and the legend of the marks it shows (only those)."""
    suites = len({r.suite for r in rows})
    sources = sorted({r.energy_source for r in rows})
    where = f" ({rows[0].suite})" if suites == 1 else ""
    table = compact_table(f"frontier{where}, energy: {', '.join(sources) or 'none'}")
    revised = fmt.revised(rows)
    usd = any(r.usd_total for r in rows)
    flags = any(r.tampered or r.audit_flagged or r.op_windows or fmt.weak(r) for r in rows)
    table.add_column("", no_wrap=True)
    table.add_column("solver model", overflow="fold", min_width=12)
    for col in ("res/att", "resolved", "95% CI", "J/res", "wall s"):
        table.add_column(col, justify="right", no_wrap=True)
    if usd:
        table.add_column("$", justify="right", no_wrap=True)
    if flags:
        table.add_column("flags", no_wrap=True)
    for r in rows:
        reliable = r.reliable_share == 1
        cells: list[Any] = [
            verdict(r),
            fmt.name_cell(r, suites, revision(r) if revised else ""),
            f"{r.resolved}/{r.attempts}",
            fmt.pct(r.resolution),
            fmt.ci(r),
            fmt.joules(r.joules_per_resolved, reliable),
            "-" if r.wall_median_s is None else f"{r.wall_median_s:.2f}",
        ]
        if usd:
            cells.append(fmt.usd(r))
        if flags:
            marks = [f"t{r.tampered}"] if r.tampered else []
            marks += [f"a{r.audit_flagged}"] if r.audit_flagged else []
            marks += [f"int:{r.integrity[0]}"] if r.integrity is not None and fmt.weak(r) else []
            if r.op_windows:
                marks.append("op" + fmt.joules(r.op_joules, r.op_reliable_share == 1))
            cells.append(" ".join(marks))
        table.add_row(*cells)
    return table, _frontier_legend(rows, usd, revised)


def _frontier_legend(rows: Sequence[FrontierRow], usd: bool, revised: bool) -> list[str]:
    """What the marks the compact frontier shows mean: those of these rows, no others."""

    def unreliable(r: FrontierRow) -> bool:
        per = r.joules_per_resolved is not None and r.reliable_share != 1
        return per or bool(r.op_windows and r.op_reliable_share != 1)

    def partly(r: FrontierRow) -> bool:
        share = r.usd_claimed_share
        return r.usd_total is not None and share is not None and share < 1

    marks: tuple[tuple[Callable[[FrontierRow], object], str], ...] = (
        (lambda r: r.pareto is True, "* Pareto"),
        (lambda r: r.pareto is None, "? no verdict ($ partly claimed)"),
        (unreliable, "~ energy not reliable"),
        (lambda r: usd, "$ claimed by the solvers"),
        (partly, "(n%) the share of attempts that claimed"),
        (lambda r: revised, "r0, r1... the tasks' revision"),
        (lambda r: r.tampered, "t tampered"),
        (lambda r: r.audit_flagged, "a audit flagged"),
        (fmt.weak, "int:r / int:n successes graded at reduced / no integrity"),
        (lambda r: r.op_windows, "op the agent's op windows (J)"),
    )
    return [text for shows, text in marks if any(shows(r) for r in rows)]


def bestofk_table(
    rows: Sequence[BestOfKRow], *, wide: bool | None = None, console: Console | None = None
) -> None:
    """Best-of-k: every column when wide enough (or `wide`), else a compact layout."""
    console = console or terminal(False)
    if not _wide(console, wide, BESTOFK_WIDE_MIN):
        _print_bestofk_compact(console, rows)
        return
    # resolved<=k asks the oracle; `selected` picks one rollout by visible tests alone.
    table = make_table("best-of-k: resolved within the first k rollouts")
    for col in (
        "suite",
        "solver",
        "model",
        "k",
        "tasks",
        "resolved<=k",
        "resolution<=k",
        "selected",
        "J cumulative",
        "$ cumulative",
        "pass@k",
        "tampered",
    ):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.suite,
            r.solver,
            r.model or "-",
            str(r.k),
            str(r.tasks),
            str(r.resolved_within_k),
            fmt.pct(r.resolution_within_k),
            fmt.pct(r.selected_resolution),
            fmt.joules(r.joules_cumulative),
            fmt.usd_cumulative(r),
            fmt.pct(r.pass_at_k),
            str(r.tampered),
        )
    if _overflows(console, wide, table):
        _print_bestofk_compact(console, rows)
        return
    _print_whole(console, table)


def _print_bestofk_compact(console: Console, rows: Sequence[BestOfKRow]) -> None:
    console.print(_bestofk_compact(rows))
    _legend(
        console,
        "<=k: any of the first k rollouts resolved (asks the oracle); "
        "pick: the rollout chosen by the visible tests alone",
    )


def _bestofk_compact(rows: Sequence[BestOfKRow]) -> Table:
    suites = len({r.suite for r in rows})
    table = compact_table("best-of-k")
    usd = any(r.usd_cumulative for r in rows)
    tampered = any(r.tampered for r in rows)
    table.add_column("solver model", overflow="fold", min_width=12)
    for col in ("k", "<=k", "pick", "pass@k", "J cum."):
        table.add_column(col, justify="right", no_wrap=True)
    if usd:
        table.add_column("$ cum.", justify="right", no_wrap=True)
    if tampered:
        table.add_column("tampered", justify="right", no_wrap=True)
    previous = None
    for r in rows:
        key = (r.suite, r.solver, r.model)
        # The name once per group: the k rows below it read as its curve.
        cells: list[Any] = ["" if key == previous else fmt.name_cell(r, suites)]
        previous = key
        cells += [
            str(r.k),
            f"{r.resolved_within_k}/{r.tasks}",
            f"{r.selected_resolved}/{r.tasks}",
            fmt.pct(r.pass_at_k),
            fmt.joules(r.joules_cumulative),
        ]
        if usd:
            cells.append(fmt.usd_cumulative(r))
        if tampered:
            cells.append(str(r.tampered))
        table.add_row(*cells)
    return table


def meter_table(status: MeterStatus, *, console: Console | None = None) -> None:
    """The meter's status as one line per fact, then one row per metered zone
    (`ZONE_COLUMNS`): nested figures are spelled out, never printed as dicts, no
    host path is shown (`--json` has them), and long values fold to the
    terminal's width."""
    from rich.text import Text

    console = console or terminal(False)
    table = make_table("meter", show_header=False, box=None, pad_edge=False, title_justify="left")
    table.add_column("key", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in meter_lines(status, zones=False):
        table.add_row(Text(key), Text(value))
    console.print(table)
    rows = zone_rows(status)
    if rows:
        zones = make_table("zones")
        for column in ZONE_COLUMNS:
            zones.add_column(column, overflow="fold")
        for row in rows:
            zones.add_row(*(Text(row[c]) for c in ZONE_COLUMNS))
        console.print(zones)


def kv(title: str, doc: Document, **shown: object) -> None:
    """A document as a two-column table; nested fields get a row each, named by their
    path. `shown` puts another value in a field's row (a list's length, say)."""
    table = make_table(title, show_header=False)
    table.add_column("key")
    table.add_column("value")
    for k, v in _flat({**doc.to_dict(), **shown}):
        table.add_row(k, v)
    terminal(False).print(table)


def _flat(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """(dotted path, text) of every leaf: no Python repr of a dict or list reaches a reader."""
    rows: list[tuple[str, str]] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            rows += _flat(value, path + ".")
        elif isinstance(value, list | tuple):
            rows.append((path, ", ".join("-" if v is None else str(v) for v in value) or "-"))
        else:
            rows.append((path, "-" if value is None or value == {} else str(value)))
    return rows


# Below this width the paired table leaves out its `test` column (said under it instead).
COMPARE_TEST_COLUMN_MIN = 120


def compare_report(doc: Comparison, shown: int = 20, console: Console | None = None) -> None:
    """`jb-client compare`: each side, the paired metrics, what they say, where they
    disagree. Figures fold onto another line rather than being cut."""
    console = console or terminal(False)
    for name, side in (("A", doc.a), ("B", doc.b)):
        models = ", ".join(m or "-" for m in side.models)
        console.print(
            f"{name}: {side.spec} (models {models}): {fmt.count(side.tasks, 'task')}, "
            f"{fmt.count(side.attempts, 'attempt')}",
            highlight=False,
            markup=False,
        )
    console.print(
        f"paired on task digest: {fmt.count(doc.paired_tasks, 'task')} "
        f"(only A {doc.only_a}, only B {doc.only_b})",
        highlight=False,
    )
    res = doc.resolution
    table = make_table("A vs B per paired task (median and quartiles; difference is A - B)")
    with_test = console.width >= COMPARE_TEST_COLUMN_MIN
    for col in ("", "tasks", "A", "B", "A - B mean", "95% CI", "test")[: 7 if with_test else 6]:
        table.add_column(col, justify="left" if col in ("", "test") else "right", overflow="fold")
    first = res.first_rollout
    mcnemar = f"McNemar p={res.p_value:.4g} (A only {first.a_only}, B only {first.b_only})"
    paired = [
        (
            "resolution",
            str(res.tasks),
            fmt.pct(res.a_rate),
            fmt.pct(res.b_rate),
            "-" if res.difference is None else f"{100 * res.difference:+.1f} pts",
            "-"
            if res.ci_low is None or res.ci_high is None
            else f"{fmt.pct(res.ci_low)} to {fmt.pct(res.ci_high)}",
            mcnemar,
        )
    ]
    for label, m, unit in (("joules", doc.joules, "J"), ("$ claimed", doc.usd, "$")):
        paired.append(
            (
                label,
                str(m.tasks),
                fmt.spread(m.a, unit),
                fmt.spread(m.b, unit),
                "-" if m.difference is None else fmt.num(m.difference.mean, unit),
                "-"
                if m.ci_low is None
                else f"{fmt.num(m.ci_low, unit)} to {fmt.num(m.ci_high, unit)}",
                "paired bootstrap",
            )
        )
    for row in paired:
        table.add_row(*(row if with_test else row[:6]))
    console.print(table)
    if not with_test:
        console.print(
            f"tests: resolution {mcnemar}; joules and $ claimed: paired bootstrap",
            highlight=False,
            markup=False,
        )
    for said in (res, doc.joules, doc.usd):
        mark = "[green]*[/]" if said.conclusive else "[yellow]-[/]"
        console.print(marked(f"{mark} {{}}", said.verdict))
    for note in doc.notes:
        console.print(marked("[yellow]note:[/] {}", note))
    rows = doc.disagreements
    if not rows:
        return
    table = make_table(f"{fmt.count(len(rows), 'paired task')} where A and B disagree")
    for col in ("task", "A resolved", "B resolved", "A J", "B J"):
        table.add_column(col, justify="left" if col == "task" else "right")
    for r in rows[:shown]:
        table.add_row(
            r.task_id,
            f"{r.a.rate:.0%} of {r.a.attempts}",
            f"{r.b.rate:.0%} of {r.b.attempts}",
            fmt.num(r.a.joules),
            fmt.num(r.b.joules),
        )
    console.print(table)
    if len(rows) > shown:
        console.print(f"... {len(rows) - shown} more (see --json)", highlight=False)


def failure_lines(r: Receipt, ids_shown: int = 20, tail_lines: int = 20) -> None:
    """Under an unresolved receipt: the failing and missing test ids, the output's tail."""
    console = terminal(False)
    counted = (
        (r.tests_failed, r.tests["failed"], "failed"),
        (r.tests_missing, r.tests["missing"], "missing"),
    )
    for ids, count, label in counted:
        total = max(count, len(ids))
        if not total:
            continue
        console.print(f"  {label} ({total}):", highlight=False)
        for test_id in ids[:ids_shown]:
            console.print(f"    {test_id}", highlight=False, markup=False)
        if total > min(len(ids), ids_shown):
            console.print(
                f"    ... {total - min(len(ids), ids_shown)} more (jb-client logs --seq {r.seq})",
                highlight=False,
            )
    if r.withheld:
        console.print(f"  withheld: {r.withheld}", highlight=False, markup=False)
    tail = r.output_tail.rstrip("\n").splitlines()[-tail_lines:]
    if tail:
        console.print(f"  output (last {len(tail)} lines):", highlight=False)
        for line in tail:
            console.print(f"    {line}", highlight=False, markup=False)


def logs_report(logs: Logs) -> None:
    """A result's captured runs and test ids: each run's signed hash, status and text."""
    console = terminal(False)
    console.print(
        f"seq {logs.seq} {logs.task_id} {logs.status} (attempt {logs.attempt_id})",
        highlight=False,
    )
    for ids, label in ((logs.tests_failed, "failed"), (logs.tests_missing, "missing")):
        item = ids or {}
        if not item.get("count"):
            continue
        note = " [red]missing: not the signed list[/]" if item.get("status") == "missing" else ""
        console.print(marked(f"== {{}} test ids ({{}}){note}", label, item["count"]))
        for test_id in item.get("ids", []):
            console.print(test_id, highlight=False, markup=False)
        if item.get("clipped"):
            console.print("... clipped: the answer's size bound was reached", highlight=False)
    if logs.withheld:
        console.print(f"withheld: {logs.withheld}", highlight=False, markup=False)
    for phase, run in logs.runs.items():
        status = run["status"]
        if status == "withheld":
            console.print(f"== {phase}: withheld", highlight=False)
            continue
        shown = "[red]{}[/]" if status == "missing" else "{}"
        console.print(
            marked(
                f"== {{}}: {shown} ({{}} bytes kept, {{}} dropped), exit {{}}, signal {{}}, "
                "sha256 {}",
                phase,
                status,
                run["kept_bytes"],
                run["dropped_bytes"],
                run["exit_code"],
                run["signal"],
                run["sha256"],
            )
        )
        if run.get("clipped_bytes"):
            console.print(
                f"... first {run['clipped_bytes']} bytes clipped by the answer's size bound",
                highlight=False,
            )
        if run.get("text"):
            console.print(run["text"].rstrip("\n"), highlight=False, markup=False)
