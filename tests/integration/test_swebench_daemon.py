"""`jb-client swebench` against a real daemon, on fake instances built as real git repos."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jb_client.api import Client

from jouled.errors import JouledError, Kind
from tests.test_swebench import GIT, make_instance

from .conftest import Daemon, start_daemon

BARE_FLASK = "pallets__flask-90012"


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


@pytest.fixture
def daemon(instances: tuple, tmp_path: Path) -> Iterator[Daemon]:
    d = start_daemon(tmp_path / "data", "--checkout-root", str(instances[2]))
    yield d
    assert d.stop() == 0, d.log.read_text()


def test_predictions_are_graded_and_signed(daemon: Daemon, instances: tuple) -> None:
    dataset, predictions, root = instances
    report = daemon.client_json(
        "swebench", "--dataset", str(dataset), "--predictions", str(predictions)
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
        "--run-id",
        report["run_id"],
    )
    assert [r["seq"] for r in again["receipts"]] == [r["seq"] for r in report["receipts"]]
    # Registrations survive a restart: the tasks are back without registering again.
    assert daemon.stop() == 0
    restarted = start_daemon(daemon.data_dir, "--checkout-root", str(root))
    try:
        tasks = restarted.client_json("tasks", "--suite", "swebench-verified")["tasks"]
        assert {t["task_id"] for t in tasks} == set(by_task)
    finally:
        assert restarted.stop() == 0


def test_without_a_checkout_root_registration_is_refused(tmp_path: Path, instances: tuple) -> None:
    dataset, predictions, _ = instances
    d = start_daemon(tmp_path / "bare")
    try:
        done = d.client("swebench", "--dataset", str(dataset), "--predictions", str(predictions))
        assert done.returncode == 2
        assert "no checkout root" in done.stderr and "--checkout-root" in done.stderr
    finally:
        assert d.stop() == 0


def test_a_checkout_that_links_out_of_the_root_is_skipped(
    daemon: Daemon, instances: tuple, tmp_path: Path
) -> None:
    """A record names an instance; a link to the data dir is no way to read the key."""
    dataset, _, root = instances
    record = json.loads(dataset.read_text().splitlines()[0])
    record["instance_id"] = "acme__calc-99"
    (root / "acme__calc-99").symlink_to(daemon.data_dir)
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(record) + "\n")
    preds = tmp_path / "p.jsonl"
    preds.write_text(
        json.dumps({"instance_id": "acme__calc-99", "model_name_or_path": "m", "model_patch": ""})
        + "\n"
    )
    report = daemon.client_json("swebench", "--dataset", str(one), "--predictions", str(preds))
    assert report["receipts"] == []
    assert "outside the checkout root" in report["skipped"][0]["reason"]
    assert (
        daemon.client(
            "fetch", "--task", "swebench-verified/acme__calc-99", "--out", str(tmp_path / "x")
        ).returncode
        == 2
    )


def test_malformed_predictions_are_reported_and_skipped_and_empty_ones_signed_unresolved(
    tmp_path: Path,
) -> None:
    if GIT is None:
        pytest.skip("git is not installed")
    root = tmp_path / "checkouts"
    ids = ["acme__calc-1", "acme__calc-2", "acme__calc-3", "acme__calc-4"]
    rows = [make_instance(root, i) for i in ids]
    dataset = tmp_path / "verified.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def pred(instance_id: str, patch: str | None) -> str:
        return json.dumps(
            {"instance_id": instance_id, "model_name_or_path": "m1", "model_patch": patch}
        )

    missing_file = "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n"
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(
        "\n".join(
            [
                pred("acme__calc-1", rows[0]["patch"]),  # graded: resolved
                pred("acme__calc-2", None),  # empty: signed unresolved
                pred("acme__calc-3", "this is not a diff\n"),  # does not parse
                pred("acme__calc-4", missing_file),  # parses, does not apply
                '{"instance_id": "acme__calc-5", "model_patch": ""}',  # no model name
                "{not json",
            ]
        )
        + "\n"
    )
    d = start_daemon(tmp_path / "data", "--checkout-root", str(root))
    try:
        done = d.client(
            "swebench", "--dataset", str(dataset), "--predictions", str(predictions), "--json"
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        by_task = {r["task_id"].split("/")[1]: r for r in report["receipts"]}
        assert set(by_task) == {"acme__calc-1", "acme__calc-2"}
        assert by_task["acme__calc-1"]["status"] == "resolved"
        assert by_task["acme__calc-2"]["status"] == "unresolved"
        assert report["empty_patch"] == ["swebench-verified/acme__calc-2"]
        reasons = {m["instance_id"]: m["reason"] for m in report["malformed"]}
        assert len(report["malformed"]) == 4, report["malformed"]
        assert "acme__calc-3" in reasons and "acme__calc-4" in reasons
        assert "nope.py" in reasons["acme__calc-4"]
        assert any("model_name_or_path" in m["reason"] for m in report["malformed"])
        assert any("not valid JSON" in m["reason"] for m in report["malformed"])
        assert "malformed prediction skipped" in done.stderr and "Traceback" not in done.stderr
        # The empty prediction's result is signed like any other.
        export = tmp_path / "ledger.jsonl"
        assert d.client("export", "--out", str(export)).returncode == 0
        verified = d.client("verify", str(export), "--pubkey", str(d.pubkey))
        assert verified.returncode == 0, verified.stderr
        seqs = {json.loads(line)["seq"] for line in export.read_text().splitlines()}
        assert by_task["acme__calc-2"]["seq"] in seqs
    finally:
        assert d.stop() == 0, d.log.read_text()


def _jouled(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "jouled", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_every_prediction_is_reported_graded_or_why_not(tmp_path: Path) -> None:
    """A real Flask instance in its prepared environment, the same instance in one that
    lacks its test framework, a fake one under the daemon's interpreter, a Django record
    with no environment and a prediction with no record: two graded, three not, and all
    five in the report and its denominator. The gold patch in the broken environment is
    never signed; once that environment is repaired in place, it resolves."""
    from tests import swebench_real as real

    root, envs = tmp_path / "checkouts", tmp_path / "envs"
    root.mkdir()
    flask, _ = real.flask_instance(root)
    real.prepare_env([flask], root, envs)
    # The same release in an environment with neither pytest nor Flask's dependencies, as
    # a tox environment that starts the base interpreter ("No module named pytest").
    shutil.copytree(root / real.FLASK_ID, root / BARE_FLASK, symlinks=True)
    bare_flask = {**flask, "instance_id": BARE_FLASK}
    bare = envs / BARE_FLASK / "venv"  # where `prepare --per-instance` builds its own
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    _jouled("swebench", "adopt", str(envs / BARE_FLASK), "--python", str(bare / "bin/python"))
    fake = make_instance(root, "acme__calc-1")
    django = {
        **make_instance(root, "django__django-1"),
        "repo": "django/django",
        "version": "5.0",
        "FAIL_TO_PASS": ["test_add (calc.tests.OpsTests.test_add)"],
        "PASS_TO_PASS": [],
    }
    dataset = tmp_path / "verified.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in (flask, bare_flask, fake, django)))
    predictions = tmp_path / "preds.jsonl"
    rows = [(r["instance_id"], r["patch"]) for r in (flask, bare_flask, fake, django)]
    rows.append(("nobody__none-1", fake["patch"]))
    predictions.write_text(
        "".join(
            json.dumps({"instance_id": i, "model_name_or_path": "gold", "model_patch": p}) + "\n"
            for i, p in rows
        )
    )
    d = start_daemon(tmp_path / "data", "--checkout-root", str(root), "--swebench-envs", str(envs))
    try:
        report = d.client_json(
            "swebench", "--dataset", str(dataset), "--predictions", str(predictions)
        )
        by_id = {i["instance_id"]: i for i in report["instances"]}
        assert report["predictions"] == 5 and report["not_graded"] == 3
        assert report["resolved"] == 2 and report["total"] == 2
        assert by_id[real.FLASK_ID]["graded"] and by_id[real.FLASK_ID]["status"] == "resolved"
        assert by_id[real.FLASK_ID]["official"] == "RESOLVED_FULL"
        assert by_id[real.FLASK_ID]["strict_agrees"] is True
        assert by_id["acme__calc-1"]["status"] == "resolved"
        assert by_id["acme__calc-1"]["official"] is None  # graded strictly: no official spec
        assert by_id["django__django-1"]["code"] == "no-environment"
        assert not by_id["django__django-1"]["graded"] and not by_id["django__django-1"]["resolved"]
        assert by_id["nobody__none-1"]["code"] == "not-in-dataset"
        broken = by_id[BARE_FLASK]
        assert not broken["graded"] and broken["code"] == "broken-environment", broken
        assert "No module named" in broken["reason"] and "pytest" in broken["reason"]
        assert report["not_graded_by_reason"] == {
            "broken-environment": 1,
            "no-environment": 1,
            "not-in-dataset": 1,
        }
        assert not any(BARE_FLASK in r["task_id"] for r in report["receipts"])
        receipt = next(r for r in report["receipts"] if real.FLASK_ID in r["task_id"])
        assert receipt["verdict"]["rules"].startswith("swebench 4.1.0")
        # The table says the same to a person, and the total counts every prediction.
        done = d.client("swebench", "--dataset", str(dataset), "--predictions", str(predictions))
        assert done.returncode == 0, done.stderr
        assert "no-environment" in done.stdout and "resolved 2/5 predictions" in done.stdout
        assert "broken-environment" in done.stdout
        results = _bodies(_ledger(d, tmp_path), "result")
        assert not any(r["task_id"].endswith(BARE_FLASK) for r in results)
        # Repaired in place (the same interpreter path, so the same task): graded at once.
        real.prepare_env([bare_flask], root, envs, "--per-instance", "--force")
        one = tmp_path / "one.jsonl"
        one.write_text(json.dumps(bare_flask) + "\n")
        again = d.client_json("swebench", "--dataset", str(one), "--predictions", str(predictions))
        assert by_id[BARE_FLASK]["status"] is None
        repaired = {i["instance_id"]: i for i in again["instances"]}[BARE_FLASK]
        assert repaired["status"] == "resolved", repaired
        assert repaired["official"] == "RESOLVED_FULL"
    finally:
        assert d.stop() == 0, d.log.read_text()


def _ledger(d: Daemon, tmp_path: Path) -> list[dict]:
    export = tmp_path / "ledger-export.jsonl"
    done = d.client("export", "--out", str(export))
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in export.read_text().splitlines()]


def _bodies(entries: list[dict], kind: str) -> list[dict]:
    import base64

    out = []
    for e in entries:
        payload = json.loads(base64.b64decode(e["payload"]))
        if payload["kind"] == kind:
            out.append(payload["body"])
    return out


def test_a_pass_to_pass_test_failing_before_the_patch_is_never_signed(tmp_path: Path) -> None:
    """The attack on the verdict: an environment that lacks what a PASS_TO_PASS test needs
    (here a system tool, as Sphinx needs graphviz) fails every attempt, gold included. The
    daemon ran the baseline (its log shows the test failing), signs nothing for the
    attempts, reports them `broken-environment` with the evidence, and keeps grading."""
    if GIT is None:
        pytest.skip("git is not installed")
    from tests.test_swebench import HOST_TOOL_ID

    root = tmp_path / "checkouts"
    broken = make_instance(root, "acme__calc-7", variant="host_tool")
    healthy = make_instance(root, "acme__calc-8")
    dataset = tmp_path / "verified.jsonl"
    dataset.write_text(json.dumps(broken) + "\n" + json.dumps(healthy) + "\n")
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(
        "".join(
            json.dumps(
                {"instance_id": r["instance_id"], "model_name_or_path": "gold", "model_patch": p}
            )
            + "\n"
            for r, p in ((broken, broken["patch"]), (healthy, healthy["patch"]))
        )
    )
    d = start_daemon(tmp_path / "data", "--checkout-root", str(root))
    try:
        report = d.client_json(
            "swebench", "--dataset", str(dataset), "--predictions", str(predictions)
        )
        by_id = {i["instance_id"]: i for i in report["instances"]}
        row = by_id["acme__calc-7"]
        assert not row["graded"] and row["status"] is None and not row["resolved"], row
        assert row["code"] == "broken-environment", row
        assert "PASS_TO_PASS tests fail before the patch" in row["reason"]
        assert HOST_TOOL_ID in row["reason"]
        assert "jb-render-tool is not installed" in row["reason"], row["reason"]
        assert report["not_graded_by_reason"] == {"broken-environment": 1}
        assert by_id["acme__calc-8"]["status"] == "resolved"  # the daemon kept grading
        # The empty prediction (the daemon's pristine tree) is refused the same way.
        with Client(d.target, timeout_s=600) as client:
            with pytest.raises(JouledError) as refused:
                client.submit("swebench-verified/acme__calc-7", b"", solver="empty")
            assert refused.value.code == "broken-environment"
            assert refused.value.kind == Kind.FAILED_PRECONDITION
        entries = _ledger(d, tmp_path)
        results = _bodies(entries, "result")
        assert [r["task_id"] for r in results] == ["swebench-verified/acme__calc-8"]
        baselines = [
            b for b in _bodies(entries, "baseline") if b["task_id"].endswith("acme__calc-7")
        ]
        # Run anew for each attempt (an environment repaired in place is picked up), each
        # recorded with its evidence.
        assert len(baselines) == 2, baselines
        assert all(b["code"] == "broken-environment" and not b["valid"] for b in baselines)
        assert all("jb-render-tool" in b["evidence"] for b in baselines)
        # The table says it to a person.
        done = d.client("swebench", "--dataset", str(dataset), "--predictions", str(predictions))
        assert done.returncode == 0, done.stderr
        assert "broken-environment" in done.stdout
    finally:
        assert d.stop() == 0, d.log.read_text()
