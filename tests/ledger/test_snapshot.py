"""Parquet snapshots: written from an export, checked against the signed payloads."""

import base64
import json
from pathlib import Path

import duckdb
import pytest

from jouled.errors import VerificationError
from jouled.ledger.snapshot import write_parquet
from jouled.ledger.verify import verify_export

from .test_store import open_ledger


@pytest.fixture
def export(tmp_path: Path) -> tuple[Path, list]:
    ledger = open_ledger(tmp_path / "data")
    for i in range(4):
        ledger.append(
            "result",
            {
                "task_id": f"s/t{i}",
                "suite": "s",
                "resolved": i == 2,
                "status": "resolved" if i == 2 else "unresolved",
                "rollout": i,
            },
        )
    out = tmp_path / "ledger.jsonl"
    out.write_text("".join(e.export_line() + "\n" for e in ledger.iter_export()))
    keys = [ledger.signer.public]
    ledger.close()
    return out, keys


def test_snapshot_columns_come_from_the_signed_payloads(export: tuple, tmp_path: Path) -> None:
    out, keys = export
    parquet = tmp_path / "ledger.parquet"
    assert write_parquet(out, parquet) == 5
    assert not list(tmp_path.glob("*.tmp"))
    with duckdb.connect() as db:
        rows = db.execute(
            f"SELECT seq, kind, task_id, resolved, rollout FROM "
            f"read_parquet('{parquet}') ORDER BY seq"
        ).fetchall()
    assert rows[0] == (0, "genesis", None, None, None)
    assert rows[3] == (3, "result", "s/t2", True, 2)
    assert verify_export(out.read_text().splitlines(), keys, parquet=parquet).parquet_rows == 5


def _rewrite(parquet: Path, sql: str) -> None:
    with duckdb.connect() as db:
        db.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{parquet}')")
        db.execute(sql)
        db.execute(f"COPY t TO '{parquet}' (FORMAT parquet)")


def test_an_edited_column_in_the_snapshot_is_caught(export: tuple, tmp_path: Path) -> None:
    out, keys = export
    parquet = tmp_path / "ledger.parquet"
    write_parquet(out, parquet)
    _rewrite(parquet, "UPDATE t SET resolved = true WHERE seq = 1")
    with pytest.raises(VerificationError, match="column 'resolved' disagrees") as info:
        verify_export(out.read_text().splitlines(), keys, parquet=parquet)
    assert info.value.seq == 1


def test_a_snapshot_payload_that_is_not_the_exported_one_is_caught(
    export: tuple, tmp_path: Path
) -> None:
    out, keys = export
    parquet = tmp_path / "ledger.parquet"
    write_parquet(out, parquet)
    line = json.loads(out.read_text().splitlines()[2])
    doc = json.loads(base64.b64decode(line["payload"]))
    doc["body"]["suite"] = "other"
    forged = base64.b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode()
    _rewrite(parquet, f"UPDATE t SET payload = '{forged}', suite = 'other' WHERE seq = 2")
    with pytest.raises(VerificationError, match="payload differs from the export") as info:
        verify_export(out.read_text().splitlines(), keys, parquet=parquet)
    assert info.value.seq == 2
