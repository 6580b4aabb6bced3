"""The `compare` report for people: verdicts, notes and disagreements are all printed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from jb_client import render

from jouled.compare import compare
from tests.test_compare import paired_suite, result


@pytest.fixture(autouse=True)
def fresh_consoles() -> Iterator[None]:
    render.terminal.cache_clear()
    yield
    render.terminal.cache_clear()


def test_the_report_says_what_the_numbers_support(capsys: pytest.CaptureFixture[str]) -> None:
    render.compare_report(compare(paired_suite(8, 2, 3, 2), "a", "b"))
    out = capsys.readouterr().out
    assert "paired on task digest: 15 tasks" in out
    assert "McNemar p=0.1094 (A only 8, B only 2)" in out
    assert "no difference in resolution the test can detect" in out
    assert "A used more energy per task than B" in out
    assert "10 paired tasks where A and B disagree" in out


def test_too_few_pairs_is_said_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    render.compare_report(compare([result("a", "x", True), result("b", "x", False)], "a", "b"))
    out = capsys.readouterr().out
    assert "too few paired tasks to conclude anything about resolution: 1 (need 10)" in out
    assert "note: only 1 paired task(s)" in out


def test_hostile_names_stay_text(capsys: pytest.CaptureFixture[str]) -> None:
    bodies = [result("[red]a", "x", True), result("b", "x", False)]
    render.compare_report(compare(bodies, "[red]a", "b"))
    assert "A: [red]a" in capsys.readouterr().out


@pytest.mark.parametrize("width", [80, 100])
def test_no_figure_is_cut_at_80_or_100_columns(width: int) -> None:
    import io

    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, markup=False)
    render.compare_report(compare(paired_suite(8, 2, 3, 2), "a", "b"), console=console)
    out = buf.getvalue()
    assert "…" not in out, out  # folded onto another line, never cut
    assert max(len(line) for line in out.splitlines()) <= width
    assert "McNemar p=0.1094 (A only 8, B only 2)" in " ".join(out.split()), out
