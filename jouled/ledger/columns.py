"""Query columns: copies of signed fields kept beside each payload for SQL.

They make the ledger and its Parquet snapshots cheap to query, and they are
never trusted: the same SQL, run over the daemon's DuckDB file at open and
over an exported Parquet snapshot by `verify`, finds any row whose columns
disagree with the signed payload they were copied from.
"""

from __future__ import annotations

from typing import Any

# (column, DuckDB type) copied from a `result`, `baseline` or `abort` body.
QUERY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("task_id", "VARCHAR"),
    ("suite", "VARCHAR"),
    ("task_digest", "VARCHAR"),
    ("solver", "VARCHAR"),
    ("model", "VARCHAR"),
    ("status", "VARCHAR"),
    ("resolved", "BOOLEAN"),
    ("patch_sha256", "VARCHAR"),
    ("idempotency_key", "VARCHAR"),
    ("run_id", "VARCHAR"),
    ("rollout", "INTEGER"),
    ("attempt_id", "VARCHAR"),
)
INDEXED_KINDS = ("result", "baseline", "abort")
NAMES = tuple(name for name, _ in QUERY_COLUMNS)


def query_values(kind: str, body: dict[str, Any]) -> list[Any]:
    if kind not in INDEXED_KINDS:
        return [None] * len(QUERY_COLUMNS)
    return [body.get(name) for name in NAMES]


def _from_payload(json_text: str, kind_expr: str, name: str, sql_type: str) -> str:
    value = f"json_extract_string({json_text}, '$.body.{name}')"
    if sql_type != "VARCHAR":
        value = f"TRY_CAST({value} AS {sql_type})"
    kinds = ", ".join(f"'{k}'" for k in INDEXED_KINDS)
    return f"(CASE WHEN {kind_expr} IN ({kinds}) THEN {value} END)"


def select_columns_sql(json_text: str, kind_expr: str) -> str:
    """SELECT-list expressions deriving every query column from the payload text."""
    return ", ".join(
        f"{_from_payload(json_text, kind_expr, name, sql_type)} AS {name}"
        for name, sql_type in QUERY_COLUMNS
    )


def mismatch_sql(table: str, payload_text: str) -> str:
    """SQL returning (seq, column) for every query column that disagrees with its payload."""
    kind = f"json_extract_string({payload_text}, '$.kind')"
    checks = [f"SELECT seq, 'kind' AS col FROM {table} WHERE kind IS DISTINCT FROM {kind}"] + [
        f"SELECT seq, '{name}' AS col FROM {table} "
        f"WHERE {name} IS DISTINCT FROM {_from_payload(payload_text, kind, name, sql_type)}"
        for name, sql_type in QUERY_COLUMNS
    ]
    return " UNION ALL ".join(checks) + " ORDER BY seq, col"
