"""The ledger's DuckDB tables, the statements an append writes them with, and the key
id a ledger names, read without opening it for writing."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from jouled.errors import LedgerError
from jouled.ledger.columns import QUERY_COLUMNS
from jouled.ledger.tail import read_records, tail_path

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq BIGINT PRIMARY KEY,
    kind VARCHAR NOT NULL,
    time VARCHAR NOT NULL,
    payload BLOB NOT NULL,
    signatures VARCHAR NOT NULL,
    leaf_hash VARCHAR NOT NULL,
    task_id VARCHAR,
    suite VARCHAR,
    task_digest VARCHAR,
    solver VARCHAR,
    model VARCHAR,
    status VARCHAR,
    resolved BOOLEAN,
    patch_sha256 VARCHAR,
    idempotency_key VARCHAR,
    run_id VARCHAR,
    rollout INTEGER,
    attempt_id VARCHAR,
    agent VARCHAR,
    claimed_usd_micros BIGINT,
    claimed_joules_mj BIGINT,
    audit_flagged BOOLEAN,
    counted_gross_mj BIGINT,
    counted_marginal_mj BIGINT,
    counted_wall_ms BIGINT,
    counted_windows INTEGER,
    reliable_windows INTEGER,
    invalid_windows INTEGER,
    solve_source VARCHAR,
    grade_source VARCHAR,
    integrity_level VARCHAR
);
CREATE TABLE IF NOT EXISTS checkpoints (
    size BIGINT PRIMARY KEY,
    root VARCHAR NOT NULL,
    note VARCHAR NOT NULL,
    time VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS journal (
    attempt_id VARCHAR PRIMARY KEY,
    idempotency_key VARCHAR,
    task_id VARCHAR NOT NULL,
    accepted VARCHAR NOT NULL,
    request VARCHAR NOT NULL,
    mac VARCHAR
);
"""


# The columns an append writes, as the store's `_insert` passes them to DuckDB in one JSON text.
INSERT_TYPES = {
    "seq": "BIGINT",
    "kind": "VARCHAR",
    "time": "VARCHAR",
    "payload": "VARCHAR",
    "signatures": "VARCHAR",
    "leaf_hash": "VARCHAR",
    **dict(QUERY_COLUMNS),
}
INSERT_SQL = (
    f"INSERT INTO entries ({', '.join(INSERT_TYPES)}) SELECT "
    + ", ".join("encode(r.payload)" if c == "payload" else f"r.{c}" for c in INSERT_TYPES)
    + f" FROM (SELECT unnest(from_json(?::JSON, '{json.dumps([INSERT_TYPES])}')) AS r)"
)

CHECKPOINTS_SQL = (
    "INSERT INTO checkpoints (size, root, note, time) SELECT r.size, r.root, r.note, r.time "
    """FROM (SELECT unnest(from_json(?::JSON, '[{"size": "BIGINT", "root": "VARCHAR", """
    """"note": "VARCHAR", "time": "VARCHAR"}]')) AS r)"""
)


def current_keyid(path: Path) -> str | None:
    """The key id the ledger says signs next (None for a new ledger), read without writing."""
    if not path.exists():
        return None
    try:
        # The tail holds the newest entries: a rotation a crash left there names the key.
        records, _ = read_records(tail_path(path))
    except LedgerError:
        records = []  # opening the ledger reports what is wrong
    for record in reversed(records):
        if record.entry.kind in ("genesis", "key_rotation"):
            body = record.entry.body
            return str(body.get("new_keyid") or body.get("keyid"))
    try:
        with duckdb.connect(str(path), read_only=True) as db:
            row = db.execute(
                "SELECT payload FROM entries WHERE kind IN ('genesis', 'key_rotation') "
                "ORDER BY seq DESC LIMIT 1"
            ).fetchone()
    except duckdb.Error:
        return None  # opening it for real reports what is wrong
    if row is None:
        return None
    body = json.loads(bytes(row[0]))["body"]
    return str(body.get("new_keyid") or body.get("keyid"))
