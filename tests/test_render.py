"""Human tables: the columns a reader relies on are there and hostile text stays text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jb_client import render
from jb_client.documents import Receipt

from tests.client.ledger import bestofk, frontier, task


@pytest.fixture(autouse=True)
def fresh_consoles() -> Iterator[None]:
    # The consoles bind sys.stdout when first used; capsys swaps it per test.
    render.terminal.cache_clear()
    yield
    render.terminal.cache_clear()


def body(task: str, status: str, audit: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "task_id": task,
        "suite": task.split("/")[0],
        "status": status,
        "resolved": status == "resolved",
        "solver": "agent",
        "model": "",
        "rollout": 0,
        "energy": {"grade": {"gross_mj": 1000, "marginal_mj": 500, "source": "estimator"}},
        "claimed": {},
        "audit": audit or [],
    }


FLAG = {"code": "process-exit", "path": "pkg/a.py", "line": 4, "detail": "os._exit"}


def test_frontier_table_shows_tampered_and_audit_flagged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = frontier(
        [
            body("s/a", "resolved"),
            body("s/b", "tampered", [FLAG]),
            body("s/c", "tampered"),
        ]
    )
    render.frontier_table(rows)
    out = capsys.readouterr().out
    header = out.split("┡")[0]  # the header, whose long names may wrap over two lines
    assert "tampered" in header and "audit" in header and "flagged" in header
    assert "integrity" in header
    row = next(line for line in out.splitlines() if "agent" in line)
    cells = [c.strip() for c in row.split("│") if c.strip()]
    # tampered, audit flagged, integrity (no level recorded: none), op J (no op windows)
    assert cells[-4:] == ["2", "1", "none", "-"]


def test_bestofk_table_shows_tampered(capsys: pytest.CaptureFixture[str]) -> None:
    render.bestofk_table(bestofk([body("s/a", "tampered")]))
    out = capsys.readouterr().out
    assert "tampered" in out
    row = next(line for line in out.splitlines() if "agent" in line)
    assert [c.strip() for c in row.split("│") if c.strip()][-1] == "1"


def receipt(audit: list[dict[str, Any]]) -> Receipt:
    """A receipt document (docs/ledger.md, Receipts) whose entry and proof are placeholders."""
    return Receipt.parse(
        {
            "seq": 7,
            "task_id": "s/a",
            "patch_sha256": "0" * 64,
            "status": "unresolved",
            "resolved": False,
            "tests": {"expected": 2, "passed": 0, "failed": 2, "missing": 0},
            "energy": {},
            "solver": "someone/agent",
            "audit": audit,
            "leaf_hash": "1" * 64,
            "entry": {
                "seq": 7,
                "payload": "",
                "payloadType": "application/vnd.jouled.event.v1+json",
                "signatures": [],
                "leaf_hash": "1" * 64,
            },
            "proof": {
                "seq": 7,
                "leaf_hash": "1" * 64,
                "tree_size": 8,
                "root": "2" * 64,
                "hashes": [],
            },
            "checkpoint": "",
        }
    )


def test_receipt_lists_audit_flags(capsys: pytest.CaptureFixture[str]) -> None:
    render.receipt_line(receipt([FLAG, {**FLAG, "code": "ctypes", "detail": "[red]import[/]"}]))
    out = capsys.readouterr().out
    assert "audit: 2 flag(s)" in out
    assert "process-exit" in out and "pkg/a.py:4" in out and "os._exit" in out
    assert "[red]import[/]" in out  # shown as text, never read as markup


def test_receipt_without_flags_says_nothing_of_audit(capsys: pytest.CaptureFixture[str]) -> None:
    render.receipt_line(receipt([]))
    assert "audit" not in capsys.readouterr().out


def test_truncated_audit_is_marked(capsys: pytest.CaptureFixture[str]) -> None:
    marker = {"code": "truncated", "path": "", "line": 0, "detail": "7 more flags"}
    render.receipt_line(receipt([FLAG] * 3 + [marker]))
    out = capsys.readouterr().out
    assert "audit: 3+ flag(s)" in out
    assert "7 more flags" in out


def test_tasks_table_shows_the_hidden_count(capsys: pytest.CaptureFixture[str]) -> None:
    t = task(
        task_id="s/a", kind="local", digest="ab" * 32, timeout_s=60, prompt="fix it", hidden_files=2
    )
    render.tasks_table([t])
    out = capsys.readouterr().out
    assert "hidden" in out
    row = next(line for line in out.splitlines() if "s/a" in line)
    assert [c.strip() for c in row.split("│") if c.strip()][4] == "2"
