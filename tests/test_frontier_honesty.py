"""Rows that never pool two versions of a task, and dollars only where they were claimed."""

from __future__ import annotations

import io
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from jb_client import render
from rich.console import Console

from jouled.best_of_k import best_of_k
from jouled.documents.sent import FrontierRow
from jouled.frontier import Frontier, frontier_rows
from jouled.frontier_attempts import digest_set_id
from jouled.frontier_fleet import HostLedger, fleet_frontier

from .test_frontier import result, window
from .test_frontier_ops import op

OLD, NEW = "ab" * 32, "ef" * 32


def at(digest: str, task: str = "s/a", **kw: Any) -> dict[str, Any]:
    body = result(task, **kw)
    body["task_digest"] = digest
    return body


def half_cent(**kw: Any) -> dict[str, Any]:
    return result("s/a", solver="claimer", claimed={"usd_micros": 5_000}, **kw)


# -- task digests ----------------------------------------------------------------------


def test_two_digests_of_one_task_are_two_rows() -> None:
    results = [
        at(OLD, energy={"grade": window(1000)}),
        at(NEW, status="unresolved", energy={"grade": window(9000)}),
    ]
    old, new = frontier_rows(results)
    assert (old["revision"], new["revision"]) == (0, 1)
    assert (old["attempts"], old["tasks"], old["resolved"]) == (1, 1, 1)
    assert (new["attempts"], new["tasks"], new["resolved"]) == (1, 1, 0)
    assert old["joules_total"] == 1.0 and new["joules_total"] == 9.0
    assert old["digest_set"] == digest_set_id([("s/a", OLD)])
    assert new["digest_set"] == digest_set_id([("s/a", NEW)])
    assert old["merged_digests"] == new["merged_digests"] == 0


def test_revisions_follow_the_order_digests_first_appear() -> None:
    # The task changed to NEW, then other tasks ran at their only digest.
    results = [at(OLD), at(NEW), at(OLD, "s/b"), at(NEW, rollout=1)]
    rows = frontier_rows(results)
    assert [(r["revision"], r["tasks"], r["attempts"]) for r in rows] == [(0, 2, 2), (1, 1, 2)]
    assert rows[0]["digest_set"] == digest_set_id([("s/a", OLD), ("s/b", OLD)])


def test_rows_share_a_digest_set_only_when_they_graded_the_same_versions() -> None:
    rows = frontier_rows(
        [
            at(OLD, solver="x"),
            at(OLD, "s/b", solver="x"),
            at(OLD, "s/b"),
            at(OLD),
            at(OLD, solver="y"),
        ]
    )
    sets = {r["solver"]: r["digest_set"] for r in rows}
    assert sets["x"] == sets["reference"] != sets["y"]


def test_merging_digests_is_explicit_and_said() -> None:
    results = [at(OLD), at(NEW, status="unresolved"), at(OLD, "s/b")]
    (row,) = frontier_rows(results, merge_digests=True)
    assert row["revision"] is None
    assert row["merged_digests"] == 1  # s/a, graded at two digests
    assert (row["attempts"], row["tasks"], row["resolved"]) == (3, 2, 2)
    assert row["digest_set"] == digest_set_id([("s/a", OLD), ("s/a", NEW), ("s/b", OLD)])


def test_a_changed_task_competes_within_its_revision() -> None:
    # On the new digest alone "lucky" resolves everything at a tiny cost; it must not
    # knock the older rows off their own frontier.
    results = [
        at(OLD, solver="a", energy={"grade": window(5000)}),
        at(OLD, "s/b", solver="a", status="unresolved", energy={"grade": window(5000)}),
        at(NEW, solver="lucky", energy={"grade": window(10)}),
    ]
    flags = {(r["solver"], r["revision"]): r["pareto"] for r in frontier_rows(results)}
    assert flags == {("a", 0): True, ("lucky", 1): True}


def test_best_of_k_keeps_revisions_apart() -> None:
    results = [at(OLD, status="unresolved"), at(NEW, rollout=0), at(NEW, rollout=1)]
    rows = best_of_k(results)
    assert [(r["revision"], r["k"], r["resolved_within_k"]) for r in rows] == [
        (0, 1, 0),
        (1, 1, 1),
        (1, 2, 1),
    ]
    assert rows[1]["digest_set"] == digest_set_id([("s/a", NEW)])


def test_fleet_summary_does_not_depend_on_the_order_hosts_are_listed() -> None:
    a = HostLedger("a", [at(OLD, rollout=0)])
    b = HostLedger("b", [at(NEW, rollout=1, status="unresolved")])
    assert fleet_frontier([a, b]) == fleet_frontier([b, a])
    summary = fleet_frontier([b, a])["summary"]
    assert [(r["revision"], r["resolved"]) for r in summary] == [(0, 1), (1, 0)]
    (merged,) = fleet_frontier([a, b], merge_digests=True)["summary"]
    assert merged["merged_digests"] == 1 and merged["hosts"] == ["a", "b"]


# -- claimed dollars -------------------------------------------------------------------


def test_a_solver_that_claims_nothing_is_not_free() -> None:
    results = [result("s/a", solver="silent"), half_cent()]
    rows = {r["solver"]: r for r in frontier_rows(results, axis="usd")}
    silent, claimer = rows["silent"], rows["claimer"]
    assert silent["usd_total"] is None and silent["usd_per_resolved"] is None
    assert silent["usd_claimed_share"] == 0.0
    assert silent["pareto"] is None  # no verdict, not a $0 win
    assert claimer["usd_total"] == 0.005 and claimer["usd_per_resolved"] == 0.005
    assert claimer["usd_claimed_share"] == 1.0
    assert claimer["pareto"] is True


def test_partial_claims_say_their_share_and_get_no_dollar_verdict() -> None:
    results = [
        half_cent(),
        result("s/b", solver="claimer", status="unresolved"),
        result("s/a", solver="full", claimed={"usd_micros": 900_000}),
    ]
    rows = {r["solver"]: r for r in frontier_rows(results, axis="usd")}
    partial = rows["claimer"]
    assert partial["usd_claimed_share"] == 0.5
    assert partial["usd_total"] == 0.005  # the claim made, nothing for the silent attempt
    assert partial["usd_per_resolved"] == 0.005
    assert partial["pareto"] is None
    # Its unknown cost blocks no one: the full claimer stays on the frontier.
    assert rows["full"]["pareto"] is True
    # The other axes judge it as before.
    by_joules = {r["solver"]: r for r in frontier_rows(results, axis="joules")}
    assert isinstance(by_joules["claimer"]["pareto"], bool)


def test_dollars_per_resolved_count_resolved_attempts_that_claimed() -> None:
    results = [
        result("s/a", claimed={"usd_micros": 2_000_000}),
        result("s/b"),  # resolved, silent
        result("s/c", status="unresolved", claimed={"usd_micros": 1_000_000}),
    ]
    row = frontier_rows(results)[0]
    assert row["usd_total"] == 3.0
    assert row["usd_per_resolved"] == 3.0  # one resolved attempt claimed
    assert row["usd_claimed_share"] == 2 / 3


def test_a_row_that_resolved_nothing_is_still_off_the_dollar_frontier() -> None:
    results = [result("s/a", solver="noop", status="unresolved"), half_cent()]
    rows = {r["solver"]: r for r in frontier_rows(results, axis="usd")}
    assert rows["noop"]["pareto"] is False


def test_errors_only_row_has_no_share_and_json_stays_finite() -> None:
    rows = frontier_rows([result("s/a", status="error"), half_cent()], axis="usd")
    (errors,) = [r for r in rows if r["solver"] == "reference"]
    assert errors["usd_claimed_share"] is None and errors["pareto"] is False
    json.dumps(rows, allow_nan=False)


# -- running totals --------------------------------------------------------------------


def mixed_ledger() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(11)
    results = []
    for i in range(120):
        task = f"s/t{rng.randrange(6)}"
        digest = rng.choice([OLD, NEW]) if task == "s/t0" else OLD
        claimed = {"usd_micros": rng.randrange(1, 9_000)} if rng.random() < 0.6 else {}
        body = at(
            digest,
            task,
            solver=rng.choice(["a", "b", "c"]),
            status=rng.choice(["resolved", "unresolved", "error", "timeout"]),
            rollout=i % 3,
            claimed=claimed,
            energy={"grade": window(rng.randrange(1, 5000), wall_ms=rng.randrange(1, 900))},
        )
        body["agent"] = "alice"
        results.append(body)
    ops = [op(rng.randrange(1, 900), task=f"s/t{t}", rollout=t % 3) for t in range(6)]
    return results, ops


def test_running_totals_equal_the_offline_computation() -> None:
    results, ops = mixed_ledger()
    live = Frontier(ops=ops)
    for i, body in enumerate(results):
        live.add(body)
        if i % 17 == 0:
            live.rows(axis="usd")  # reading between results changes nothing
    for axis in ("joules", "usd", "wall"):
        for merge in (False, True):
            offline = frontier_rows(results, axis=axis, ops=ops, merge_digests=merge)
            assert live.rows(axis=axis, merge_digests=merge) == offline
    assert any(r["revision"] == 1 for r in live.rows())
    assert any(r["pareto"] is None for r in live.rows(axis="usd"))


def test_ops_arriving_late_are_counted_once_in_a_merged_row() -> None:
    body = at(OLD)
    body["agent"] = "alice"
    changed = dict(body, task_digest=NEW)  # the same run and rollout, regraded
    live = Frontier([body, changed])
    live.add_op(op(700, task="s/a"))
    (merged,) = live.rows(merge_digests=True)
    assert merged["op_joules"] == 0.7 and merged["op_windows"] == 1


# -- tables ----------------------------------------------------------------------------


def table(rows: list[dict[str, Any]], *, wide: bool) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=260 if wide else 80, color_system=None)
    render.frontier_table([FrontierRow.parse(r) for r in rows], console=console, wide=wide)
    return buf.getvalue()


def test_tables_show_no_verdict_no_dollars_and_the_share() -> None:
    results = [
        result("s/a", solver="silent"),
        half_cent(),
        result("s/b", solver="claimer", status="unresolved"),
    ]
    rows = frontier_rows(results, axis="usd")
    for wide in (True, False):
        text = table(rows, wide=wide)
        lines = {name: line for line in text.splitlines() for name in ("silent", "claimer")
                 if name in line}  # fmt: skip
        assert "?" in lines["silent"] and "0.0000" not in lines["silent"]
        assert "0.0050 (50.0%)" in lines["claimer"]


def test_tables_name_the_revision_when_a_task_changed() -> None:
    rows = frontier_rows([at(OLD), at(NEW)])
    assert "r1" in table(rows, wide=False)
    wide = table(rows, wide=True)
    assert rows[1]["digest_set"] in wide
    assert "merged 1" in table(frontier_rows([at(OLD), at(NEW)], merge_digests=True), wide=True)


def test_the_report_page_shows_no_dollars_for_a_silent_solver() -> None:
    from jb_client import report

    rows = frontier_rows([result("s/a", solver="silent"), half_cent()], axis="usd")
    page = report._frontier_table([FrontierRow.parse(r) for r in rows])
    cells = re.findall(r"<td>([^<]*)</td>", page)
    assert "?" in cells and "0.0050" in cells and "0.0000" not in cells


# -- the command line ------------------------------------------------------------------


def frontier_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jb_client", "frontier", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_merges_digests_offline_on_request(tmp_path: Path) -> None:
    from tests.client.ledger import result as entry
    from tests.client.ledger import write_export

    docs = [entry(1, "s/a", "resolved"), entry(2, "s/a", "unresolved", rollout=1)]
    docs[0]["body"]["task_digest"], docs[1]["body"]["task_digest"] = OLD, NEW
    export = write_export(tmp_path / "ledger.jsonl", docs)
    split = json.loads(frontier_cli("--from-export", str(export), "--json").stdout)["rows"]
    assert [r["revision"] for r in split] == [0, 1]
    done = frontier_cli("--from-export", str(export), "--merge-digests", "--json")
    assert done.returncode == 0, done.stderr
    (merged,) = json.loads(done.stdout)["rows"]
    assert merged["revision"] is None and merged["merged_digests"] == 1
