"""`jb-client compare` against a real daemon's ledger, and offline from its export."""

from __future__ import annotations

from pathlib import Path

from .conftest import Daemon
from .test_daemon import SMOKE


def test_compare_reference_with_noop_on_the_smoke_suite(daemon: Daemon, tmp_path: Path) -> None:
    daemon.client_json("run", "--suite", "smoke", "--solvers", "reference,noop")
    doc = daemon.client_json("compare", "reference", "noop", "--suite", "smoke")
    assert doc["paired_on"] == "task_digest"
    assert doc["paired_tasks"] == len(SMOKE)
    res = doc["resolution"]
    assert (res["a_rate"], res["b_rate"]) == (1.0, 0.0)
    assert res["first_rollout"]["a_only"] == len(SMOKE)
    assert res["p_value"] == 2 / 2 ** len(SMOKE)
    # Seven tasks rank nothing, however one-sided they are.
    assert not doc["enough_pairs"] and not doc["conclusive"]
    assert res["verdict"].startswith("too few paired tasks")
    assert len(doc["disagreements"]) == len(SMOKE)
    assert doc["joules"]["sources_a"] == ["estimator"]

    export = tmp_path / "ledger.jsonl"
    assert daemon.client("export", "--out", str(export)).returncode == 0
    offline = daemon.client_json(
        "compare", "reference", "noop", "--suite", "smoke", "--from-export", str(export)
    )
    assert offline == doc  # the same function over the same results, seeded alike

    table = daemon.client("compare", "reference", "noop", "--suite", "smoke")
    assert table.returncode == 0, table.stderr
    assert "too few paired tasks" in table.stdout
    assert "McNemar" in table.stdout

    unknown = daemon.client("compare", "reference", "nobody")
    assert unknown.returncode == 2
    assert "no counted attempts by 'nobody'" in unknown.stderr
