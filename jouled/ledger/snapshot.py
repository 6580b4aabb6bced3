"""Parquet snapshots of an export, for analytics, checked against the signed payloads."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb

from jouled.errors import LedgerError, UsageError, VerificationError
from jouled.frontier import Frontier
from jouled.ledger import merkle
from jouled.ledger.columns import ALL_NAMES, FRONTIER_NAMES, derived_select, mismatch_sql

_PAYLOAD_TEXT = "decode(from_base64(payload))"


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")


def _export_source(export: Path) -> str:
    return (
        f"read_json('{_sql_path(export)}', format = 'newline_delimited', "
        "columns = {seq: 'BIGINT', payload: 'VARCHAR', payloadType: 'VARCHAR', "
        "payload_type: 'VARCHAR', signatures: 'JSON', leaf_hash: 'VARCHAR'})"
    )


def write_parquet(export: Path, out: Path) -> int:
    """Write `out` from an export file atomically (temp file, then rename); returns rows."""
    tmp = out.with_name(out.name + ".tmp")
    derived = derived_select(_export_source(export), _PAYLOAD_TEXT, "*")
    query = (
        f"SELECT seq, kind, time, {', '.join(ALL_NAMES)}, payload, "
        # DSSE's spelling, or the one exports used before the envelope followed DSSE.
        'coalesce("payloadType", payload_type) AS payload_type, '
        f"to_json(signatures) AS signatures, leaf_hash FROM ({derived}) ORDER BY seq"
    )
    try:
        with duckdb.connect() as db:
            db.execute(f"COPY ({query}) TO '{_sql_path(tmp)}' (FORMAT parquet)")
            row = db.execute(f"SELECT count(*) FROM read_parquet('{_sql_path(tmp)}')").fetchone()
        os.replace(tmp, out)
    except duckdb.Error as err:
        tmp.unlink(missing_ok=True)
        raise LedgerError(f"cannot write the Parquet snapshot {out}: {err}") from err
    return int(row[0]) if row else 0


def check_parquet(path: Path, leaves: Sequence[bytes]) -> int:
    """Every row's payload is the export's entry and its columns equal that payload."""
    source = f"read_parquet('{_sql_path(path)}')"
    try:
        with duckdb.connect() as db:
            # A snapshot written before the frontier columns has only the others to check.
            present = {r[0] for r in db.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
            names = [n for n in ALL_NAMES if n in present]
            bad = db.execute(mismatch_sql(source, _PAYLOAD_TEXT, names)).fetchone()
            if bad is not None:
                raise VerificationError(
                    f"Parquet snapshot {path.name}: column {bad[1].split(',')[0]!r} disagrees "
                    "with the signed payload (the column was edited)",
                    seq=int(bad[0]),
                )
            cursor = db.execute(f"SELECT seq, payload FROM {source} ORDER BY seq")
            rows = 0
            while batch := cursor.fetchmany(50_000):
                for seq, payload in batch:
                    if seq != rows:
                        raise VerificationError(
                            f"Parquet snapshot {path.name}: expected entry {rows}, found {seq}",
                            seq=rows,
                        )
                    leaf = merkle.leaf_hash(base64.b64decode(payload))
                    if seq >= len(leaves) or leaf != leaves[seq]:
                        raise VerificationError(
                            f"Parquet snapshot {path.name}: payload differs from the export",
                            seq=seq,
                        )
                    rows += 1
    except duckdb.Error as err:
        # DuckDB's first line says why; the rest quotes the SQL it ran.
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise VerificationError(f"cannot read the Parquet snapshot {path}: {why}") from err
    return rows


# -- the frontier of an export -----------------------------------------------------------


def _last_record(export: Path) -> dict[str, Any] | None:
    """The export's last entry line, parsed; None when it has none."""
    with export.open("rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        block = 1 << 16
        tail = b""
        while size > 0:
            step = min(block, size)
            size -= step
            fh.seek(size)
            tail = fh.read(step) + tail
            lines = [line for line in tail.split(b"\n") if line.strip()]
            if len(lines) > 1 or (lines and size == 0):
                try:
                    record = json.loads(lines[-1])
                except ValueError:
                    return None
                return record if isinstance(record, dict) else None
    return None


def _snapshot_matches(db: duckdb.DuckDBPyConnection, export: Path, parquet: Path) -> bool:
    """Whether `parquet` is this export's snapshot, with the frontier columns.

    It must hold entries 0..n-1 without gaps and end with the export's last
    entry (same seq, same leaf hash, which chains every entry before it). A
    snapshot of another or an older export, or one written before the
    frontier columns, does not match and the payloads are read instead.
    """
    try:
        source = f"read_parquet('{_sql_path(parquet)}')"
        present = {r[0] for r in db.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
        if not set(FRONTIER_NAMES) <= present:
            return False
        row = db.execute(f"SELECT count(*), min(seq), max(seq) FROM {source}").fetchone()
        if row is None or not row[0]:
            return False
        count, first, top = row
        # Row group statistics on seq find the last entry without reading the others.
        end = db.execute(f"SELECT leaf_hash FROM {source} WHERE seq = ?", [top]).fetchall()
    except duckdb.Error:
        return False
    last = _last_record(export)
    if last is None or len(end) != 1:
        return False
    leaf = end[0][0]
    return bool(
        first == 0 and top == count - 1 == last.get("seq") and leaf == last.get("leaf_hash")
    )


def export_frontier(export: Path) -> Frontier:
    """The frontier of an export file, as the daemon would serve it from the same ledger.

    Read from the export's Parquet snapshot when it matches the export (its
    query columns were derived from these payloads when the export was
    written, and `jb-client verify` checks them against the payloads), else
    from the payloads themselves with DuckDB's JSON reader and the same
    derivation. Either way `Frontier.from_columns` aggregates them, so the
    rows are the ones `frontier_rows` computes from the result bodies.
    """
    parquet = export.with_name(export.name + ".parquet")
    try:
        with duckdb.connect() as db:
            if parquet.is_file() and _snapshot_matches(db, export, parquet):
                relation = f"read_parquet('{_sql_path(parquet)}')"
                op_payloads = "from_base64(payload)"
            else:
                keep = "seq, payload"
                derived = derived_select(_export_source(export), _PAYLOAD_TEXT, keep)
                columns = ", ".join(("seq", "kind", *ALL_NAMES))
                # Parsed once into a table: the frontier's queries each read it again.
                db.execute(
                    f"CREATE TEMP TABLE entries AS SELECT {columns}, "
                    f"CASE WHEN kind = 'op' THEN payload END AS payload FROM ({derived})"
                )
                relation, op_payloads = "entries", "from_base64(payload)"
            ops = [
                json.loads(bytes(payload))["body"]
                for (payload,) in db.execute(
                    f"SELECT {op_payloads} FROM {relation} WHERE kind = 'op' ORDER BY seq"
                ).fetchall()
            ]

            def fetch(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
                return db.execute(sql, list(params)).fetchall()

            return Frontier.from_columns(fetch, relation, ops)
    except duckdb.Error as err:
        raise UsageError(f"cannot read the export {export}: {err}") from err
