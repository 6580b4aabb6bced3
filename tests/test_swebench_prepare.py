"""`jouled swebench prepare` and `adopt`, where they refuse and what they write.

Building real environments is exercised by tests/test_swebench_official.py; these
check the cases that need neither the network nor the fetched releases.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from jouled.contracts import swebench_env
from jouled.contracts.swebench import SweBenchRecord, to_contract
from jouled.errors import TaskError
from jouled.swebench_prepare import adopt, prepare
from tests.test_swebench import GIT, INSTANCE, make_instance


@pytest.fixture
def record(tmp_path: Path) -> tuple[SweBenchRecord, Path]:
    if GIT is None:
        pytest.skip("git is not installed")
    root = tmp_path / "checkouts"
    raw = make_instance(root) | {"repo": "pallets/flask", "version": "2.0"}
    return SweBenchRecord.from_dict(raw, "test"), root


def test_an_instance_without_a_specification_or_its_python_is_not_prepared(
    record: tuple[SweBenchRecord, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec, root = record
    envs = tmp_path / "envs"
    unknown = prepare(dataclasses.replace(rec, version="0.0"), root, envs)
    assert not unknown.ok and "no official spec" in unknown.message
    monkeypatch.setenv("PATH", "/nonexistent")  # flask 2.0 wants python3.9
    missing = prepare(rec, root, envs)
    assert not missing.ok and "needs Python 3.9" in missing.message
    nowhere = prepare(rec, tmp_path / "elsewhere", envs, python=sys.executable)
    assert not nowhere.ok and "no checkout" in nowhere.message
    assert not envs.exists()  # nothing half-built is left to be found


def test_an_adopted_environment_is_found_and_runs_the_tests(
    record: tuple[SweBenchRecord, Path], tmp_path: Path
) -> None:
    rec, root = record
    envs = tmp_path / "envs"
    manifest = adopt(envs / "pallets__flask__2.0", sys.executable)
    assert manifest.how == "adopted" and manifest.python == sys.executable
    saved = json.loads((envs / "pallets__flask__2.0" / swebench_env.MANIFEST).read_text())
    assert saved["testbed"] == "/testbed"
    contract = to_contract(rec, root, environments=envs)
    assert contract.runtime is not None and contract.runtime.name == "pallets__flask__2.0"
    assert contract.runtime.version == f"{sys.version_info[0]}.{sys.version_info[1]}"
    # A per-instance environment wins over the version's.
    adopt(envs / INSTANCE, sys.executable)
    own = to_contract(rec, root, environments=envs).runtime
    assert own is not None and own.name == INSTANCE
    # The environment is part of what the digest covers.
    assert to_contract(rec, root).digest != contract.digest


def test_a_manifest_for_another_tree_path_is_refused(
    record: tuple[SweBenchRecord, Path], tmp_path: Path
) -> None:
    rec, root = record
    envs = tmp_path / "envs"
    adopt(envs / INSTANCE, sys.executable)
    path = envs / INSTANCE / swebench_env.MANIFEST
    path.write_text(json.dumps(json.loads(path.read_text()) | {"testbed": "/work/repo"}))
    with pytest.raises(TaskError, match="expects the tree at /work/repo"):
        to_contract(rec, root, environments=envs)
