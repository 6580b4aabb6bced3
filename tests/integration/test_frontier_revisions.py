"""A task changed between daemon runs: its revisions are rows of their own, pooled on request.

The daemon serves `--merge-digests` as the offline computation does, from the same
function over the same results.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .conftest import TASKS, start_daemon
from .test_daemon import make_patch, submit


def test_a_changed_task_is_a_new_row_unless_merged_served_as_offline(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    task = tasks / "smoke" / "lrucache"
    shutil.copytree(TASKS / "smoke" / "lrucache", task)
    data = tmp_path / "data"
    fix = make_patch(tmp_path, task, {}, reference=True)

    first = start_daemon(data, tasks=tasks)
    try:
        assert submit(first, fix, "smoke/lrucache", "--solver", "agent")["status"] == "resolved"
    finally:
        assert first.stop() == 0
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("evicts entries", "drops entries", 1))

    again = start_daemon(data, tasks=tasks)
    try:
        empty = tmp_path / "empty.patch"
        empty.write_bytes(b"")
        assert submit(again, empty, "smoke/lrucache", "--solver", "agent")["status"] == "unresolved"

        split = [r for r in again.client_json("frontier")["rows"] if r["solver"] == "agent"]
        assert sorted(r["revision"] for r in split) == [0, 1]
        assert sorted(r["resolved"] for r in split) == [0, 1]

        served = again.client_json("frontier", "--merge-digests")["rows"]
        (merged,) = [r for r in served if r["solver"] == "agent"]
        assert merged["revision"] is None and merged["merged_digests"] == 1
        assert (merged["attempts"], merged["resolved"]) == (2, 1)

        export = tmp_path / "ledger.jsonl"
        assert again.client("export", "--out", str(export)).returncode == 0
        offline = again.client_json("frontier", "--from-export", str(export), "--merge-digests")
        assert offline["rows"] == served
    finally:
        assert again.stop() == 0
