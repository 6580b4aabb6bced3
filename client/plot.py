"""Figures of the frontier and of best-of-k, drawn with matplotlib (the `plot` extra).

Figures are built on `matplotlib.figure.Figure` directly, never through pyplot:
no GUI backend is chosen, nothing global changes, and PNGs go through Agg, so
this runs on a host with no display. Text is drawn as glyph outlines in SVG,
so an inline figure needs no font. Names that come from results (solvers,
models) are drawn as plain text: control characters are dropped and `$` is
escaped so that a name is never read as mathtext.
"""

from __future__ import annotations

import io
import math
import re
import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jouled.errors import UsageError
from jouled.frontier import claims_all_usd

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Frontier axis -> (the row's cost column, the axis label).
AXES = {
    "joules": ("joules_per_resolved", "joules per resolved task (J)"),
    "usd": ("usd_per_resolved", "claimed $ per resolved task"),
    "wall": ("wall_median_s", "median wall time per attempt (s)"),
}

FORMATS = ("svg", "png")
_LABEL_MAX = 40
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class PlotUnavailable(UsageError):
    """matplotlib is not installed."""


def _figure_class() -> type[Figure]:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable(
            "drawing figures needs matplotlib",
            hint="install the plot extra: pip install 'joule-bench[plot]'",
        ) from None
    return Figure


def available() -> bool:
    try:
        _figure_class()
    except PlotUnavailable:
        return False
    return True


def label(text: str, limit: int = _LABEL_MAX) -> str:
    """A name as drawn: one line, bounded, never mathtext."""
    text = _CONTROL.sub("?", text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("$", r"\$")


def row_name(row: Mapping[str, Any]) -> str:
    solver, model = str(row.get("solver") or "-"), str(row.get("model") or "")
    return f"{solver} · {model}" if model else solver


@contextmanager
def _quiet_glyphs() -> Iterator[None]:
    # A name in a script the bundled font lacks draws as boxes; that is no error.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
        warnings.filterwarnings("ignore", message=r"Matplotlib currently does not support")
        yield


def _cost_scale(ax: Axes, values: Sequence[float], which: str = "x") -> bool:
    """A log scale when some cost is positive (returns True), else linear."""
    if any(v > 0 for v in values):
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        return True
    return False


def _percent_axis(ax: Axes, text: str) -> None:
    from matplotlib.ticker import PercentFormatter

    ax.set_ylim(-4, 104)
    ax.yaxis.set_major_formatter(PercentFormatter(100, decimals=0))
    ax.set_ylabel(text)
    ax.grid(True, which="major", alpha=0.3)


def _plottable(value: Any, log: bool) -> bool:
    if value is None:
        return False
    v = float(value)
    return math.isfinite(v) and (v > 0 or not log)


def _palette(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


# -- the frontier ----------------------------------------------------------------------


def frontier_figure(rows: Sequence[Mapping[str, Any]], axis: str = "joules") -> Figure:
    """Resolution (with its 95% interval) against a cost per suite, the Pareto staircase.

    Points whose energy is not reliable are drawn hollow and named with `~`; a
    row that has no finite cost (it resolved nothing) cannot be placed and is
    named under the axes instead.
    """
    if axis not in AXES:
        raise UsageError(f"unknown frontier axis {axis!r}", hint=f"use one of {sorted(AXES)}")
    Figure = _figure_class()
    from matplotlib.lines import Line2D

    column, xlabel = AXES[axis]
    by_suite: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_suite[str(row["suite"])].append(row)
    suites = sorted(by_suite) or [""]
    fig = Figure(figsize=(8, 4.8 * len(suites)), layout="constrained")
    axes = fig.subplots(len(suites), 1, squeeze=False)[:, 0]
    for ax, suite in zip(axes, suites, strict=True):
        _frontier_axes(ax, suite, by_suite.get(suite, []), axis, column, xlabel)
    legend = [
        Line2D([], [], marker="o", ls="", color="0.3", label="energy reliable"),
        Line2D([], [], marker="o", ls="", color="0.3", mfc="none", label="~ energy not reliable"),
        Line2D([], [], color="0.2", lw=1.5, drawstyle="steps-post", label="Pareto frontier"),
        Line2D([], [], color="0.5", marker="|", ls="", ms=12, label="95% interval (Wilson)"),
    ]
    if axis != "joules":
        legend = legend[2:]
    axes[0].legend(handles=legend, loc="lower right", fontsize=8, framealpha=0.9)
    return fig


def _frontier_axes(
    ax: Axes,
    suite: str,
    rows: Sequence[Mapping[str, Any]],
    axis: str,
    column: str,
    xlabel: str,
) -> None:
    partial = [r for r in rows if axis == "usd" and not claims_all_usd(r)]
    rows = [r for r in rows if r not in partial]
    costs = [float(r[column]) for r in rows if r.get(column) is not None and r["resolved"]]
    log = _cost_scale(ax, costs)
    placed: list[tuple[float, float, Mapping[str, Any]]] = []
    missing: list[str] = []
    for r in rows:
        x = r.get(column)
        if r["resolved"] and _plottable(x, log):
            placed.append((float(r[column]), 100 * float(r["resolution"]), r))
        else:
            missing.append(row_name(r))
    colours = _palette(len(placed))
    for (x, y, r), colour in zip(placed, colours, strict=True):
        # `~` speaks of energy: on the dollar and wall axes every point is drawn plain.
        shaky = axis == "joules" and r.get("reliable_share") != 1
        low, high = 100 * float(r["ci_low"]), 100 * float(r["ci_high"])
        drawn = ax.errorbar(
            [x],
            [y],
            yerr=[[max(0.0, y - low)], [max(0.0, high - y)]],
            fmt="o",
            ms=8 if r.get("pareto") else 6,
            color=colour,
            mfc="none" if shaky else colour,
            mew=1.5,
            ecolor=colour,
            elinewidth=1,
            capsize=3,
            alpha=0.95,
        )
        if shaky:
            for bars in drawn.lines[2]:
                bars.set_linestyle("--")
        name = ("~" if shaky else "") + label(row_name(r)) + (" *" if r.get("pareto") else "")
        ax.annotate(
            name, (x, y), xytext=(6, 5), textcoords="offset points", fontsize=8, color=colour
        )
    front = sorted((x, y) for x, y, r in placed if r.get("pareto"))
    if front:
        xs = [x for x, _ in front]
        ys = [y for _, y in front]
        right = max(x for x, _, _ in placed)
        right = right * 2.5 if log else right + max(1.0, abs(right)) * 0.2
        ax.plot([*xs, right], [*ys, ys[-1]], drawstyle="steps-post", color="0.2", lw=1.5)
    if placed and log:
        xs_all = [x for x, _, _ in placed]
        ax.set_xlim(min(xs_all) / 2, max(xs_all) * 2.5)  # room for the names
    if not placed:
        ax.text(
            0.5, 0.5, "no resolved task to place", ha="center", va="center", transform=ax.transAxes
        )
    ax.set_xlabel(label(xlabel + (", log scale" if log else ""), 80))
    _percent_axis(ax, "resolution")
    ax.set_title(label(f"{suite}: resolution vs {AXES[axis][1]}", 90), fontsize=10)
    notes = [
        (why, names)
        for why, names in (
            ("not placed (nothing resolved, or no cost)", missing),
            ("not placed (only some attempts claim dollars)", [row_name(r) for r in partial]),
        )
        if names
    ]
    for i, (why, names) in enumerate(notes):
        shown = ", ".join(label(m, 30) for m in names[:3])
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        ax.text(
            0.0,
            (-0.2 if log else -0.16) - 0.05 * i,
            label(f"{why}: {shown}{more}", 200),
            transform=ax.transAxes,
            fontsize=7,
            color="0.35",
            va="top",
        )


# -- best of k -------------------------------------------------------------------------


def bestofk_figure(rows: Sequence[Mapping[str, Any]]) -> Figure:
    """Per (suite, solver, model): resolved within k, and the visible pick, against the
    cumulative joules and the cumulative claimed dollars of the first k rollouts."""
    Figure = _figure_class()
    from matplotlib.lines import Line2D

    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(str(row["suite"]), str(row["solver"]), str(row["model"] or ""))].append(row)
    fig = Figure(figsize=(10, 4.6 + 0.15 * len(groups)), layout="constrained")
    ax_j, ax_usd = fig.subplots(1, 2)
    colours = _palette(len(groups))
    handles: list[Any] = []
    names: list[str] = []
    for panel, column, xlabel in (
        (ax_j, "joules_cumulative", "cumulative joules of the first k rollouts (J)"),
        (ax_usd, "usd_cumulative", "cumulative claimed $ of the first k rollouts"),
    ):
        # No claim (null) has no place on a cost axis: such rows are left off the panel.
        log = _cost_scale(panel, [float(r[column]) for r in rows if r[column] is not None])
        for (key, group), colour in zip(sorted(groups.items()), colours, strict=True):
            group = sorted(group, key=lambda r: int(r["k"]))
            pts = [r for r in group if r[column] is not None and _plottable(r[column], log)]
            xs = [float(r[column]) for r in pts]
            panel.plot(
                xs, [100 * float(r["resolution_within_k"]) for r in pts], "o-", color=colour, ms=4
            )
            panel.plot(
                xs,
                [100 * float(r.get("selected_resolution") or 0.0) for r in pts],
                "s--",
                color=colour,
                ms=3,
                alpha=0.8,
            )
            ends = pts[:1] + pts[-1:] if len(pts) > 1 else pts
            for r in ends:
                panel.annotate(
                    f"k={int(r['k'])}",
                    (float(r[column]), 100 * float(r["resolution_within_k"])),
                    xytext=(3, 4),
                    textcoords="offset points",
                    fontsize=7,
                    color=colour,
                )
            if panel is ax_j:
                handles.append(Line2D([], [], color=colour, marker="o", ms=4))
                suite, solver, model = key
                names.append(label(f"{suite}: {solver}" + (f" · {model}" if model else ""), 50))
        if panel is ax_usd and not log:
            panel.text(0.5, 0.5, "no dollars claimed", ha="center", transform=panel.transAxes)
        xs_all = [float(r[column]) for r in rows if _plottable(r[column], log)]
        if log and xs_all:
            panel.set_xlim(min(xs_all) / 1.6, max(xs_all) * 1.6)  # room for the k labels
        panel.set_xlabel(label(xlabel + (", log scale" if log else ""), 80), fontsize=9)
        _percent_axis(panel, "tasks resolved")
    handles += [
        Line2D([], [], color="0.3", ls="-", marker="o", ms=4),
        Line2D([], [], color="0.3", ls="--", marker="s", ms=3),
    ]
    names += ["any of the first k resolved (oracle)", "the pick by visible tests"]
    fig.legend(handles, names, fontsize=7, loc="outside lower center", ncols=2, frameon=False)
    if not groups:
        ax_j.text(0.5, 0.5, "no attempts", ha="center", va="center", transform=ax_j.transAxes)
    fig.suptitle("best-of-k: what k rollouts buy", fontsize=10)
    return fig


# -- output ----------------------------------------------------------------------------


def _save(fig: Figure, stream: Any, fmt: str, salt: str) -> None:
    from matplotlib import rc_context

    # A fixed salt makes the SVG's ids, and so the file, the same for the same figure.
    with rc_context({"svg.fonttype": "path", "svg.hashsalt": salt}), _quiet_glyphs():
        fig.savefig(stream, format=fmt, metadata={"Date": None} if fmt == "svg" else None)


def write(fig: Figure, path: Path) -> None:
    """Write a figure to `path`; the format is its suffix (.svg or .png)."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise UsageError(
            f"cannot tell a figure format from {path.name!r}",
            hint="name the file .svg or .png",
        )
    buf = io.BytesIO()
    _save(fig, buf, fmt, "joule-bench")
    try:
        path.write_bytes(buf.getvalue())
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror}") from None


_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(href="#|url\(#)([^")]+)')


def inline_svg(fig: Figure, prefix: str) -> str:
    """A figure as an `<svg>` element to place inside an HTML page.

    The XML prolog, DOCTYPE, metadata and comments go; every id (and every reference to
    one) is prefixed, so several figures in one page never share an id.
    """
    buf = io.StringIO()
    _save(fig, buf, "svg", prefix)
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)
    # The comments repeat each drawn text; matplotlib breaks every "--" in them, so the
    # first "-->" ends each one, but a page has no use for them.
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    text = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = _REF.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", text)
    return text.strip()
