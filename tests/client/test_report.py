"""The HTML report: self-contained, escaped, and readable in a real browser."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from jb_client import report

from tests.client.chromium import busy_pixels, needs_chromium, screenshot
from tests.client.ledger import HOSTILE, hostile_ledger, write_export

NOTE = (
    "jouled/h1/56475aa7\n14\niefnoMM8TvrJG9pCHRg6UzNsZ3cJOio/IwBGBfx41M4=\n\n"
    "— jouled/h1/56475aa7 WmzkMPyOT82Xz6z2pF07E4gRTnWyA6P/94mv5bEC6PY8IIqzpTF=\n"
)


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return write_export(tmp_path / "ledger.jsonl", hostile_ledger(), NOTE)


def page_for(export: Path) -> str:
    return report.render_html(report.from_export(export))


def test_page_is_self_contained(export: Path) -> None:
    page = page_for(export)
    assert page.startswith("<!DOCTYPE html>")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert page.count("<svg") == 2
    lowered = page.replace(html.escape(HOSTILE, quote=True), "").lower()
    for needle in ("<script", "<link", "<img", "<iframe", "@import", "src=", "url(http"):
        assert needle not in lowered, needle
    # The only absolute URLs are the SVG namespaces, which nothing fetches.
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


def test_every_hostile_string_is_escaped(export: Path) -> None:
    page = page_for(export)
    assert HOSTILE not in page
    assert html.escape(HOSTILE, quote=True) in page
    assert "<img" not in page and "<script" not in page


def test_page_shows_statuses_audit_flags_energy_per_op_and_calibration(export: Path) -> None:
    page = page_for(export)
    assert '<span class="status bad">tampered</span>' in page
    assert "conftest" in page  # the audit flag's code
    assert "seed J" in page and "grade J" in page and "total J" in page
    assert "~0.0" in page  # an unreliable seed window
    assert "Calibration in force: ledger entry 1" in page and "4.100 W" in page
    assert "iefnoMM8TvrJG9pCHRg6UzNsZ3cJOio" in page and "<th>size</th><td>14</td>" in page
    assert "jb-client verify ledger.jsonl --pubkey jouled.pub" in page


def test_suite_filter(tmp_path: Path) -> None:
    docs = hostile_ledger()
    docs[1]["body"]["task_id"] = "other/x"
    docs[1]["body"]["suite"] = "other"
    data = report.from_export(write_export(tmp_path / "e.jsonl", docs), suite="other")
    assert [e.body["task_id"] for e in data.results] == ["other/x"]
    assert {r.suite for r in data.frontier} == {"other"}
    assert data.checkpoint is None


def test_cli_report_from_export(export: Path, tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jb_client",
            "report",
            "--html",
            str(out),
            "--from-export",
            str(export),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["results"] == 12 and summary["checkpoint_size"] == 14
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_cli_report_refuses_a_file_that_is_not_an_export(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jb_client",
            "report",
            "--html",
            str(tmp_path / "p.html"),
            "--from-export",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "not an export line" in done.stderr
    assert "Traceback" not in done.stderr


@needs_chromium
def test_chromium_renders_the_page_without_console_errors(export: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(page_for(export), encoding="utf-8")
    png = tmp_path / "report.png"
    console = screenshot(page, png, tmp_path / "profile")
    assert console == []
    assert png.stat().st_size > 20_000
    assert busy_pixels(png) > 50_000  # text, tables and figures, not a blank page


@needs_chromium
def test_chromium_console_check_would_see_an_injection(tmp_path: Path) -> None:
    # The control: were a name not escaped, the page's own CSP refusal would be logged.
    data = report.from_export(write_export(tmp_path / "e.jsonl", hostile_ledger()))
    page = report.render_html(data).replace(html.escape(HOSTILE, quote=True), HOSTILE, 1)
    path = tmp_path / "broken.html"
    path.write_text(page, encoding="utf-8")
    console = screenshot(path, tmp_path / "broken.png", tmp_path / "profile")
    assert any("Content Security Policy" in line for line in console), console


def test_a_missing_export_or_a_broken_history_is_a_usage_error(
    export: Path, tmp_path: Path
) -> None:
    def run(path: Path) -> subprocess.CompletedProcess[str]:
        argv = ["report", "--html", str(tmp_path / "p.html"), "--from-export", str(path)]
        return subprocess.run(
            [sys.executable, "-m", "jb_client", *argv], capture_output=True, text=True, timeout=120
        )

    done = run(tmp_path / "nosuch.jsonl")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "No such file or directory" in done.stderr and "[Errno" not in done.stderr
    assert "jb-client export" in done.stderr  # the hint
    history = export.parent / (export.name + ".checkpoints.jsonl")
    history.write_text("{x\n")
    done = run(export)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "is not a checkpoint history" in done.stderr, done.stderr
