"""1. Durable appends: `Ledger.append` and `append_many` on a fresh data dir, and the
syncs one durable call waits for."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
from _ledger_fixtures import Bodies, log, open_ledger
from _ledger_timing import Profiles, Timing, repeat, timed

from jouled.ledger.checkpoint import write_atomic
from jouled.ledger.signing import Signer
from jouled.ledger.store import Ledger


@dataclass(frozen=True)
class AppendMode:
    method: str  # the Ledger method called
    batch: int  # entries per call
    threads: int  # concurrent callers
    count: int  # entries per repeat

    @property
    def name(self) -> str:
        return f"{self.method}-b{self.batch}-t{self.threads}"


# One caller at a time is the aim's literal reading; the threaded row is the
# daemon's situation (concurrent attempts finishing), where `append` may
# commit several callers' entries together.
APPEND_MODES = (
    AppendMode("append", 1, 1, 200),
    AppendMode("append_many", 10, 1, 500),
    AppendMode("append_many", 100, 1, 2_000),
    AppendMode("append", 1, 16, 2_000),
)


@dataclass
class AppendRow:
    mode: AppendMode
    timing: Timing  # seconds per repeat
    per_commit: float  # entries per DuckDB transaction, over all repeats

    @property
    def rate(self) -> float:
        return self.mode.count / self.timing.median

    @property
    def per_call(self) -> float:
        """Median wall time of one call, as its caller waits for it."""
        calls_per_thread = self.mode.count / self.mode.batch / self.mode.threads
        return self.timing.median / calls_per_thread


def bench_appends(
    data: Path, signer: Signer, repeats: int, profiles: Profiles
) -> tuple[list[AppendRow], Ledger]:
    data.mkdir(parents=True)
    ledger = open_ledger(data, signer)
    bodies = Bodies(seed=1)
    runs: dict[AppendMode, list[float]] = {mode: [] for mode in APPEND_MODES}
    commits: dict[AppendMode, int] = {mode: 0 for mode in APPEND_MODES}

    def prepared(count: int) -> list[dict[str, Any]]:
        out = [bodies() for _ in range(count)]
        for body in out:
            ledger.journal_accept(
                body["attempt_id"], body["idempotency_key"], body["task_id"], {"bench": True}
            )
        return out

    def run(mode: AppendMode, items: list[dict[str, Any]]) -> None:
        if mode.threads > 1:
            with ThreadPoolExecutor(mode.threads) as pool:
                for _ in pool.map(partial(ledger.append, "result"), items):
                    pass
        elif mode.batch == 1:
            for body in items:
                ledger.append("result", body)
        else:
            for start in range(0, len(items), mode.batch):
                ledger.append_many([("result", b) for b in items[start : start + mode.batch]])

    # Modes interleave within each repeat, so a drift (ledger growth, disk
    # state) spreads over all of them instead of favouring one.
    for rep in range(repeats):
        for mode in APPEND_MODES:
            items = prepared(mode.count)
            # Every commit stores one checkpoint row, so the history counts commits.
            before = len(ledger.checkpoint_history())
            runs[mode].append(timed(partial(run, mode, items))[0])
            commits[mode] += len(ledger.checkpoint_history()) - before
        log(f"appends: repeat {rep + 1}/{repeats}, ledger at {ledger.size} entries")
    for mode in APPEND_MODES:
        # cProfile sees only the calling thread, which here would only wait.
        if mode.threads == 1:
            profiles.run(mode.name, partial(run, mode, prepared(mode.count // 2)))
    rows = [
        AppendRow(mode, Timing(runs[mode]), mode.count * repeats / max(1, commits[mode]))
        for mode in APPEND_MODES
    ]
    return rows, ledger


def bench_durability_floor(data: Path, note: str, repeats: int) -> list[tuple[str, Timing]]:
    """What one durable call costs before any ledger work: the syncs it must wait for."""
    count = 20 * repeats
    path = data / "floor.note"
    note_write = repeat(partial(write_atomic, path, note), count)
    db = duckdb.connect(str(data / "floor.duckdb"))
    try:
        db.execute("CREATE TABLE t (a BIGINT, b VARCHAR)")

        def commit_one() -> None:
            db.execute("BEGIN TRANSACTION")
            db.execute("INSERT INTO t VALUES (1, 'x')")
            db.execute("COMMIT")

        commit = repeat(commit_one, count)
    finally:
        db.close()
    fd = os.open(data / "floor.tail", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:

        def sync_one() -> None:
            os.write(fd, b"x" * 2047 + b"\n")
            os.fdatasync(fd)

        tail_sync = repeat(sync_one, count)
    finally:
        os.close(fd)
    return [
        ("`fdatasync` of a 2 KiB append to the tail (what one append waits for)", tail_sync),
        (
            "`checkpoint.write_atomic` of a note (fsync file, rename, fsync dir; per batch)",
            note_write,
        ),
        ("DuckDB commit of one small row (WAL sync; per batch)", commit),
    ]
