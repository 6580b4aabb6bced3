"""`jb-client swebench` against a real daemon, on fake instances built as real git repos."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_swebench import GIT, make_instance

from .conftest import Daemon


@pytest.fixture
def instances(tmp_path: Path) -> tuple[Path, Path, Path]:
    if GIT is None:
        pytest.skip("git is not installed")
    root = tmp_path / "checkouts"
    fixed = make_instance(root, "acme__calc-1")
    gamed = make_instance(root, "acme__calc-2")
    dataset = tmp_path / "verified.jsonl"
    dataset.write_text(json.dumps(fixed) + "\n" + json.dumps(gamed) + "\n")
    predictions = tmp_path / "preds.jsonl"
    cheat = gamed["test_patch"].replace("assert add(2, 3) == 5", "assert True")
    predictions.write_text(
        json.dumps(
            {
                "instance_id": "acme__calc-1",
                "model_name_or_path": "gold",
                "model_patch": fixed["patch"],
            }
        )
        + "\n"
        + json.dumps(
            {"instance_id": "acme__calc-2", "model_name_or_path": "gold", "model_patch": cheat}
        )
        + "\n"
    )
    return dataset, predictions, root


def test_predictions_are_graded_and_signed(daemon: Daemon, instances: tuple) -> None:
    dataset, predictions, root = instances
    report = daemon.client_json(
        "swebench",
        "--dataset",
        str(dataset),
        "--predictions",
        str(predictions),
        "--checkout-root",
        str(root),
    )
    by_task = {r["task_id"]: r for r in report["receipts"]}
    assert by_task["swebench-verified/acme__calc-1"]["status"] == "resolved"
    assert by_task["swebench-verified/acme__calc-2"]["status"] == "unresolved"
    assert report["resolved"] == 1 and report["total"] == 2
    tasks = daemon.client_json("tasks", "--suite", "swebench-verified")["tasks"]
    assert {t["kind"] for t in tasks} == {"swebench"}
    # Registering again is idempotent.
    again = daemon.client_json(
        "swebench",
        "--dataset",
        str(dataset),
        "--predictions",
        str(predictions),
        "--checkout-root",
        str(root),
        "--run-id",
        report["run_id"],
    )
    assert [r["seq"] for r in again["receipts"]] == [r["seq"] for r in report["receipts"]]


def test_a_missing_checkout_root_is_a_usage_error(
    daemon: Daemon, instances: tuple, tmp_path: Path
) -> None:
    dataset, predictions, _ = instances
    done = daemon.client(
        "swebench",
        "--dataset",
        str(dataset),
        "--predictions",
        str(predictions),
        "--checkout-root",
        str(tmp_path / "nowhere"),
    )
    assert done.returncode == 2
    assert "is not a directory on the daemon's host" in done.stderr
