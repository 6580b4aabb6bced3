"""`jb-client report`: one self-contained HTML page about a ledger.

The page holds the frontier and best-of-k figures (inline SVG), a row per
graded attempt (status, audit flags, energy per op), the calibration in force,
the isolation and provenance the results name, and the checkpoint with the
commands that verify it. It loads nothing: the CSS is inline, there is no
script, and a Content-Security-Policy forbids the page any fetch. Every string
that comes from the ledger is escaped, so hostile solver, model or task names
stay text.

The data comes from a daemon (`from_daemon`) or offline from an export
(`from_export`); the page never verifies signatures itself and says how to.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import html
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jb_client import plot
from jb_client.api import checkpoint_history_path
from jb_client.columns import FRONTIER, Column
from jb_client.documents import BestOfKRow, Checkpoint, MeterStatus
from jb_client.meter_text import calibration_lines, meter_lines

from jouled import frontier
from jouled.best_of_k import best_of_k
from jouled.documents.bodies import Payload
from jouled.documents.sent import ExportRecord, FrontierRow
from jouled.errors import DocumentError, UsageError
from jouled.frontier_attempts import suite_of

if TYPE_CHECKING:
    from jb_client.api import Client

PHASES = ("baseline", "seed", "apply", "solve", "grade")


@dataclass
class ReportData:
    """What one page shows; built from a daemon or from an export."""

    source: str
    suite: str
    axis: str
    frontier: list[FrontierRow]
    best_of_k: list[BestOfKRow]
    results: list[Payload]
    ops: list[Payload] = field(default_factory=list)
    calibrations: list[Payload] = field(default_factory=list)
    entries: int = 0
    meter: MeterStatus | None = None
    # A str: the newest note, which does not read as a checkpoint (shown as it is).
    checkpoint: Checkpoint | str | None = None
    export_name: str = "ledger.jsonl"

    @property
    def checkpoint_size(self) -> int | None:
        return self.checkpoint.size if isinstance(self.checkpoint, Checkpoint) else None


# -- reading ---------------------------------------------------------------------------


def parse_lines(lines: Iterable[str], where: str = "export") -> list[Payload]:
    """The entries of export lines (payloads read, signatures not checked)."""
    entries = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            payload = ExportRecord.parse(json.loads(line)).parsed_payload()
        except (ValueError, DocumentError) as err:
            raise UsageError(
                f"{where} line {n} is not an export line: "
                f"{err.message if isinstance(err, DocumentError) else err}",
                hint="give a file written by `jb-client export`",
            ) from None
        entries.append(payload)
    return entries


def parse_note(note: str) -> Checkpoint | str:
    """The checkpoint a signed note names (origin, size, root in hex, and the note), or
    the note itself where it does not read as one."""
    lines = note.split("\n")
    try:
        origin, size, root = lines[0], int(lines[1]), base64.b64decode(lines[2]).hex()
    except (IndexError, ValueError, binascii.Error):
        return note
    return Checkpoint(origin=origin, size=size, root=root, note=note)


def _in_suite(body: Mapping[str, Any], suite: str) -> bool:
    return not suite or suite_of(body) == suite


def from_entries(
    entries: Sequence[Payload],
    *,
    source: str,
    suite: str = "",
    axis: str = "joules",
    rows: list[FrontierRow] | None = None,
    best: list[BestOfKRow] | None = None,
    meter: MeterStatus | None = None,
    checkpoint: Checkpoint | str | None = None,
    export_name: str = "ledger.jsonl",
) -> ReportData:
    """A report over ledger entries; the frontier and best-of-k are computed from them
    unless given (a daemon serves its own, from the same functions)."""
    results = [e for e in entries if e.kind == "result" and _in_suite(e.body, suite)]
    ops = [e for e in entries if e.kind == "op" and _in_suite(e.body, suite)]
    bodies = [e.body for e in results]
    if rows is None:
        computed = frontier.frontier_rows(
            bodies, suite=suite or None, axis=axis, ops=[e.body for e in ops]
        )
        rows = [FrontierRow.parse(r) for r in computed]
    if best is None:
        best = [BestOfKRow.parse(r) for r in best_of_k(bodies, suite=suite or None)]
    return ReportData(
        source=source,
        suite=suite,
        axis=axis,
        frontier=rows,
        best_of_k=best,
        results=results,
        ops=ops,
        calibrations=[e for e in entries if e.kind == "calibration"],
        entries=len(entries),
        meter=meter,
        checkpoint=checkpoint,
        export_name=export_name,
    )


def from_export(path: Path, *, suite: str = "", axis: str = "joules") -> ReportData:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(
            f"cannot read {path}: {err.strerror}", hint="give the file `jb-client export` wrote"
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not an export: not UTF-8 text") from None
    entries = parse_lines(text.splitlines(), str(path))
    checkpoint: Checkpoint | str | None = None
    history = checkpoint_history_path(path)
    if history.is_file():
        try:
            lines = history.read_text(encoding="utf-8").splitlines()
            notes = [json.loads(line)["note"] for line in lines if line]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(
                f"{history} is not a checkpoint history ({type(err).__name__}: {err})",
                hint=f"export again, or move {history.name} away to report without it",
            ) from None
        if notes:
            checkpoint = parse_note(str(notes[-1]))
    return from_entries(
        entries,
        source=f"export {path.name}",
        suite=suite,
        axis=axis,
        checkpoint=checkpoint,
        export_name=path.name,
    )


def from_daemon(client: Client, *, suite: str = "", axis: str = "joules") -> ReportData:
    """Frontier, best-of-k, meter status and checkpoint from the daemon; the per-attempt
    rows from its export stream."""
    lines = [value for kind, value in client.export_stream() if kind == "entry"]
    checkpoint = client.checkpoint()
    return from_entries(
        parse_lines(lines, "the daemon's export"),
        source=f"daemon at {client.target}",
        suite=suite,
        axis=axis,
        rows=client.frontier(suite, axis).rows,
        best=client.best_of_k(suite).rows,
        meter=client.meter(),
        checkpoint=checkpoint,
    )


# -- the page --------------------------------------------------------------------------


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _j(mj: Any, reliable: bool = True) -> str:
    if mj is None:
        return "-"
    j = int(mj) / 1000
    text = f"{j:,.1f}" if j < 1000 else f"{j:,.0f}"
    return text if reliable else f"~{text}"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}%"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """A table whose cells are already HTML (escaped by the caller)."""
    out = [f'<div class="scroll"><table class="{cls}"><thead><tr>']
    out += [f"<th>{esc(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _frontier_table(rows: Sequence[FrontierRow]) -> str:
    columns = [c for c in FRONTIER if c.report]
    body = [[_cell(col, r) for col in columns] for r in rows]
    return _table([c.head for c in columns], body, "num")


def _cell(col: Column, r: FrontierRow) -> str:
    """One frontier cell as the report shows it (HTML, escaped)."""
    value = col.value(r)
    if col.kind == "pct":
        return _pct(value)
    if col.kind == "ci":
        return f"{_pct(value[0])}–{_pct(value[1])}"
    if col.kind == "joules":
        reliable = col.reliable is None or col.reliable(r)
        return "-" if value is None else _j(round(1000 * float(value)), reliable)
    if col.kind == "seconds":
        return "-" if value is None else f"{float(value):.2f}"
    if col.kind == "usd":
        return _usd(value)
    if col.kind == "flag":
        return _flag(value)
    return esc(value)


def _usd(r: FrontierRow) -> str:
    """Claimed dollars: "-" when nothing was claimed, the share when only some was."""
    total, share = r.usd_total, r.usd_claimed_share
    if total is None:
        return "-"
    text = f"{float(total):.4f}"
    return text if share is None or float(share) >= 1 else f"{text} ({_pct(share)})"


def _usd_cumulative(r: BestOfKRow) -> str:
    """Best-of-k's claimed dollars: "-" when nothing was claimed, as the frontier's $."""
    total = r.usd_cumulative
    return "-" if total is None else f"{float(total):.4f}"


def _flag(n: Any) -> str:
    return f'<span class="bad">{esc(n)}</span>' if n else esc(n)


def _bestofk_table(rows: Sequence[BestOfKRow]) -> str:
    head = (
        "suite",
        "solver",
        "model",
        "k",
        "tasks",
        "resolved ≤ k",
        "resolution ≤ k",
        "visible pick",
        "pass@k",
        "J cumulative",
        "$ cumulative",
        "tampered",
    )
    body = [
        (
            esc(r.suite),
            esc(r.solver),
            esc(r.model or "-"),
            esc(r.k),
            esc(r.tasks),
            esc(r.resolved_within_k),
            _pct(r.resolution_within_k),
            f"{esc(r.selected_resolved)} ({_pct(r.selected_resolution)})",
            _pct(r.pass_at_k),
            _j(round(1000 * float(r.joules_cumulative))),
            _usd_cumulative(r),
            _flag(r.tampered),
        )
        for r in rows
    ]
    return _table(head, body, "num")


def _status(body: Mapping[str, Any]) -> str:
    status = str(body.get("status", "?"))
    cls = {
        "resolved": "ok",
        "unresolved": "no",
        "timeout": "no",
        "error": "warn",
        "invalid": "warn",
        "tampered": "bad",
    }.get(status, "warn")
    return f'<span class="status {cls}">{esc(status)}</span>'


def _audit(flags: Any) -> str:
    if not isinstance(flags, list) or not flags:
        return ""
    items = []
    for f in flags[:5]:
        if not isinstance(f, Mapping):
            continue
        where = f"{f.get('path', '')}:{f.get('line', '')}" if f.get("path") else ""
        items.append(
            f"<li><code>{esc(f.get('code', '?'))}</code> {esc(where)} {esc(f.get('detail', ''))}"
            "</li>"
        )
    more = f"<li>… {len(flags) - 5} more</li>" if len(flags) > 5 else ""
    return f'<span class="bad">{len(flags)}</span><ul class="flags">{"".join(items)}{more}</ul>'


def _window(w: Any) -> str:
    if not isinstance(w, Mapping):
        return ""
    if w.get("valid") is False or w.get("gross_mj") is None:
        return '<span class="warn" title="the meter did not read">invalid</span>'
    reasons = "; ".join(str(r) for r in w.get("reasons") or [])
    text = _j(w["gross_mj"], w.get("reliable") is True)
    return f'<span title="{esc(reasons)}">{esc(text)}</span>' if reasons else esc(text)


def _results_table(results: Sequence[Payload]) -> str:
    phases = [p for p in PHASES if any(p in (e.body.get("energy") or {}) for e in results)]
    head = [
        "seq",
        "task",
        "solver",
        "model",
        "run",
        "rollout",
        "status",
        "tests passed",
        "audit flags",
        *(f"{p} J" for p in phases),
        "total J",
        "wall s",
        "isolation",
    ]
    body = []
    for e in results:
        b = e.body
        tests = b.get("tests") or {}
        energy = b.get("energy") or {}
        total = b.get("energy_total") or {}
        iso = b.get("isolation") or {}
        level = iso.get("level") if isinstance(iso, Mapping) else None
        wall = total.get("wall_ms")
        body.append(
            (
                esc(e.seq),
                esc(b.get("task_id", "")),
                esc(b.get("solver", "")),
                esc(b.get("model") or "-"),
                esc(b.get("run_id") or "-"),
                esc(b.get("rollout", 0)),
                _status(b),
                f"{esc(tests.get('passed', 0))}/{esc(tests.get('expected', 0))}",
                _audit(b.get("audit")),
                *(_window(energy.get(p)) for p in phases),
                _window(total) if total else "-",
                "-" if wall is None else f"{int(wall) / 1000:.2f}",
                esc(level or b.get("sandbox") or "-"),
            )
        )
    return _table(head, body, "results")


def _ops_table(ops: Sequence[Payload]) -> str:
    head = ("seq", "label", "task", "agent", "run", "rollout", "J marginal", "wall s", "end")
    body = []
    for e in ops:
        b = e.body
        w = b.get("energy") or {}
        body.append(
            (
                esc(e.seq),
                esc(b.get("label", "")),
                esc(b.get("task_id") or "-"),
                esc(b.get("agent", "")),
                esc(b.get("run_id") or "-"),
                esc(b.get("rollout", 0)),
                esc(_j(w.get("marginal_mj"), w.get("reliable") is True)),
                f"{int(w.get('wall_ms') or 0) / 1000:.2f}",
                esc(b.get("end") or ("abandoned" if b.get("abandoned") else "closed")),
            )
        )
    return _table(head, body, "num")


def _kv(lines: Iterable[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in lines)
    return f'<table class="kv">{rows}</table>'


def _calibration_section(data: ReportData) -> str:
    parts = []
    if data.meter is not None:
        parts.append("<h3>The daemon's meter now</h3>" + _kv(meter_lines(data.meter)))
    used = Counter(
        (e.body.get("provenance") or {}).get("calibration_seq")
        for e in data.results
        if isinstance(e.body.get("provenance"), Mapping)
    )
    if data.calibrations:
        latest = data.calibrations[-1]
        parts.append(
            f"<h3>Calibration in force: ledger entry {esc(latest.seq)}</h3>"
            + _kv(calibration_lines({**latest.body, "seq": latest.seq, "time": latest.time}))
        )
        rows = [
            (
                esc(c.seq),
                esc(c.time),
                esc(c.body.get("source", "")),
                esc(c.body.get("seconds", "")),
                esc(
                    ", ".join(
                        f"{name} {int(d.get('idle_mw', 0)) / 1000:.3f} W"
                        for name, d in sorted((c.body.get("domains") or {}).items())
                        if isinstance(d, Mapping)
                    )
                ),
                esc(used.get(c.seq, 0)),
            )
            for c in data.calibrations
        ]
        parts.append(
            "<h3>Every calibration in the ledger</h3>"
            + _table(("seq", "time", "source", "seconds", "idle", "results using it"), rows)
        )
    elif data.meter is None:
        parts.append("<p>No calibration entry in this ledger: marginal energy is gross.</p>")
    return "".join(parts)


def _provenance_section(results: Sequence[Payload]) -> str:
    keys = ("jouled", "python", "pytest", "host", "kernel", "cpu", "meter", "sandbox")
    seen: Counter[tuple[str, ...]] = Counter()
    for e in results:
        p = e.body.get("provenance")
        if isinstance(p, Mapping):
            seen[tuple(str(p.get(k, "")) for k in keys)] += 1
    if not seen:
        return "<p>No result in this report names its provenance.</p>"
    rows = [(*(esc(v) for v in combo), esc(n)) for combo, n in seen.most_common()]
    note = (
        "<p>Results are comparable when their task digests and their provenance agree.</p>"
        if len(seen) > 1
        else "<p>Every result here was graded under the same provenance.</p>"
    )
    return note + _table((*keys, "results"), rows)


def _checkpoint_section(data: ReportData) -> str:
    cp = data.checkpoint
    export = esc(data.export_name)
    steps = (
        "jb-client checkpoint > saved.note\n"
        f"jb-client export --out {export}\n"
        f"jb-client verify {export} --pubkey jouled.pub --checkpoint saved.note"
    )
    if cp is None:
        head = "<p>No checkpoint came with this data.</p>"
    elif isinstance(cp, str):
        head = _kv([]) + f"<pre class=note>{esc(cp)}</pre>"
    else:
        facts = [("origin", cp.origin), ("size", str(cp.size)), ("root", cp.root)]
        head = _kv(facts) + f"<pre class=note>{esc(cp.note)}</pre>"
    return (
        head + "<p>This page reads the entries' payloads; it checks no signature. To check "
        "that the ledger is the one this checkpoint signs (every signature, the chain, the "
        "Merkle root), with the daemon's public key pinned out of band:</p>"
        f"<pre>{steps}</pre>"
        "<p>A receipt alone: <code>jb-client audit receipt.json --pubkey jouled.pub</code>.</p>"
    )


def _figure(
    draw: Any, rows: Sequence[FrontierRow] | Sequence[BestOfKRow], prefix: str, *args: Any
) -> str:
    if not rows:
        return "<p>Nothing to draw yet.</p>"
    if not plot.available():
        return (
            '<p class="warn">Figures need matplotlib: '
            "<code>pip install 'joule-bench[plot]'</code>.</p>"
        )
    return f'<figure class="plot">{plot.inline_svg(draw(rows, *args), prefix)}</figure>'


_CSS = """
:root{color-scheme:light;--fg:#1d1d1f;--dim:#5b5b66;--line:#d9d9e0;--bad:#b3261e;
--ok:#1b6e2d;--warn:#8a5a00}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);
margin:0 auto;max-width:1200px;padding:1.5rem}
h1{font-size:1.5rem;margin:0 0 .25rem}h2{font-size:1.15rem;margin-top:2rem;
border-bottom:1px solid var(--line);padding-bottom:.2rem}h3{font-size:1rem}
.meta{color:var(--dim)}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:.5rem 0;font-size:12.5px}
th,td{border-bottom:1px solid var(--line);padding:.2rem .5rem;text-align:left;
vertical-align:top}
th{background:#f4f4f7;white-space:nowrap}
table.num td{text-align:right}table.num td:nth-child(-n+4){text-align:left}
table.kv th{text-align:left;background:none;font-weight:600}
.status{font-weight:600}.ok{color:var(--ok)}.no{color:var(--dim)}
.warn{color:var(--warn)}.bad{color:var(--bad);font-weight:600}
ul.flags{margin:.2rem 0 0 1rem;padding:0;font-size:11.5px}
figure.plot{margin:1rem 0}figure.plot svg{max-width:100%;height:auto}
pre{background:#f4f4f7;padding:.6rem;overflow-x:auto;font-size:12px}
code{font-size:12px}
"""

# No script, no fetch of any kind; inline styles only (the SVGs carry their own).
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def render_html(data: ReportData, *, title: str = "", now: datetime.datetime | None = None) -> str:
    now = now or datetime.datetime.now(datetime.UTC)
    title = title or "joule-bench report" + (f": {data.suite}" if data.suite else "")
    statuses = Counter(str(e.body.get("status", "?")) for e in data.results)
    summary = ", ".join(f"{n} {esc(s)}" for s, n in sorted(statuses.items())) or "none"
    flagged = sum(1 for e in data.results if e.body.get("audit"))
    axis_label = plot.AXES[data.axis][1]
    sections = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">From the {esc(data.source)}: {esc(data.entries)} ledger entries, '
        f"{len(data.results)} graded attempts ({summary}); {flagged} with audit flags. "
        f"Generated {esc(now.strftime('%Y-%m-%dT%H:%M:%SZ'))}.</p>",
        f"<h2>Frontier: resolution vs {esc(axis_label)}</h2>",
        "<p>Filled points: every energy window reliable; hollow points named <code>~</code>: "
        "some window was under the meter's floor or within idle noise, so their joules are "
        "not comparable. Bars: 95% Wilson intervals. The staircase joins the Pareto "
        "frontier (<code>*</code>). Dollars are claimed by the agents, joules measured by "
        "the daemon; a row whose dollars only some attempts claimed shows the share and "
        "gets no verdict on the dollar axis (<code>?</code>).</p>",
        _figure(plot.frontier_figure, data.frontier, "frontier", data.axis),
        _frontier_table(data.frontier),
        "<h2>Best of k</h2>",
        "<p>Tasks resolved within the first k rollouts (any of them: an oracle's bound) and "
        "by the rollout picked with visible tests alone, against what the first k rollouts "
        "cost.</p>",
        _figure(plot.bestofk_figure, data.best_of_k, "bestofk"),
        _bestofk_table(data.best_of_k),
        "<h2>Attempts</h2>",
        "<p>One row per graded attempt, in ledger order. Energy per op is gross joules; "
        "<code>~</code> marks a window that is not reliable (hover for why). "
        "<code>tampered</code>: the run's canaries did not come out as planted, so its "
        "report was forged; audit flags are evidence for a reader, not the verdict.</p>",
        _results_table(data.results),
    ]
    if data.ops:
        sections += [
            "<h2>Agent op windows</h2>",
            "<p>Operations the agents metered themselves; beside the graded energy, never "
            "in it.</p>",
            _ops_table(data.ops),
        ]
    sections += [
        "<h2>Energy meter and calibration</h2>",
        _calibration_section(data),
        "<h2>Isolation and provenance</h2>",
        _provenance_section(data.results),
        "<h2>Checkpoint and how to verify it</h2>",
        _checkpoint_section(data),
        "</body></html>",
    ]
    return "\n".join(sections) + "\n"


def write_report(data: ReportData, out: Path, *, title: str = "") -> None:
    text = render_html(data, title=title)
    tmp = out.with_name(out.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except OSError as err:
        raise UsageError(f"cannot write {out}: {err.strerror}") from None
