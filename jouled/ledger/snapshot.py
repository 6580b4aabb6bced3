"""Parquet snapshots of an export, for analytics, checked against the signed payloads."""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from pathlib import Path

import duckdb

from jouled.errors import LedgerError, VerificationError
from jouled.ledger import merkle
from jouled.ledger.columns import ALL_NAMES, derived_select, mismatch_sql

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
        raise VerificationError(f"cannot read the Parquet snapshot {path}: {err}") from err
    return rows
