"""The column seal: what lets a start after a clean stop skip the column check.

Opening a ledger checks every query column against its signed payload: one
JSON pass over every payload, most of a start on a large ledger. When the
daemon stops cleanly, every column it holds was either checked at its open
or derived by it since, so it seals them: an HMAC-SHA256 over the number of
rows and a SHA-256 of every row's `seq`, `leaf_hash`, `kind` and query
columns, in seq order (each row as a JSON array, so no two rows' values read
alike). The next open takes the seal (removing the file), computes the same
digest, with no payload parsed, and skips the column check only if the seal
matches. A missing, unreadable, stale or foreign seal, or any edited column,
means the full check runs.

The MAC key is a hash of this daemon's Ed25519 signature over a fixed text:
deterministic, and out of reach of anyone without the signing key, who is
then unable to seal edited columns. The seal is not secret; it lives beside
the ledger as `ledger.duckdb.seal`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import duckdb

from jouled.ledger.checkpoint import write_atomic
from jouled.ledger.signing import Signer

log = logging.getLogger(__name__)

VERSION = 1
_KEY_TEXT = b"jouled ledger column seal v1"


def seal_path(ledger_path: Path) -> Path:
    return ledger_path.with_name(ledger_path.name + ".seal")


def digest(cursor: duckdb.DuckDBPyConnection, names: Sequence[str]) -> tuple[int, str]:
    """(rows, SHA-256 of the rows' sealed values in seq order), computed by DuckDB."""
    values = ", ".join(["seq::VARCHAR", "leaf_hash", "kind", *(f'"{n}"::VARCHAR' for n in names)])
    row = cursor.execute(
        f"SELECT count(*), coalesce(sha256(string_agg(sha256(to_json([{values}])), '' "
        "ORDER BY seq)), '') FROM entries"
    ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


def _mac(signer: Signer, rows: int, row_digest: str) -> str:
    key = hashlib.sha256(signer.sign_raw(_KEY_TEXT)).digest()
    message = f"{VERSION}:{rows}:{row_digest}".encode("ascii")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def write(path: Path, signer: Signer, rows: int, row_digest: str) -> None:
    """Seal the columns (atomically); raises LedgerError if the file cannot be written."""
    record = {"version": VERSION, "rows": rows, "mac": _mac(signer, rows, row_digest)}
    write_atomic(path, json.dumps(record) + "\n")


def take(path: Path) -> dict[str, object] | None:
    """The seal's record, removing the file: a seal vouches for one start only.

    Until the next clean stop writes a new one, there is none, so a start after
    a crash goes straight to the full check instead of computing a digest first.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as err:
        log.warning("ignoring the column seal %s (%s): checking every column", path, err)
        return None
    try:
        path.unlink()
    except OSError as err:
        log.warning("cannot remove the column seal %s (%s)", path, err.strerror)
    try:
        record = json.loads(text)
    except ValueError as err:
        log.warning("ignoring the column seal %s (%s): checking every column", path, err)
        return None
    return record if isinstance(record, dict) else None


def matches(record: dict[str, object], signer: Signer, rows: int, row_digest: str) -> bool:
    """Whether the seal's record is this signer's over exactly these rows."""
    mac = record.get("mac")
    return (
        record.get("version") == VERSION
        and record.get("rows") == rows
        and isinstance(mac, str)
        and hmac.compare_digest(mac, _mac(signer, rows, row_digest))
    )
