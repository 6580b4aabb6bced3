"""Figures: written as SVG or PNG without a display, hostile names drawn as text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from jb_client import plot

from jouled.errors import UsageError
from jouled.frontier import best_of_k, frontier_rows
from tests.client.ledger import HOSTILE, hostile_ledger, result

BODIES = [d["body"] for d in hostile_ledger() if d["kind"] == "result"]


@pytest.mark.parametrize("axis", ["joules", "usd", "wall"])
@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_frontier_figure_writes_each_format_and_axis(
    tmp_path: Path, axis: str, suffix: str
) -> None:
    out = tmp_path / f"frontier.{suffix}"
    plot.write(plot.frontier_figure(frontier_rows(BODIES, axis=axis), axis), out)
    data = out.read_bytes()
    if suffix == "png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    else:
        assert b"<svg" in data and len(data) > 10_000


def test_names_are_never_markup_or_mathtext() -> None:
    svg = plot.inline_svg(plot.frontier_figure(frontier_rows(BODIES)), "f")
    # Text is drawn as glyph outlines, and the comments naming it are dropped.
    assert "<script" not in svg and "img" not in svg and "<!--" not in svg
    assert plot.label("a$b$_\x07c") == r"a\$b\$_?c"
    assert len(plot.label("x" * 500)) == 40


def test_rows_that_resolved_nothing_are_named_not_placed() -> None:
    rows = frontier_rows([result(0, "s/a", "unresolved", solver="noop")["body"]])
    texts = [t.get_text() for t in plot.frontier_figure(rows).axes[0].texts]
    assert any("not placed" in t and "noop" in t for t in texts)


def test_empty_data_still_draws() -> None:
    assert "<svg" in plot.inline_svg(plot.frontier_figure([]), "f")
    assert "<svg" in plot.inline_svg(plot.bestofk_figure([]), "b")


def test_inline_svg_is_an_element_with_its_own_ids() -> None:
    a = plot.inline_svg(plot.bestofk_figure(best_of_k(BODIES)), "one")
    b = plot.inline_svg(plot.frontier_figure(frontier_rows(BODIES)), "two")
    assert a.startswith("<svg") and "<!DOCTYPE" not in a and "<?xml" not in a
    assert "<metadata>" not in a
    ids_a = set(re.findall(r'id="([^"]+)"', a))
    ids_b = set(re.findall(r'id="([^"]+)"', b))
    assert ids_a and all(i.startswith("one-") for i in ids_a)
    assert not ids_a & ids_b
    for ref in re.findall(r'(?:href="#|url\(#)([^")]+)', a):
        assert ref in ids_a


def test_the_same_figure_is_the_same_file(tmp_path: Path) -> None:
    rows = frontier_rows(BODIES)
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
    rows = frontier_rows(bodies, axis="usd")
    shares = {r["solver"]: r["usd_claimed_share"] for r in rows}
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


def test_bestofk_figure_leaves_unclaimed_dollars_off_the_cost_panel() -> None:
    docs = [result(n, "s/a", "resolved", solver="u", rollout=n)["body"] for n in range(2)]
    rows = best_of_k(docs)
    assert all(r["usd_cumulative"] is None for r in rows)  # no claim: null, never $0
    fig = plot.bestofk_figure(rows)
    _, usd = fig.axes[:2]
    assert all(len(line.get_xdata()) == 0 for line in usd.get_lines())
