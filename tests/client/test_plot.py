"""Figures: written as SVG or PNG without a display, hostile names drawn as text."""

from __future__ import annotations

import re
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from jb_client import plot

from jouled.errors import UsageError
from tests.client.ledger import HOSTILE, bestofk, frontier, hostile_ledger, result

BODIES = [d["body"] for d in hostile_ledger() if d["kind"] == "result"]


@pytest.mark.parametrize("axis", ["joules", "usd", "wall"])
@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_frontier_figure_writes_each_format_and_axis(
    tmp_path: Path, axis: str, suffix: str
) -> None:
    out = tmp_path / f"frontier.{suffix}"
    plot.write(plot.frontier_figure(frontier(BODIES, axis=axis), axis), out)
    data = out.read_bytes()
    if suffix == "png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    else:
        assert b"<svg" in data and len(data) > 10_000


def test_names_are_never_markup_or_mathtext() -> None:
    svg = plot.inline_svg(plot.frontier_figure(frontier(BODIES)), "f")
    # Text is drawn as glyph outlines, and the comments naming it are dropped.
    assert "<script" not in svg and "img" not in svg and "<!--" not in svg
    assert plot.label("a$b$_\x07c") == r"a\$b\$_?c"
    assert len(plot.label("x" * 500)) == 40


def test_rows_that_resolved_nothing_are_named_not_placed() -> None:
    rows = frontier([result(0, "s/a", "unresolved", solver="noop")["body"]])
    texts = [t.get_text() for t in plot.frontier_figure(rows).axes[0].texts]
    assert any("not placed" in t and "noop" in t for t in texts)


def test_empty_data_still_draws() -> None:
    assert "<svg" in plot.inline_svg(plot.frontier_figure([]), "f")
    assert "<svg" in plot.inline_svg(plot.bestofk_figure([]), "b")


def test_inline_svg_is_an_element_with_its_own_ids() -> None:
    a = plot.inline_svg(plot.bestofk_figure(bestofk(BODIES)), "one")
    b = plot.inline_svg(plot.frontier_figure(frontier(BODIES)), "two")
    assert a.startswith("<svg") and "<!DOCTYPE" not in a and "<?xml" not in a
    assert "<metadata>" not in a
    ids_a = set(re.findall(r'id="([^"]+)"', a))
    ids_b = set(re.findall(r'id="([^"]+)"', b))
    assert ids_a and all(i.startswith("one-") for i in ids_a)
    assert not ids_a & ids_b
    for ref in re.findall(r'(?:href="#|url\(#)([^")]+)', a):
        assert ref in ids_a


def test_notes_of_several_suites_have_their_own_ids() -> None:
    rows = frontier(
        [result(i, f"{s}/a", "unresolved", solver="noop")["body"] for i, s in enumerate("xyz")]
    )
    svg = plot.inline_svg(plot.frontier_figure(rows), "f")
    ids = re.findall(r'id="([^"]+)"', svg)
    assert len(ids) == len(set(ids))
    assert {"f-notes-0", "f-notes-1", "f-notes-2"} <= set(ids)


def test_the_same_figure_is_the_same_file(tmp_path: Path) -> None:
    rows = frontier(BODIES)
    plot.write(plot.frontier_figure(rows), tmp_path / "a.svg")
    plot.write(plot.frontier_figure(rows), tmp_path / "b.svg")
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


def test_unknown_format_or_axis_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="figure format"):
        plot.write(plot.frontier_figure([]), tmp_path / "f.pdf")
    with pytest.raises(UsageError, match="axis"):
        plot.frontier_figure([], "watts")


def test_hostile_name_is_in_the_data() -> None:
    assert any(b["solver"] == HOSTILE for b in BODIES)


def test_partial_dollar_claims_are_named_not_placed_on_the_dollar_axis() -> None:
    bodies = [
        result(0, "s/a", "resolved", solver="full", usd_micros=5000)["body"],
        result(1, "s/a", "resolved", solver="half", usd_micros=4000)["body"],
        result(2, "s/b", "resolved", solver="full", usd_micros=5000)["body"],
        result(3, "s/b", "resolved", solver="half")["body"],
    ]
    rows = frontier(bodies, axis="usd")
    shares = {r.solver: r.usd_claimed_share for r in rows}
    assert shares == {"full": 1.0, "half": 0.5}
    ax = plot.frontier_figure(rows, "usd").axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert any("only some attempts claim dollars" in t and "half" in t for t in texts)
    placed = [t for t in texts if "not placed" not in t]
    assert any(t.startswith("full") for t in placed)
    assert not any(t.startswith("half") for t in placed)
    # On the energy axis the same row has a cost and is placed.
    joules = [t.get_text() for t in plot.frontier_figure(rows, "joules").axes[0].texts]
    assert any(t.lstrip("~").startswith("half") for t in joules)


# -- names, ticks and notes as people see them -----------------------------------------


def _drawn(fig: Any) -> Any:
    """The figure laid out as it is written; returns the renderer that measures it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    return canvas.get_renderer()


def _crowd(n: int, where: str) -> list[dict[str, Any]]:
    """n solvers (long names) at one point: at 100%, or low (1 task of 20 resolved)."""
    bodies = []
    for i in range(n):
        solver = f"solver-{i}-" + "x" * 20
        bodies.append(result(i, "s/t0", "resolved", solver=solver)["body"])
        if where == "low":
            bodies += [
                result(100 * i + t, f"s/t{t}", "unresolved", solver=solver)["body"]
                for t in range(1, 20)
            ]
    return bodies


@pytest.mark.parametrize("n", [4, 8, 20])
@pytest.mark.parametrize("where", ["top", "low", "two-crowds"])
def test_crowded_names_never_overlap_nor_leave_the_picture(
    tmp_path: Path, n: int, where: str
) -> None:
    from matplotlib.text import Annotation, Text

    bodies = _crowd(n, "top" if where == "two-crowds" else where)
    if where == "two-crowds":  # a second crowd just beside the first, at a lower share
        bodies += [
            result(
                1000 + i,
                f"s/t{i % 2}",
                "resolved" if i % 2 else "unresolved",
                solver=f"other-{i}",
                grade_mj=5200,
            )["body"]
            for i in range(2 * n)
        ]
    fig = plot.frontier_figure(frontier(bodies))
    plot.write(fig, tmp_path / "f.svg")  # written first: the layout is the one on disk
    renderer = _drawn(fig)
    canvas = fig.bbox
    for ax in fig.axes:
        names = [t for t in ax.texts if isinstance(t, Annotation) and t.get_text()]
        assert names and all(t.get_visible() for t in names)
        boxes = [Text.get_window_extent(t, renderer) for t in names]
        others = [t.get_window_extent(renderer) for t in ax.texts if not isinstance(t, Annotation)]
        legend = ax.get_legend()
        if legend is not None:
            others.append(legend.get_window_extent(renderer))
        others.append(ax.title.get_window_extent(renderer))
        inside = ax.get_window_extent(renderer)
        for t, box in zip(names, boxes, strict=True):
            assert canvas.x0 <= box.x0 and box.x1 <= canvas.x1, t.get_text()
            assert canvas.y0 <= box.y0 and box.y1 <= canvas.y1, t.get_text()
            assert inside.x0 <= box.x0 and box.x1 <= inside.x1, t.get_text()
            assert inside.y0 <= box.y0 and box.y1 <= inside.y1, t.get_text()
            assert not any(box.overlaps(o) for o in others), t.get_text()
        for i, j in combinations(range(len(boxes)), 2):
            assert not boxes[i].overlaps(boxes[j]), (names[i].get_text(), names[j].get_text())


_PLAIN = re.compile(r"^(0|[1-9]\d{0,2}(\.\d+)?[kMGT]?|0\.0*[1-9]\d*)$")


@pytest.mark.parametrize(
    ("grade_mj", "expect"),
    [(12_000, "20"), (120_000, "200"), (1_200_000, "2k"), (12, "0.02"), (12_000_000_000, "20M")],
)
def test_ticks_read_as_plain_numbers(grade_mj: int, expect: str) -> None:
    bodies = [
        result(0, "s/a", "resolved", solver="a", grade_mj=grade_mj)["body"],
        result(1, "s/a", "resolved", solver="b", grade_mj=3 * grade_mj)["body"],
    ]
    figs = [plot.frontier_figure(frontier(bodies)), plot.bestofk_figure(bestofk(bodies))]
    for fig in figs:
        _drawn(fig)
        ax = fig.axes[0]
        ticks = [t.get_text() for t in ax.get_xticklabels() + ax.get_xticklabels(minor=True)]
        shown = [t for t in ticks if t]
        assert shown and all(_PLAIN.match(t) for t in shown), shown
        assert expect in shown, shown
    assert [plot.plain_number(v) for v in (0.02, 20, 200, 2000, 1500, 2e6, 0.0002)] == [
        "0.02",
        "20",
        "200",
        "2k",
        "1.5k",
        "2M",
        "0.0002",
    ]


def _entries(ax: Any) -> list[str]:
    """The texts drawn in the axes, each note under them one entry (its lines unwrapped)."""
    out = []
    for t in ax.texts:
        if str(t.get_gid()).startswith("notes-"):
            out += [e.replace("\n    ", " ") for e in re.split(r"\n(?=\S)", t.get_text())]
        else:
            out.append(t.get_text())
    return out


def test_the_dollar_axis_says_why_each_row_is_not_placed() -> None:
    bodies = [
        result(0, "s/a", "resolved", solver="half", usd_micros=4000)["body"],
        result(1, "s/b", "resolved", solver="half")["body"],
        result(2, "s/a", "resolved", solver="none")["body"],
        result(3, "s/b", "unresolved", solver="none")["body"],
        result(4, "s/a", "unresolved", solver="idle", usd_micros=4000)["body"],
    ]
    rows = frontier(bodies, axis="usd")
    texts = _entries(plot.frontier_figure(rows, "usd").axes[0])
    # Tasks were resolved: the empty plot must not say otherwise.
    assert not any("no resolved task" in t for t in texts)
    assert "no row to place: none claims dollars for every attempt" in texts
    [some] = [t for t in texts if "only some attempts claim dollars" in t]
    assert "half" in some and "none" not in some and "no Pareto verdict" in some
    [nothing] = [t for t in texts if "no attempt claims dollars" in t]
    assert "none · m1" in nothing and "half" not in nothing
    [idle] = [t for t in texts if "nothing resolved" in t]
    assert "idle" in idle and "half" not in idle and "none ·" not in idle
    # No name is drawn as if it were a point.
    assert all(t.startswith(("not placed", "no row")) for t in texts)


def test_wide_names_and_long_notes_stay_in_the_picture_and_apart(tmp_path: Path) -> None:
    """Names as wide as the font draws (W) and notes naming many rows, on the dollar axis."""
    wide = "W" * 60
    bodies = []
    for i in range(5):
        bodies += [
            result(i, "s/a", "resolved", solver=f"half{i}{wide}", model=wide, usd_micros=4000)[
                "body"
            ],
            result(10 + i, "s/b", "resolved", solver=f"half{i}{wide}", model=wide)["body"],
            result(20 + i, "s/a", "resolved", solver=f"none{i}{wide}", model=wide)["body"],
            result(30 + i, "s/a", "unresolved", solver=f"idle{i}{wide}", model=wide)["body"],
            result(
                40 + i,
                "s/a",
                "resolved",
                solver=f"full{i}{wide}",
                model=wide,
                usd_micros=3000 * (i + 1),
            )["body"],
        ]
    fig = plot.frontier_figure(frontier(bodies, axis="usd"), "usd")
    plot.write(fig, tmp_path / "f.png")
    renderer = _drawn(fig)
    [ax] = fig.axes
    texts = [t for t in [*ax.texts, ax.xaxis.label, ax.title] if t.get_text() and t.get_visible()]
    assert sum(t.get_text().startswith("full") for t in texts) == 5  # every point named
    boxes = [t.get_window_extent(renderer) for t in texts]
    canvas = fig.bbox
    for t, box in zip(texts, boxes, strict=True):
        inside = canvas.x0 <= box.x0 and box.x1 <= canvas.x1
        assert inside and canvas.y0 <= box.y0 and box.y1 <= canvas.y1, t.get_text()
    for i, j in combinations(range(len(boxes)), 2):
        assert not boxes[i].overlaps(boxes[j]), (texts[i].get_text(), texts[j].get_text())


def test_bestofk_figure_leaves_unclaimed_dollars_off_the_cost_panel() -> None:
    docs = [result(n, "s/a", "resolved", solver="u", rollout=n)["body"] for n in range(2)]
    rows = bestofk(docs)
    assert all(r.usd_cumulative is None for r in rows)  # no claim: null, never $0
    fig = plot.bestofk_figure(rows)
    _, usd = fig.axes[:2]
    assert all(len(list(line.get_xdata())) == 0 for line in usd.get_lines())  # type: ignore[arg-type]
