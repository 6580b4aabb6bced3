"""`jb-client`'s commands that read results: frontier, compare, logs, receipts, keys,
best-of-k and the HTML report."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from jb_client.cli_args import Argument, Option
from jb_client.cli_common import (
    CLAIM_MAX,
    EXIT_USAGE,
    Json,
    Suite,
    Wide,
    ask,
    connect,
    emit,
    error,
    fail,
    read_file,
    render,
)

if TYPE_CHECKING:
    pass

from jb_client.cli_fleet import fleet_frontier, is_fleet

from jouled.errors import JouledError, UsageError


def frontier(
    suite: Suite = "",
    axis: Annotated[str, Option(help="Cost axis: joules, usd or wall.")] = "joules",
    export: Annotated[
        Path | None, Option("--from-export", help="Compute offline from an export file.")
    ] = None,
    plot_to: Annotated[
        Path | None,
        Option("--plot", help="Also draw the frontier to FILE (.svg or .png; matplotlib)."),
    ] = None,
    merge_digests: Annotated[
        bool,
        Option(
            "--merge-digests",
            help="Pool each solver's results across a changed task's digests into one row.",
        ),
    ] = False,
    wide: Wide = None,
    as_json: Json = False,
) -> None:
    """Resolution vs energy (or dollars, or wall time) per suite, solver, model and the
    revision of the tasks graded (a changed task's results form their own row).

    With several targets (or --fleet), or a fleet export directory, a row per host,
    each host's ledger verified against its pinned key first.
    """
    fleet_wide = is_fleet() or (export is not None and export.is_dir())
    if fleet_wide:
        return fleet_frontier(suite, axis, export, as_json, merge_digests)
    try:
        if export is not None:
            from jouled.documents.sent import FrontierRow
            from jouled.ledger.snapshot import export_frontier

            if not export.is_file():
                read_file(export)  # says why it cannot be read
            computed = export_frontier(export).rows(
                suite=suite or None, axis=axis, merge_digests=merge_digests
            )
            rows = [FrontierRow.parse(r) for r in computed]
        else:
            with connect() as c:
                rows = c.frontier(suite, axis, merge_digests=merge_digests).rows
        if plot_to is not None:
            from jb_client import plot

            plot.write(plot.frontier_figure(rows, axis), plot_to)
            render.err.print(f"frontier drawn to {plot_to}", highlight=False, markup=False)
    except JouledError as err:
        fail(err)
    if as_json:
        emit({"rows": [r.to_dict() for r in rows]})
    else:
        render.frontier_table(rows, wide=wide)


def _export_bodies(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The `result` and `op` bodies of an export, in seq order."""
    return _bodies(read_file(path).decode("utf-8").splitlines())


def _bodies(lines: Iterable[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The `result` and `op` bodies of export lines, in the order given."""
    import base64

    bodies: dict[str, list[dict[str, Any]]] = {"result": [], "op": []}
    for line in lines:
        if line.strip():
            doc = json.loads(base64.b64decode(json.loads(line)["payload"]))
            if doc["kind"] in bodies:
                bodies[doc["kind"]].append(doc["body"])
    return bodies["result"], bodies["op"]


def compare(
    a: Annotated[str, Argument(help="Side A: a solver, or SOLVER@MODEL.")],
    b: Annotated[str, Argument(help="Side B: a solver, or SOLVER@MODEL.")],
    suite: Suite = "",
    export: Annotated[
        Path | None,
        Option("--from-export", help="Compare offline from an export file."),
    ] = None,
    resamples: Annotated[int, Option(min=1, max=1_000_000, help="Bootstrap resamples.")] = 10_000,
    seed: Annotated[
        int, Option(min=0, help="Bootstrap seed (fixed: same ledger, same interval).")
    ] = 0,
    as_json: Json = False,
) -> None:
    """Pair A's and B's attempts on the same task digests: resolution, joules, dollars.

    Exact McNemar test on resolution, paired bootstrap intervals on joules and
    claimed dollars per task, and the tasks where they disagree. Reads the
    daemon's ledger through Export (auditor or operator), or an export file.
    """
    from jouled.compare import compare as compare_fn

    try:
        if export is not None:
            results, _ = _export_bodies(export)
        else:
            with connect() as c:
                results, _ = _bodies(v for k, v in c.export_stream() if k == "entry")
        doc = compare_fn(results, a, b, suite=suite or None, resamples=resamples, seed=seed)
    except JouledError as err:
        fail(err)
    if as_json:
        emit(doc.to_dict())
    else:
        render.compare_report(doc)


def logs(
    seq: Annotated[int, Option("--seq", min=0, max=CLAIM_MAX, help="The result's entry.")],
    as_json: Json = False,
) -> None:
    """A result's captured output per run and its full failing and missing test ids.

    Each text is checked against the hash its result signs; one that is absent or
    changed is shown as missing, never as the signed text.
    """
    logs_doc = ask(lambda c: c.logs(seq))
    if as_json:
        emit(logs_doc.to_dict())
    else:
        render.logs_report(logs_doc)


def receipt(
    key: Annotated[str, Option("--key", help="The submission's idempotency key.")] = "",
    seq: Annotated[
        int | None, Option("--seq", min=0, max=CLAIM_MAX, help="The result's entry.")
    ] = None,
    as_json: Json = False,
) -> None:
    """A result's receipt again, with a fresh inclusion proof (by idempotency key or seq)."""
    if not key and seq is None:
        error("give --key or --seq")
        raise SystemExit(EXIT_USAGE)
    if key and seq is not None:
        fail(
            UsageError(
                "give --key or --seq, not both: they may name two different results",
                hint="--key finds your submission by its idempotency key, --seq any entry",
            )
        )
    r = ask(lambda c: c.receipt(idempotency_key=key, seq=seq))
    if as_json:
        emit(r.to_dict())
    else:
        render.receipt_line(r)


def keys(as_json: Json = False) -> None:
    """The daemon's public signing keys and key ids (pin them out of band to verify)."""
    found = ask(lambda c: c.public_keys())
    if as_json:
        emit(found.to_dict())
    else:
        for k in found.keys:
            render.out.print(f"{k.status:8} {k.keyid}", highlight=False)
            sys.stdout.write(k.pem)


def bestofk(suite: Suite = "", wide: Wide = None, as_json: Json = False) -> None:
    """Tasks resolved within the first k rollouts against cumulative cost, with pass@k."""
    rows = ask(lambda c: c.best_of_k(suite)).rows
    if as_json:
        emit({"rows": [r.to_dict() for r in rows]})
    else:
        render.bestofk_table(rows, wide=wide)


def report(
    html_out: Annotated[Path, Option("--html", help="The HTML page to write.")],
    suite: Suite = "",
    axis: Annotated[str, Option(help="Frontier cost axis: joules, usd or wall.")] = "joules",
    export: Annotated[
        Path | None, Option("--from-export", help="Read an export file, not the daemon.")
    ] = None,
    title: Annotated[str, Option(help="The page's title.")] = "",
    as_json: Json = False,
) -> None:
    """One self-contained HTML page: frontier, best-of-k, every attempt, calibration, checkpoint.

    The page loads nothing (inline SVG and CSS, no script); figures need matplotlib
    (pip install 'joule-bench[plot]'), the tables do not.
    """
    from jb_client import report as report_mod

    from jouled.frontier import AXES

    try:
        if axis not in AXES:
            raise UsageError(f"unknown frontier axis {axis!r}", hint=f"use one of {sorted(AXES)}")
        if export is not None:
            data = report_mod.from_export(export, suite=suite, axis=axis)
        else:
            with connect() as c:
                data = report_mod.from_daemon(c, suite=suite, axis=axis)
        report_mod.write_report(data, html_out, title=title)
    except JouledError as err:
        fail(err)
    summary = {
        "out": str(html_out),
        "source": data.source,
        "entries": data.entries,
        "results": len(data.results),
        "frontier_rows": len(data.frontier),
        "checkpoint_size": data.checkpoint_size,
    }
    if as_json:
        emit(summary)
    else:
        render.err.print(
            f"{len(data.results)} attempts from the {data.source} -> {html_out}",
            highlight=False,
            markup=False,
        )
