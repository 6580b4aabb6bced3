"""The frontier rebuilt from the ledger's query columns equals the one parsed from payloads."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import duckdb
import pytest

from jouled.errors import LedgerIntegrityError, UsageError
from jouled.frontier import Frontier, frontier_rows
from jouled.ledger.columns import FRONTIER_NAMES, NAMES

from .ledger.test_store import open_ledger
from .test_frontier import result, window
from .test_frontier_honesty import NEW, OLD, mixed_ledger
from .test_frontier_ops import op

AXES = ("joules", "usd", "wall")
STATUSES = ["resolved", "unresolved", "error", "timeout", "invalid", "tampered"]


def varied(seed: int, n: int = 400) -> list[dict[str, Any]]:
    """Results of every status and energy shape the frontier distinguishes."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        task = f"{rng.choice(['s', 'lite', 'p'])}/t{rng.randrange(7)}"
        energy: dict[str, Any] = {}
        for phase in ("baseline", "seed", "solve", "grade"):
            shape = rng.random()
            if shape < 0.15:
                continue  # the phase did not run
            if shape < 0.22:
                energy[phase] = window(None, None, valid=False, wall_ms=rng.randrange(900))
            elif shape < 0.27:
                energy[phase] = {**window(rng.randrange(1, 9000)), "valid": False}
            else:
                energy[phase] = window(
                    rng.randrange(0, 90_000),
                    rng.randrange(0, 9_000),
                    wall_ms=rng.randrange(0, 90_000),
                    source=rng.choice(["rapl", "rapl+nvml", "estimator"]),
                    reliable=rng.random() < 0.7,
                )
        claimed = rng.choice(
            [{}, {"usd_micros": rng.randrange(1, 90_000)}, {"usd_micros": 0, "joules_mj": 5}]
        )
        body = result(
            task,
            solver=rng.choice(["reference", "noop", "agent-a", "agent-b"]),
            model=rng.choice(["", "m1", "m2"]),
            status=rng.choice(
                ["resolved", "unresolved", "error", "timeout", "invalid", "tampered"]
            ),
            rollout=rng.randrange(4),
            energy=energy,
            claimed=claimed,
            suite=rng.choice([None, ""]),  # "" falls back to the task id's prefix
        )
        if rng.random() < 0.1:
            body["resolved"] = not body["resolved"]  # a status and a flag that disagree
        if rng.random() < 0.2:
            del body["suite"]
        body["task_digest"] = rng.choice([OLD, NEW]) if task.endswith("t0") else OLD
        body["agent"] = rng.choice(["", "alice", "bob"])
        body["run_id"] = rng.choice(["r1", "r2"])
        body["audit"] = rng.choice([[], [], [{"code": "conftest", "path": "c", "line": 1}]])
        if rng.random() < 0.1:
            del body["audit"]
        integrity = rng.choice(
            [None, "monitor", "monitor", "reduced", "none", "bogus", 3, {"x": 1}]
        )
        if integrity is not None:
            body["integrity"] = {"level": integrity, "report": "channel"}
        out.append(body)
    return out


def ops_for(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        op(
            rng.choice([None, rng.randrange(1, 900)]),
            agent=rng.choice(["alice", "bob"]),
            task=f"{rng.choice(['s', 'lite'])}/t{rng.randrange(7)}",
            run_id=rng.choice(["r1", "r2"]),
            rollout=rng.randrange(4),
            abandoned=rng.random() < 0.3,
        )
        for _ in range(60)
    ]


def assert_same(built: Frontier, parsed: Frontier) -> None:
    for axis in AXES:
        for merge in (False, True):
            for suite in (None, "s", "lite"):
                got = built.rows(axis=axis, merge_digests=merge, suite=suite)
                want = parsed.rows(axis=axis, merge_digests=merge, suite=suite)
                assert got == want, (axis, merge, suite)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_column_built_frontier_equals_the_payload_parsed_one(tmp_path: Path, seed: int) -> None:
    results, ops = varied(seed), ops_for(seed)
    ledger = open_ledger(tmp_path)
    ledger.append("calibration", {"source": "estimator", "seconds": 0, "domains": {}})
    for i, body in enumerate(results):
        ledger.append("result", body)
        if i % 50 == 0:
            ledger.append("op", ops[i // 50])
    ledger.append_many([("op", body) for body in ops[len(results) // 50 + 1 :]])
    stored_ops = [e.body for e in ledger.entries("op")]
    parsed = Frontier(results, stored_ops)
    assert_same(ledger.frontier(stored_ops), parsed)
    ledger.close()

    # Reopened, the columns still agree with the payloads, and the rebuilt totals
    # keep running: a result and an op after the start count as they always did.
    reopened = open_ledger(tmp_path)
    built = reopened.frontier(stored_ops)
    late_result, late_op = varied(seed + 100, 1)[0], ops_for(seed + 100)[0]
    late_result.update(task_id="s/t1", agent="alice", run_id="r1", rollout=0, status="resolved")
    late_op.update(task_id="s/t1", agent="alice", run_id="r1", rollout=0)
    for frontier in (built, parsed):
        frontier.add(late_result)
        frontier.add_op(late_op)
    assert_same(built, parsed)
    reopened.close()


def test_a_window_after_the_start_is_charged_to_the_rows_signed_before_it(
    tmp_path: Path,
) -> None:
    results = varied(5, 60)
    for body in results[:20]:
        body.update(agent="carol", task_id="s/t3", run_id="r9", rollout=1, status="unresolved")
    ledger = open_ledger(tmp_path)
    ledger.append_many([("result", body) for body in results])
    built, parsed = ledger.frontier(), Frontier(results)
    late = op(450, agent="carol", task="s/t3", run_id="r9", rollout=1)
    for frontier in (built, parsed):
        frontier.add_op(late)
        frontier.add(results[0])  # the same attempt again: its window is not charged twice
        frontier.add_op(late)
    assert_same(built, parsed)
    charged = [row["op_windows"] for row in built.rows() if row["op_windows"]]
    assert len(charged) > 1 and set(charged) == {2}  # every row holding the key, each window once
    ledger.close()


def test_the_honesty_ledger_builds_the_same_from_columns(tmp_path: Path) -> None:
    results, ops = mixed_ledger()
    ledger = open_ledger(tmp_path)
    ledger.append_many([("op", body) for body in ops] + [("result", b) for b in results])
    assert_same(ledger.frontier(ops), Frontier(results, ops))
    for axis in AXES:
        assert ledger.frontier(ops).rows(axis=axis) == frontier_rows(results, axis=axis, ops=ops)
    ledger.close()


def test_the_columns_refuse_what_parsing_refuses(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.append("result", result("s/a", status="resolved"))
    ledger.append("result", result("s/b", status="exploded"))
    with pytest.raises(UsageError, match="'s/b' has unknown status 'exploded'"):
        ledger.frontier()
    with pytest.raises(UsageError, match="'s/b' has unknown status 'exploded'"):
        Frontier([e.body for e in ledger.entries("result")])
    ledger.close()

    other = open_ledger(tmp_path / "other")
    other.append("result", result("s/c", rollout=-2))
    with pytest.raises(UsageError, match="'s/c' has negative rollout -2"):
        other.frontier()
    other.close()


ODD_BODIES: list[dict[str, Any]] = [
    {},
    {"task_id": "s/a", "energy": "none", "claimed": None, "audit": "yes", "agent": 7},
    {"energy": {"grade": [], "solve": {}}, "claimed": {"usd_micros": "12", "joules_mj": True}},
    {"energy": {"grade": {"valid": "false", "gross_mj": 3, "marginal_mj": 1, "source": None}}},
    {"energy": {"grade": {"gross_mj": "3", "marginal_mj": 1, "wall_ms": False, "reliable": "no"}}},
    {"energy": {"solve": {"gross_mj": 1, "marginal_mj": 1, "reliable": 1, "source": 'x\n"y\\'}}},
    {"audit": [None], "agent": "é/\u0000", "energy": {"grade": {"reliable": {}, "valid": None}}},
    {"integrity": "monitor", "status": "resolved", "resolved": True},
    {"integrity": {"level": None}, "status": "resolved", "resolved": True},
    {"integrity": {"level": 'mon"itor\n'}, "status": "resolved", "resolved": True},
]


def test_odd_payloads_store_the_columns_the_check_derives(tmp_path: Path) -> None:
    # Whatever a body holds, the columns filled from it are the ones the check derives
    # (the fill and the check run the same SQL), so no honest ledger is refused at open.
    ledger = open_ledger(tmp_path)
    ledger.append_many([("result", body) for body in ODD_BODIES])
    ledger.append_many([("baseline", body) for body in ODD_BODIES])
    ledger.close()
    open_ledger(tmp_path).close()


def test_an_edited_frontier_column_is_refused_at_open(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.append("result", result("s/a", energy={"grade": window(4000)}))
    ledger.append("result", result("s/b", energy={"grade": window(4000)}))
    ledger.close()
    with duckdb.connect(str(tmp_path / "ledger.duckdb")) as db:
        # Halve one attempt's joules: its signed payload still says 4000 mJ.
        db.execute("UPDATE entries SET counted_gross_mj = 2000 WHERE seq = 2")
    with pytest.raises(LedgerIntegrityError, match="entry 2 column 'counted_gross_mj' disagrees"):
        open_ledger(tmp_path)


OLD_SCHEMA_COLUMNS = ("seq", "kind", "time", "payload", "signatures", "leaf_hash", *NAMES)


def test_a_ledger_without_the_frontier_columns_gets_them_once(tmp_path: Path) -> None:
    results, ops = mixed_ledger()
    ledger = open_ledger(tmp_path)
    ledger.append_many([("op", body) for body in ops] + [("result", b) for b in results])
    ledger.close()
    # Rewrite the file as a ledger from before the frontier columns: same rows, fewer columns.
    path = tmp_path / "ledger.duckdb"
    old = tmp_path / "old.duckdb"
    with duckdb.connect(str(old)) as db:
        db.execute(f"ATTACH '{path}' AS new (READ_ONLY)")
        columns = ", ".join(OLD_SCHEMA_COLUMNS)
        db.execute(f"CREATE TABLE entries AS SELECT {columns} FROM new.entries ORDER BY seq")
        db.execute("CREATE TABLE checkpoints AS SELECT * FROM new.checkpoints")
        db.execute("CREATE TABLE journal AS SELECT * FROM new.journal")
    path.unlink()
    old.rename(path)
    with duckdb.connect(str(path)) as db:
        names = {r[0] for r in db.execute("DESCRIBE entries").fetchall()}
    assert not names & set(FRONTIER_NAMES)

    migrated = open_ledger(tmp_path)
    assert_same(migrated.frontier(ops), Frontier(results, ops))
    migrated.append("result", results[0])
    migrated.close()
    with duckdb.connect(str(path)) as db:
        names = {r[0] for r in db.execute("DESCRIBE entries").fetchall()}
    assert set(FRONTIER_NAMES) <= names
    open_ledger(tmp_path).close()


def test_a_ledger_without_the_integrity_column_gets_it_for_every_result(tmp_path: Path) -> None:
    # A ledger from before `integrity_level`: its other frontier columns are filled, so
    # only a fill of every result, not just the unfilled ones, gives the new one a value.
    results = varied(7, 120)
    ledger = open_ledger(tmp_path)
    ledger.append_many([("result", b) for b in results])
    ledger.close()
    path = tmp_path / "ledger.duckdb"
    levels = sum(isinstance(b.get("integrity", {}).get("level"), str) for b in results)
    filled = "SELECT count(*) FROM entries WHERE integrity_level IS NOT NULL"
    with duckdb.connect(str(path)) as db:
        assert db.execute(filled).fetchone() == (levels,)
        db.execute("ALTER TABLE entries DROP COLUMN integrity_level")
    migrated = open_ledger(tmp_path)
    assert_same(migrated.frontier(), Frontier(results))
    migrated.close()
    with duckdb.connect(str(path)) as db:
        assert db.execute(filled).fetchone() == (levels,)
    open_ledger(tmp_path).close()  # the filled column agrees with the payloads


def test_an_export_gives_the_same_frontier_from_its_payloads_and_its_snapshot(
    tmp_path: Path,
) -> None:
    from jouled.ledger.snapshot import _snapshot_matches, export_frontier, write_parquet

    results, ops = varied(4), ops_for(4)
    ledger = open_ledger(tmp_path / "data")
    ledger.append_many([("op", body) for body in ops[:30]] + [("result", b) for b in results])
    ledger.append_many([("op", body) for body in ops[30:]])
    export = tmp_path / "ledger.jsonl"
    export.write_text("".join(e.export_line() + "\n" for e in ledger.iter_export()))
    ledger.close()
    parsed = Frontier(results, ops)

    assert_same(export_frontier(export), parsed)  # no snapshot: the payloads
    write_parquet(export, tmp_path / "ledger.jsonl.parquet")
    with duckdb.connect() as db:
        assert _snapshot_matches(db, export, tmp_path / "ledger.jsonl.parquet")
    assert_same(export_frontier(export), parsed)  # the snapshot's columns

    # A snapshot of an older export does not match this one: the payloads are read.
    ledger = open_ledger(tmp_path / "data")
    more = varied(44, 30)
    ledger.append_many([("result", b) for b in more])
    export.write_text("".join(e.export_line() + "\n" for e in ledger.iter_export()))
    ledger.close()
    with duckdb.connect() as db:
        assert not _snapshot_matches(db, export, tmp_path / "ledger.jsonl.parquet")
    assert_same(export_frontier(export), Frontier([*results, *more], ops))
