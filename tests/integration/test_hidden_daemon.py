"""Hidden tests end to end: a real daemon never hands them out and always grades with them."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

from jouled.patch_diff import diff_trees

from .conftest import TASKS, Daemon

TASK = "smoke/slidingwindow"
SLIDING = TASKS / "smoke" / "slidingwindow"
HIDDEN = "tests/test_hidden_windows.py"
SOLVER = "hidden-check"  # its own frontier row, apart from other tests' attempts


def signed_body(receipt: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(base64.b64decode(receipt["entry"]["payload"]))["body"])


def fetch(daemon: Daemon, out: Path) -> dict[str, Any]:
    return dict(daemon.client_json("fetch", "--task", TASK, "--out", str(out)))


def submit_diff(daemon: Daemon, tmp_path: Path, old: Path, new: Path) -> dict[str, Any]:
    patch = tmp_path / "change.patch"
    patch.write_bytes(diff_trees(old, new))
    return dict(
        daemon.client_json("submit", "--task", TASK, "--patch", str(patch), "--solver", SOLVER)
    )


def test_fetch_and_listing_never_reveal_hidden_tests(daemon: Daemon, tmp_path: Path) -> None:
    fetched = fetch(daemon, tmp_path / "work")
    assert HIDDEN not in fetched["files"]
    assert not (tmp_path / "work" / HIDDEN).exists()
    assert "tests/test_windows.py" in fetched["files"]
    assert fetched["task"]["hidden_files"] == 1  # a count, never names or content
    listing = daemon.client("tasks", "--suite", "smoke", "--json")
    assert listing.returncode == 0, listing.stderr
    assert "test_hidden" not in listing.stdout
    by_id = {t["task_id"]: t for t in json.loads(listing.stdout)["tasks"]}
    assert by_id[TASK]["hidden_files"] == 1
    assert by_id["smoke/lrucache"]["hidden_files"] == 0


def test_a_fix_made_from_the_fetched_tree_resolves_against_hidden_tests(
    daemon: Daemon, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    fetch(daemon, work)
    (work / "PROMPT.md").unlink()
    fixed = tmp_path / "fixed"
    shutil.copytree(work, fixed)
    shutil.copytree(SLIDING / "reference", fixed, dirs_exist_ok=True)
    receipt = submit_diff(daemon, tmp_path, work, fixed)
    assert receipt["status"] == "resolved", receipt.get("output_tail")
    body = signed_body(receipt)
    assert body["restored"] == []
    assert body["audit"] == []
    # The expected ids the daemon graded by include the hidden file's tests.
    baseline = next(
        json.loads(base64.b64decode(json.loads(line)["payload"]))["body"]
        for line in export_lines(daemon, tmp_path)
        if is_baseline_of(line, TASK)
    )
    hidden_ids = [t for t in baseline["fail_to_pass"] if t.startswith(HIDDEN + "::")]
    assert len(hidden_ids) >= 3
    expected = len(baseline["fail_to_pass"]) + len(baseline["pass_to_pass"])
    assert receipt["tests"] == {"expected": expected, "passed": expected, "failed": 0, "missing": 0}


def export_lines(daemon: Daemon, tmp_path: Path) -> list[str]:
    out = tmp_path / "ledger.jsonl"
    done = daemon.client("export", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out.read_text().splitlines()


def is_baseline_of(line: str, task_id: str) -> bool:
    payload = json.loads(base64.b64decode(json.loads(line)["payload"]))
    return bool(payload["kind"] == "baseline" and payload["body"]["task_id"] == task_id)


def test_a_file_planted_at_a_hidden_path_is_overwritten(daemon: Daemon, tmp_path: Path) -> None:
    work = tmp_path / "work"
    fetch(daemon, work)
    (work / "PROMPT.md").unlink()
    forged = tmp_path / "forged"
    shutil.copytree(work, forged)
    # No fix: only tests under the hidden file's name that cannot fail.
    names = [
        "test_docstring_step_example",
        "test_single_item_window",
        "test_every_item_is_a_window_of_one",
        "test_moving_average_covers_the_last_window",
        "test_moving_average_of_a_full_window",
    ]
    (forged / HIDDEN).write_text("".join(f"def {n}():\n    pass\n\n\n" for n in names))
    receipt = submit_diff(daemon, tmp_path, work, forged)
    assert receipt["status"] == "unresolved"
    body = signed_body(receipt)
    assert body["restored"] == [HIDDEN]  # replaced by the real file before the run
    failed = set(body["tests_failed"])
    assert {f"{HIDDEN}::{n}" for n in names} <= failed
