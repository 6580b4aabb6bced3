"""4. The frontier query over the N-entry ledger, filled from the cached export."""

from __future__ import annotations

import gc
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
from _ledger_fixtures import PROFILE_CAP, Export, log, open_ledger
from _ledger_proofs import ProofRow, bench_ledger_proofs
from _ledger_timing import Profiles, Timing, repeat, timed

from jouled import frontier
from jouled.ledger.checkpoint import parse_note
from jouled.ledger.columns import ALL_NAMES, derived_select
from jouled.ledger.schema import SCHEMA
from jouled.ledger.signing import Signer


@dataclass
class FrontierResult:
    results: int
    groups: int
    load_s: float
    open_s: float
    bodies: Timing
    rows: Timing
    totals_build_s: float  # frontier.Frontier(bodies), 1 run
    columns_build_s: float  # Ledger.frontier(): the same totals from the query columns, 1 run
    totals_rows: Timing  # Frontier.rows() on those totals
    totals_add: Timing  # Frontier.add per result
    db_bytes: int


def load_ledger_db(export: Export, db_path: Path, note_path: Path) -> None:
    """Fill `entries` from the export with DuckDB's JSON reader, as the store would have."""
    db = duckdb.connect(str(db_path))
    try:
        db.execute(SCHEMA)
        src = str(export.lines).replace("'", "''")
        # The query columns come from the store's own derivation, the one its
        # open-time check compares them with.
        columns = ", ".join(ALL_NAMES)
        source = (
            f"(SELECT seq, from_base64(payload) AS payload, signatures::VARCHAR AS signatures, "
            f"leaf_hash FROM read_json('{src}', format = 'newline_delimited', columns = {{"
            "seq: 'BIGINT', payload: 'VARCHAR', signatures: 'JSON', leaf_hash: 'VARCHAR'}))"
        )
        derived = derived_select(source, "decode(payload)", "seq, payload, signatures, leaf_hash")
        db.execute(
            f"INSERT INTO entries (seq, kind, time, payload, signatures, leaf_hash, {columns}) "
            f"SELECT seq, kind, time, payload, signatures, leaf_hash, {columns} "
            f"FROM ({derived}) ORDER BY seq"
        )
        note = export.notes[export.n]
        db.execute(
            "INSERT INTO checkpoints VALUES (?, ?, ?, ?)",
            [export.n, parse_note(note)[0].root.hex(), note, datetime.now(UTC).isoformat()],
        )
    finally:
        db.close()
    note_path.write_text(note, encoding="utf-8")


def bench_frontier(
    export: Export, signer: Signer, tmp: Path, repeats: int, profiles: Profiles
) -> tuple[FrontierResult, list[ProofRow]]:
    data = tmp / "frontier"
    data.mkdir()
    log(f"frontier: loading {export.n:,} entries into DuckDB")
    load_s, _ = timed(
        lambda: load_ledger_db(export, data / "ledger.duckdb", data / "checkpoint.note")
    )
    gc.collect()
    log("frontier: opening the ledger (every leaf rehashed and checked against the note)")
    open_s, ledger = timed(lambda: open_ledger(data, signer))
    if ledger.size != export.n:
        raise RuntimeError(f"the ledger holds {ledger.size} entries, expected {export.n}")
    log("frontier: rebuilt from the query columns (as the daemon starts)")
    columns_s, from_columns = timed(ledger.frontier)
    log("frontier: proofs on the ledger")
    proofs = bench_ledger_proofs(ledger, repeats, f"DuckDB ledger, {export.n:,} entries")

    runs: list[float] = []
    bodies: list[dict[str, Any]] = []
    for rep in range(repeats):
        bodies = []
        gc.collect()
        dt, bodies = timed(lambda: list(ledger.result_bodies()))
        runs.append(dt)
        log(f"frontier: result_bodies {rep + 1}/{repeats}: {dt:.2f} s")
    log(f"frontier: frontier_rows over {len(bodies):,} bodies x {repeats}")
    out: list[dict[str, Any]] = []
    rows_runs: list[float] = []
    for _ in range(repeats):
        dt, out = timed(partial(frontier.frontier_rows, bodies))
        rows_runs.append(dt)
    # The daemon keeps running totals instead: built once at start, then one
    # add per signed result, and a query only turns the totals into rows.
    log("frontier: running totals (frontier.Frontier)")
    build_s, totals = timed(partial(frontier.Frontier, bodies))
    if from_columns.rows() != totals.rows():
        raise RuntimeError("the frontier from the query columns differs from the parsed one")
    totals_rows = repeat(totals.rows, 5 * repeats)
    extra = bodies[: min(len(bodies), 10_000)]
    adds = [timed(partial(totals.add, body))[0] for body in extra]
    result = FrontierResult(
        results=len(bodies),
        groups=len(out),
        load_s=load_s,
        open_s=open_s,
        bodies=Timing(runs),
        rows=Timing(rows_runs),
        totals_build_s=build_s,
        columns_build_s=columns_s,
        totals_rows=totals_rows,
        totals_add=Timing(adds),
        db_bytes=(data / "ledger.duckdb").stat().st_size,
    )
    del totals, extra
    cap = min(len(bodies), PROFILE_CAP)
    profiles.run("frontier-rows", partial(frontier.frontier_rows, bodies[:cap]))
    del bodies
    gc.collect()
    profiles.run("result-bodies", lambda: list(ledger.result_bodies()))
    ledger.close()
    return result, proofs
