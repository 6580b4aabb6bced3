"""Many concurrent sandboxed attempts: none fails to start, no correct fix is lost."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from jb_client.api import Client

from jouled.patch import diff_trees
from tests.integration.conftest import TASKS, Daemon

# The issue this guards against was a launch race seen in well under 1 % of
# runs; 200 in a row makes one failure likely to show.
ATTEMPTS = int(os.environ.get("JB_CONCURRENT_ATTEMPTS", "200"))
CALLERS = 16


def reference_patch(task: Path) -> bytes:
    # reference/ holds only the fixed files, overlaid on before/ (as the reference solver does).
    with tempfile.TemporaryDirectory() as tmp:
        fixed = Path(tmp) / "fixed"
        shutil.copytree(task / "before", fixed)
        shutil.copytree(task / "reference", fixed, dirs_exist_ok=True)
        return diff_trees(task / "before", fixed)


def test_concurrent_attempts_all_start_and_every_correct_fix_resolves(daemon: Daemon) -> None:
    fixes = {
        "smoke/interval": reference_patch(TASKS / "smoke" / "interval"),
        "smoke/semver": reference_patch(TASKS / "smoke" / "semver"),
    }
    names = sorted(fixes)

    def one(i: int) -> dict[str, Any]:
        task = names[i % len(names)]
        with Client(daemon.target) as client:
            return client.submit(task, fixes[task], solver="concurrency", run_id="c", rollout=i)

    with ThreadPoolExecutor(CALLERS) as pool:
        receipts = list(pool.map(one, range(ATTEMPTS)))
    statuses = Counter(r["status"] for r in receipts)
    assert statuses == {"resolved": ATTEMPTS}, statuses
    assert all(r["entry"] for r in receipts)
    assert len({r["seq"] for r in receipts}) == ATTEMPTS
