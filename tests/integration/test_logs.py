"""Captured output against a real daemon: signed hashes, a tampered blob, long id lists."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Daemon, start_daemon
from .test_daemon import make_patch
from .test_statuses import write_task

MANY = 60  # more failing tests than a body lists inline
MANY_TESTS = f"""
import pytest
from pkg.mod import double

@pytest.mark.parametrize("i", range({MANY}))
def test_many(i):
    assert double(i) == 2 * i, "LOGS-MARKER"
"""


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tasks")
    write_task(root, "plain")
    write_task(root, "many", tests=MANY_TESTS, timeout_s=30)
    return root


@pytest.fixture(scope="module")
def local(tasks: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("logs") / "data", tasks=tasks)
    yield d
    assert d.stop() == 0, d.log.read_text()


def body_of(receipt: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(base64.b64decode(receipt["entry"]["payload"]))["body"])


def unfixed(tmp_path: Path, task: Path) -> Path:
    return make_patch(tmp_path, task, {"pkg/extra.py": "X = 1\n"})


def test_a_failing_attempt_keeps_every_run_under_its_signed_hash(
    local: Daemon, tasks: Path, tmp_path: Path
) -> None:
    patch = unfixed(tmp_path, tasks / "local" / "plain")
    receipt = local.client_json("submit", "--task", "local/plain", "--patch", str(patch))
    assert receipt["status"] == "unresolved"
    body = body_of(receipt)
    # The first attempt paid for the baseline: its runs are signed with the graded one.
    assert set(body["logs"]) == {"baseline", "reference", "grade"}
    assert body["tests_failed"] == ["tests/test_mod.py::test_double"]
    assert "tests_failed_all" not in body
    logs = local.client_json("logs", "--seq", str(receipt["seq"]))
    assert logs["tests_failed"]["ids"] == ["tests/test_mod.py::test_double"]
    for phase, signed in body["logs"].items():
        run = logs["runs"][phase]
        assert run["status"] == signed["status"] == "complete", phase
        assert hashlib.sha256(run["text"].encode()).hexdigest() == signed["sha256"]
        assert run["kept_bytes"] == len(run["text"].encode()) and run["dropped_bytes"] == 0
        stored = local.data_dir / "logs" / signed["sha256"]
        assert stored.stat().st_mode & 0o777 == 0o600
    assert body["logs"]["grade"]["exit_code"] not in (0, None)
    assert body["output"]["sha256"] == body["logs"]["grade"]["sha256"]  # kept for old readers
    assert "test_double" in logs["runs"]["grade"]["text"]


def test_a_changed_blob_is_reported_missing_not_served(
    local: Daemon, tasks: Path, tmp_path: Path
) -> None:
    patch = make_patch(
        tmp_path, tasks / "local" / "plain", {"pkg/mod.py": "def double(x):\n    return 3\n"}
    )
    receipt = local.client_json("submit", "--task", "local/plain", "--patch", str(patch))
    signed = body_of(receipt)["logs"]["grade"]
    assert set(body_of(receipt)["logs"]) == {"grade"}  # the baseline was paid for already
    blob = local.data_dir / "logs" / signed["sha256"]
    os.chmod(blob, 0o600)
    blob.write_text("all tests passed\n")
    logs = local.client_json("logs", "--seq", str(receipt["seq"]))
    run = logs["runs"]["grade"]
    assert run["status"] == "missing" and run["text"] == ""
    assert run["signed_status"] == "complete" and run["sha256"] == signed["sha256"]
    again = local.client_json("receipt", "--seq", str(receipt["seq"]))
    assert again["output_tail"] == ""
    blob.unlink()
    assert local.client_json("logs", "--seq", str(receipt["seq"]))["runs"]["grade"]["status"] == (
        "missing"
    )
    shown = local.client("logs", "--seq", str(receipt["seq"]))
    assert shown.returncode == 0, shown.stderr
    assert "grade: missing" in shown.stdout


def test_submit_prints_the_failing_ids_and_the_output_tail(
    local: Daemon, tasks: Path, tmp_path: Path
) -> None:
    patch = unfixed(tmp_path, tasks / "local" / "plain")
    done = local.client("submit", "--task", "local/plain", "--patch", str(patch))
    assert done.returncode == 0, done.stderr
    assert "unresolved" in done.stdout
    assert "failed (1):" in done.stdout
    assert "tests/test_mod.py::test_double" in done.stdout
    assert "output (last" in done.stdout
    seq = re.search(r"seq (\d+)", done.stdout)
    assert seq is not None
    tail = local.client_json("receipt", "--seq", seq.group(1))["output_tail"]
    last = tail.rstrip("\n").splitlines()[-1]
    assert last in done.stdout


def test_a_long_failing_id_list_is_signed_by_hash_and_served_whole(
    local: Daemon, tasks: Path, tmp_path: Path
) -> None:
    patch = unfixed(tmp_path, tasks / "local" / "many")
    receipt = local.client_json("submit", "--task", "local/many", "--patch", str(patch))
    assert receipt["status"] == "unresolved"
    body = body_of(receipt)
    assert len(body["tests_failed"]) == 50
    signed = body["tests_failed_all"]
    assert signed["count"] == MANY
    logs = local.client_json("logs", "--seq", str(receipt["seq"]))
    ids = logs["tests_failed"]["ids"]
    assert len(ids) == MANY and logs["tests_failed"]["status"] == "complete"
    assert ids[:50] == body["tests_failed"]
    assert hashlib.sha256("".join(f"{i}\n" for i in ids).encode()).hexdigest() == signed["sha256"]
    assert "tests/test_mod.py::test_many[59]" in ids
    shown = local.client("submit", "--task", "local/many", "--patch", str(patch))
    assert f"failed ({MANY}):" in shown.stdout and "more (jb-client logs --seq" in shown.stdout


def test_logs_of_an_entry_that_is_not_a_result_is_not_found(local: Daemon) -> None:
    done = local.client("logs", "--seq", "0")
    assert done.returncode != 0
    assert "not a result" in done.stderr or "does not exist" in done.stderr
