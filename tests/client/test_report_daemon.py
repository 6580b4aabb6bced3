"""`jb-client frontier --plot`, `report` and `meter` against a real daemon."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.client.chromium import busy_pixels, needs_chromium, screenshot
from tests.integration.conftest import Daemon, start_daemon


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon that graded the smoke suite: reference and noop, two rollouts each."""
    d = start_daemon(tmp_path_factory.mktemp("report") / "data")
    done = d.client("run", "--suite", "smoke", "--solvers", "reference,noop", "--rollouts", "2")
    assert done.returncode == 0, done.stderr
    yield d
    assert d.stop() == 0, d.log.read_text()


@pytest.mark.parametrize("name", ["frontier.svg", "frontier.png"])
def test_frontier_plot(graded: Daemon, tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    done = graded.client("frontier", "--plot", str(out), "--axis", "wall")
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 10_000 and "reference" in done.stdout


def test_frontier_plot_to_an_unknown_format_is_a_usage_error(
    graded: Daemon, tmp_path: Path
) -> None:
    done = graded.client("frontier", "--plot", str(tmp_path / "f.gif"))
    assert done.returncode == 2 and "figure format" in done.stderr


def test_meter_prints_no_dicts(graded: Daemon) -> None:
    done = graded.client("meter")
    assert done.returncode == 0, done.stderr
    assert "estimator" in done.stdout and "{" not in done.stdout


def test_report_from_the_daemon_and_from_its_export(graded: Daemon, tmp_path: Path) -> None:
    page = tmp_path / "daemon.html"
    summary = graded.client_json("report", "--html", str(page))
    assert summary["results"] == 28 and summary["checkpoint_size"] == graded.ledger_size()
    text = page.read_text()
    assert text.count("<svg") == 2 and "smoke/lrucache" in text
    assert "The daemon's meter now" in text
    assert f"<th>size</th><td>{summary['checkpoint_size']}</td>" in text

    export = tmp_path / "ledger.jsonl"
    graded.client_json("export", "--out", str(export))
    offline = tmp_path / "export.html"
    again = graded.client_json("report", "--html", str(offline), "--from-export", str(export))
    assert again["results"] == 28 and again["checkpoint_size"] == summary["checkpoint_size"]
    # The same rows, whether the daemon or the export computed them.
    table = text[text.index("<h2>Frontier") : text.index("<h2>Best of k")]
    assert table == (o := offline.read_text())[o.index("<h2>Frontier") : o.index("<h2>Best of k")]


@needs_chromium
def test_chromium_renders_the_daemon_report(graded: Daemon, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    graded.client_json("report", "--html", str(page))
    png = tmp_path / "report.png"
    assert screenshot(page, png, tmp_path / "profile") == []
    assert busy_pixels(png) > 50_000
