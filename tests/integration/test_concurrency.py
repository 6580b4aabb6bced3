"""Many concurrent sandboxed attempts: none fails to start, no correct fix is lost."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from jb_client.api import Client

from jouled.contracts.task import load_task

from .conftest import TASKS, Daemon, start_daemon

# A launch race shows in well under 1 % of runs; 200 in a row makes one likely
# to show (`make test-slow`); `make test` runs 40, four times the workers' slots.
STRESS = int(os.environ.get("JB_CONCURRENT_ATTEMPTS", "200"))
CALLERS = 16


def reference_patch(task: Path) -> bytes:
    patch = load_task(task).reference_patch
    assert patch is not None
    return patch


@pytest.fixture
def busy_daemon(tmp_path: Path) -> Iterator[Daemon]:
    # Shared attribution: graded runs overlap (four at once), as a launch race needs.
    d = start_daemon(tmp_path / "data", "--attribution", "shared", "--workers", "4")
    yield d
    assert d.stop() == 0, d.log.read_text()


@pytest.mark.parametrize("attempts", [40, pytest.param(STRESS, marks=pytest.mark.slow)])
def test_concurrent_attempts_all_start_and_every_correct_fix_resolves(
    busy_daemon: Daemon, attempts: int
) -> None:
    daemon = busy_daemon
    fixes = {
        "smoke/interval": reference_patch(TASKS / "smoke" / "interval"),
        "smoke/semver": reference_patch(TASKS / "smoke" / "semver"),
    }
    names = sorted(fixes)

    def one(i: int) -> dict[str, Any]:
        task = names[i % len(names)]
        with Client(daemon.target) as client:
            return client.submit(
                task, fixes[task], solver="concurrency", run_id="c", rollout=i
            ).to_dict()

    with ThreadPoolExecutor(CALLERS) as pool:
        receipts = list(pool.map(one, range(attempts)))
    statuses = Counter(r["status"] for r in receipts)
    assert statuses == {"resolved": attempts}, statuses
    assert all(r["entry"] for r in receipts)
    assert len({r["seq"] for r in receipts}) == attempts
