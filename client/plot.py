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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from jouled.errors import UsageError
from jouled.frontier import claims_all_usd

if TYPE_CHECKING:
    from jb_client.documents import BestOfKRow
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from jouled.documents.sent import FrontierRow

Cost = Callable[["FrontierRow"], float | None]

# Frontier axis -> (the row's cost on it, the axis label).
AXES: dict[str, tuple[Cost, str]] = {
    "joules": (lambda r: r.joules_per_resolved, "joules per resolved task (J)"),
    "usd": (lambda r: r.usd_per_resolved, "claimed $ per resolved task"),
    "wall": (lambda r: r.wall_median_s, "median wall time per attempt (s)"),
}

FORMATS = ("svg", "png")
_LABEL_MAX = 40
_GAP = 4.0  # points between a point and its name
_LABEL_LINE_IN = 0.15  # inches a name's line takes; an axes holds two lines per row
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


def row_name(row: FrontierRow) -> str:
    solver, model = str(row.solver or "-"), str(row.model or "")
    return f"{solver} · {model}" if model else solver


@contextmanager
def _quiet_glyphs() -> Iterator[None]:
    # A name in a script the bundled font lacks draws as boxes; that is no error.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
        warnings.filterwarnings("ignore", message=r"Matplotlib currently does not support")
        yield


def plain_number(value: float) -> str:
    """A tick as people read it: 20, 200, 2k, 1.5M, 0.02; never `2×10^1` nor `1e-05`."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    sign, v = ("-" if value < 0 else ""), abs(value)
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= size:
            return sign + _digits(v / size) + suffix
    return sign + _digits(v)


def _digits(v: float) -> str:
    # Three significant digits, fixed point, trailing zeros dropped.
    places = max(0, 2 - math.floor(math.log10(v)))
    return f"{v:.{places}f}".rstrip("0").rstrip(".") if places else f"{v:.0f}"


def _plain_log_formatter(minor: bool) -> Any:
    from matplotlib.ticker import LogFormatter

    class PlainLog(LogFormatter):
        # matplotlib decides which ticks carry a label; the text is a plain number.
        def __call__(self, x: float, pos: int | None = None) -> str:
            return plain_number(x) if super().__call__(x, pos) else ""

    return PlainLog(10, labelOnlyBase=not minor)


def _cost_scale(ax: Axes, values: Sequence[float], which: str = "x") -> bool:
    """A log scale when some cost is positive (returns True), else linear; plain ticks."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    if any(v > 0 for v in values):
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        axis.set_major_formatter(_plain_log_formatter(minor=False))
        axis.set_minor_formatter(_plain_log_formatter(minor=True))
        return True
    ax.ticklabel_format(axis="x" if which == "x" else "y", style="plain", useOffset=False)
    return False


def _percent_axis(ax: Axes, text: str) -> None:
    from matplotlib.ticker import PercentFormatter

    ax.set_ylim(-4, 104)
    ax.yaxis.set_major_formatter(PercentFormatter(100, decimals=0))
    ax.set_ylabel(text)
    ax.grid(True, which="major", alpha=0.3)


def _plottable(value: float | None, log: bool) -> TypeGuard[float]:
    if value is None:
        return False
    v = float(value)
    return math.isfinite(v) and (v > 0 or not log)


def _palette(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


# -- the frontier ----------------------------------------------------------------------


def frontier_figure(rows: Sequence[FrontierRow], axis: str = "joules") -> Figure:
    """Resolution (with its 95% interval) against a cost per suite, the Pareto staircase.

    Points whose energy is not reliable are drawn hollow and named with `~`; a
    row that has no finite cost (it resolved nothing) cannot be placed and is
    named under the axes instead.
    """
    if axis not in AXES:
        raise UsageError(f"unknown frontier axis {axis!r}", hint=f"use one of {sorted(AXES)}")
    Figure = _figure_class()
    from matplotlib.lines import Line2D

    cost, xlabel = AXES[axis]
    by_suite: dict[str, list[FrontierRow]] = defaultdict(list)
    for row in rows:
        by_suite[str(row.suite)].append(row)
    suites = sorted(by_suite) or [""]
    # Tall enough that every name finds a free line beside its point (see `_place_labels`).
    height = max(
        4.8, 1.8 + 2 * _LABEL_LINE_IN * max((len(v) for v in by_suite.values()), default=0)
    )
    fig = Figure(figsize=(8, height * len(suites)), layout="constrained")
    axes = fig.subplots(len(suites), 1, squeeze=False)[:, 0]
    for ax, suite in zip(axes, suites, strict=True):
        _frontier_axes(ax, suite, by_suite.get(suite, []), axis, cost, xlabel)
    legend = [
        Line2D([], [], marker="o", ls="", color="0.3", label="energy reliable"),
        Line2D([], [], marker="o", ls="", color="0.3", mfc="none", label="~ energy not reliable"),
        Line2D([], [], color="0.2", lw=1.5, drawstyle="steps-post", label="Pareto frontier"),
        Line2D([], [], color="0.5", marker="|", ls="", ms=12, label="95% interval (Wilson)"),
    ]
    if axis != "joules":
        legend = legend[2:]
    axes[0].legend(handles=legend, loc="lower right", fontsize=8, framealpha=0.9)
    _place_labels(fig)
    return fig


def _place_labels(fig: Figure) -> None:
    """Move each point's name to the nearest free line beside it, inside its axes.

    The layout is settled first (names take no part in it), then names go one by
    one, highest point first, to the first spot, right or left of the point and
    nearest its height, that stays inside the axes and meets no other name, the
    legend or a note. A name moved off its point gets a thin line to it. A name
    with no free spot (the figure is sized so none should lack one) is named under
    the axes instead of drawn over another.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Annotation
    from matplotlib.transforms import Bbox

    canvas = FigureCanvasAgg(fig)  # measures text; figures are written through it anyway
    for _ in range(3):
        fig.draw_without_rendering()
        renderer = canvas.get_renderer()
        crowded: dict[Axes, list[str]] = {}
        for ax in fig.axes:
            names = [t for t in ax.texts if isinstance(t, Annotation) and t.get_visible()]
            taken = [t.get_window_extent(renderer) for t in ax.texts if t not in names]
            legend = ax.get_legend()
            if legend is not None:
                taken.append(legend.get_window_extent(renderer))
            area = ax.get_window_extent(renderer).expanded(1, 1)
            area = Bbox.from_extents(area.x0 + 2, area.y0 + 2, area.x1 - 2, area.y1 - 2)
            points = {id(t): ax.transData.transform(t.xy) for t in names}
            for t in sorted(names, key=lambda t: (-points[id(t)][1], points[id(t)][0])):
                box = _free_spot(t, points[id(t)], renderer, area, taken, fig.dpi)
                if box is None:
                    t.set_visible(False)
                    crowded.setdefault(ax, []).append(t.get_text())
                else:
                    taken.append(box)
                    _leader(ax, t, points[id(t)], box, fig.dpi)
        if not crowded:
            return
        for ax, unnamed in crowded.items():
            _add_note(ax, "not named (too crowded to name here)", unnamed)


def _free_spot(
    text: Any, point: Any, renderer: Any, area: Any, taken: list[Any], dpi: float
) -> Any:
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    size = Text.get_window_extent(text, renderer)  # the words alone
    w, h = size.width, size.height
    px, py = float(point[0]), float(point[1])
    gap = _GAP * dpi / 72
    step = h + 2
    for k in range(int(area.height / step) + 2):
        for y0 in (py + gap + k * step, py - gap - h - k * step):
            # Right of the point, left of it, or slid along to stay inside the axes.
            for x0 in (px + gap, px - gap - w, min(max(px - w / 2, area.x0), area.x1 - w)):
                box = Bbox.from_extents(x0, y0, x0 + w, y0 + h)
                inside = area.x0 <= box.x0 and box.x1 <= area.x1
                inside = inside and area.y0 <= box.y0 and box.y1 <= area.y1
                if inside and not any(box.overlaps(other.expanded(1.02, 1.1)) for other in taken):
                    text.xyann = ((x0 - px) * 72 / dpi, (y0 - py) * 72 / dpi)
                    return box
    return None


def _leader(ax: Axes, text: Any, point: Any, box: Any, dpi: float) -> None:
    """A thin line from a name moved off its point back to the point."""
    px, py = float(point[0]), float(point[1])
    if box.y0 - 2 * box.height < py < box.y1 + 2 * box.height:
        return  # next to its point: no line needed
    x = box.x0 if box.x0 > px else box.x1
    y = (box.y0 + box.y1) / 2
    ax.annotate(
        "",
        text.xy,
        xytext=((x - px) * 72 / dpi, (y - py) * 72 / dpi),
        textcoords="offset points",
        arrowprops={"arrowstyle": "-", "lw": 0.5, "color": text.get_color(), "shrinkB": 4},
        annotation_clip=False,
        in_layout=False,
    )


def _frontier_axes(
    ax: Axes,
    suite: str,
    rows: Sequence[FrontierRow],
    axis: str,
    cost: Cost,
    xlabel: str,
) -> None:
    priced = [(r, cost(r)) for r in rows]
    log = _cost_scale(
        ax, [float(c) for r, c in priced if c is not None and _why_not_placed(r, axis, c) is None]
    )
    placed: list[tuple[float, float, FrontierRow]] = []
    missing: dict[str, list[str]] = defaultdict(list)
    for r, c in priced:
        why = _why_not_placed(r, axis, c)
        if why is None and _plottable(c, log):
            placed.append((float(c), 100 * float(r.resolution), r))
        else:
            missing[why or _NO_COST].append(row_name(r))
    colours = _palette(len(placed))
    for (x, y, r), colour in zip(placed, colours, strict=True):
        # `~` speaks of energy: on the dollar and wall axes every point is drawn plain.
        shaky = axis == "joules" and r.reliable_share != 1
        low, high = 100 * float(r.ci_low), 100 * float(r.ci_high)
        drawn = ax.errorbar(
            [x],
            [y],
            yerr=[[max(0.0, y - low)], [max(0.0, high - y)]],
            fmt="o",
            ms=8 if r.pareto else 6,
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
        name = ("~" if shaky else "") + label(row_name(r)) + (" *" if r.pareto else "")
        ax.annotate(
            name,
            (x, y),
            xytext=(_GAP, _GAP),
            textcoords="offset points",
            fontsize=8,
            color=colour,
            va="bottom",
            annotation_clip=False,
            in_layout=False,  # placed after the layout, inside the axes (see `_place_labels`)
        )
    front = sorted((x, y) for x, y, r in placed if r.pareto)
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
            0.5, 0.5, _nothing_placed(rows, axis), ha="center", va="center", transform=ax.transAxes
        )
    ax.set_xlabel(label(xlabel + (", log scale" if log else ""), 80))
    _percent_axis(ax, "resolution")
    ax.set_title(label(f"{suite}: resolution vs {AXES[axis][1]}", 90), fontsize=10)
    notes = [(why, missing[why]) for why in _REASONS if missing[why]]
    for why, names in notes:
        _add_note(ax, why, [label(m, 30) for m in names])


_NOTE_WIDTH = 70  # characters a line of notes holds: even 70 wide glyphs fit the figure


def _add_note(ax: Axes, why: str, names: Sequence[str]) -> None:
    """Name rows under the axes, with why they have no point; one text block per axes,
    its lines wrapped, so notes never run into each other nor off the figure."""
    import textwrap

    from matplotlib.transforms import ScaledTranslation

    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    lines = textwrap.wrap(
        f"{why}: {shown}",
        _NOTE_WIDTH,
        subsequent_indent="    ",
        break_long_words=True,
        break_on_hyphens=False,
    )
    # The gid becomes an SVG id: one per axes, the same for the same figure.
    gid = f"notes-{ax.figure.axes.index(ax)}"
    notes = next((t for t in ax.texts if t.get_gid() == gid), None)
    if notes is None:
        # Below the tick labels and the axis label, whatever the axes' height.
        below = ScaledTranslation(0, -44 / 72, ax.figure.dpi_scale_trans)
        notes = ax.text(
            0.0, 0.0, "", transform=ax.transAxes + below, fontsize=7, color="0.35", va="top"
        )
        notes.set_gid(gid)
        lines_before: list[str] = []
    else:
        lines_before = notes.get_text().split("\n")
    notes.set_text("\n".join([*lines_before, *lines]))


_NOTHING = "not placed (nothing resolved)"
_NONE = "not placed (no attempt claims dollars)"
_SOME = "not placed (only some attempts claim dollars: no dollar cost, no Pareto verdict)"
_NO_COST = "not placed (no cost on this axis)"
_REASONS = (_NOTHING, _NONE, _SOME, _NO_COST)


def _why_not_placed(row: FrontierRow, axis: str, cost: float | None) -> str | None:
    """Why a row has no point on `axis`, in the words drawn under the axes; None if it has."""
    if not row.resolved:
        return _NOTHING
    if axis == "usd" and not claims_all_usd(row.to_dict()):
        return _NONE if not row.usd_claimed_share else _SOME
    if cost is None:
        return _NO_COST
    return None


def _nothing_placed(rows: Sequence[FrontierRow], axis: str) -> str:
    if not rows:
        return "no results"
    if not any(r.resolved for r in rows):
        return "no resolved task to place"
    if axis == "usd":
        return "no row to place: none claims dollars for every attempt"
    return "no row with a cost to place"


# -- best of k -------------------------------------------------------------------------


def bestofk_figure(rows: Sequence[BestOfKRow]) -> Figure:
    """Per (suite, solver, model): resolved within k, and the visible pick, against the
    cumulative joules and the cumulative claimed dollars of the first k rollouts."""
    Figure = _figure_class()
    from matplotlib.lines import Line2D

    groups: dict[tuple[str, str, str], list[BestOfKRow]] = defaultdict(list)
    for row in rows:
        groups[(str(row.suite), str(row.solver), str(row.model or ""))].append(row)
    fig = Figure(figsize=(10, 4.6 + 0.15 * len(groups)), layout="constrained")
    ax_j, ax_usd = fig.subplots(1, 2)
    colours = _palette(len(groups))
    handles: list[Any] = []
    names: list[str] = []
    panels: tuple[tuple[Axes, Callable[[BestOfKRow], float | None], str], ...] = (
        (ax_j, lambda r: r.joules_cumulative, "cumulative joules of the first k rollouts (J)"),
        (ax_usd, lambda r: r.usd_cumulative, "cumulative claimed $ of the first k rollouts"),
    )
    for panel, cumulative, xlabel in panels:
        # No claim (null) has no place on a cost axis: such rows are left off the panel.
        log = _cost_scale(panel, [float(c) for c in map(cumulative, rows) if c is not None])
        for (key, group), colour in zip(sorted(groups.items()), colours, strict=True):
            priced = [(cumulative(r), r) for r in sorted(group, key=lambda r: int(r.k))]
            pts = [(float(c), r) for c, r in priced if _plottable(c, log)]
            xs = [x for x, _ in pts]
            panel.plot(
                xs, [100 * float(r.resolution_within_k) for _, r in pts], "o-", color=colour, ms=4
            )
            panel.plot(
                xs,
                [100 * float(r.selected_resolution or 0.0) for _, r in pts],
                "s--",
                color=colour,
                ms=3,
                alpha=0.8,
            )
            ends = pts[:1] + pts[-1:] if len(pts) > 1 else pts
            for x, r in ends:
                panel.annotate(
                    f"k={int(r.k)}",
                    (x, 100 * float(r.resolution_within_k)),
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
        xs_all = [float(c) for c in map(cumulative, rows) if _plottable(c, log)]
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
