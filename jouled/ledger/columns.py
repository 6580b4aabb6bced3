"""Query columns: copies of signed fields kept beside each payload for SQL.

They make the ledger and its Parquet snapshots cheap to query, and they are
never trusted: the same SQL, run over the daemon's DuckDB file at open and
over an exported Parquet snapshot by `verify`, finds any row whose columns
disagree with the signed payload they were copied from.

Two sets:

- `QUERY_COLUMNS`, copied from a `result`, `baseline` or `abort` body: the
  field as `json_extract_string` reads it, cast to the column's type.
- `FRONTIER_COLUMNS`, a `result`'s inputs to the frontier (`jouled.frontier`),
  so the daemon can rebuild its running totals with a few aggregate queries
  instead of parsing every payload. Each is a function of the payload's JSON
  values (`_frontier_exprs`); where a field has the type the ledger
  documents, it equals what the frontier computes from the body itself, and
  a value of another JSON type reads as absent. The store fills them with the
  same SQL the checks run, so a stored value can only differ from the derived
  one if it was edited.

Every column is derived from one parse of the payload: `json_extract` with
a list of paths yields each path's JSON text, and the expressions below read
those texts (`'false'` is JSON false, `'"false"'` a string).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

# The phases whose windows the frontier charges to an attempt (frontier.COUNTED_PHASES).
COUNTED_PHASES = ("solve", "grade")

# (column, DuckDB type): a `result`'s frontier inputs; NULL on every other kind.
FRONTIER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("agent", "VARCHAR"),  # `agent`, when a string
    ("claimed_usd_micros", "BIGINT"),  # `claimed.usd_micros`, 0 when absent
    ("claimed_joules_mj", "BIGINT"),  # `claimed.joules_mj`, 0 when absent
    ("audit_flagged", "BOOLEAN"),  # `audit` is a non-empty list
    ("counted_gross_mj", "BIGINT"),  # gross_mj of the counted phases' valid windows
    ("counted_marginal_mj", "BIGINT"),  # marginal_mj of the same windows
    ("counted_wall_ms", "BIGINT"),  # wall_ms of every counted window that ran
    ("counted_windows", "INTEGER"),  # counted windows that ran
    ("reliable_windows", "INTEGER"),  # valid ones marked reliable
    ("invalid_windows", "INTEGER"),  # ones whose read failed (valid false, null figures)
    ("solve_source", "VARCHAR"),  # the solve window's `source` ("" if none); NULL: no solve
    ("grade_source", "VARCHAR"),  # the grade window's, likewise
    ("integrity_level", "VARCHAR"),  # `integrity.level`, when a string
)
FRONTIER_NAMES = tuple(name for name, _ in FRONTIER_COLUMNS)
ALL_COLUMNS = QUERY_COLUMNS + FRONTIER_COLUMNS
ALL_NAMES = NAMES + FRONTIER_NAMES

_WINDOW_FIELDS = ("valid", "gross_mj", "marginal_mj", "wall_ms", "reliable", "source")

# Every path a derivation reads, in one list: one parse of the payload per row.
_PATHS: tuple[str, ...] = (
    "$.kind",
    "$.time",
    *(f"$.body.{name}" for name in NAMES),
    "$.body.agent",
    "$.body.claimed.usd_micros",
    "$.body.claimed.joules_mj",
    "$.body.audit",
    "$.body.integrity.level",
    *(f"$.body.energy.{phase}" for phase in COUNTED_PHASES),
)
# A window's fields are read from its own JSON text: a short second parse costs less than
# walking the whole payload again for each field.
_J = "__j"  # the JSON texts, one per path, then a column each (__r0, __r1, ...)


def _raw(path: str) -> str:
    """The column holding the path's JSON text (NULL where the path is absent)."""
    return f"__r{_PATHS.index(path)}"


def _unquoted(r: str) -> str:
    """json_extract_string of a JSON text; a string without escapes is cut, not parsed."""
    return (
        f"(CASE WHEN starts_with({r}, '\"') AND NOT contains({r}, '\\') THEN {r}[2:-2] "
        f"ELSE json_extract_string({r}, '$') END)"
    )


def _str(path: str) -> str:
    """json_extract_string of the path, as the query columns were always read."""
    return _unquoted(_raw(path))


# -- the frontier columns in SQL ---------------------------------------------------------


def _is_object(r: str) -> str:
    return f"coalesce(starts_with({r}, '{{'), false)"


def _absent(r: str) -> str:
    return f"({r} IS NULL OR {r} = 'null')"


def _truthy(r: str) -> str:
    return f"""coalesce({r} NOT IN ('false', 'null', '0', '""', '[]', '{{}}'), false)"""


def _int(r: str) -> str:
    return f"TRY_CAST({r} AS BIGINT)"


def _string(r: str) -> str:
    return f"""(CASE WHEN starts_with({r}, '"') THEN {_unquoted(r)} END)"""


def _window(phase: str, field: str) -> str:
    """The column holding the JSON text of a field of the phase's window."""
    return f"__w_{phase}_{field}"


def _phase_flags() -> list[tuple[str, str]]:
    """Per counted phase: did its window run (`ran_P`), and did its read succeed (`ok_P`)."""
    flags: list[tuple[str, str]] = []
    for p in COUNTED_PHASES:
        ran = _is_object(_raw(f"$.body.energy.{p}"))
        ok = (
            f"({ran} AND NOT coalesce({_window(p, 'valid')} = 'false', false) "
            f"AND NOT {_absent(_window(p, 'gross_mj'))} "
            f"AND NOT {_absent(_window(p, 'marginal_mj'))})"
        )
        flags += [(f"ran_{p}", ran), (f"ok_{p}", ok)]
    return flags


def _frontier_exprs() -> list[tuple[str, str]]:
    """Each frontier column over `__j` and the phase flags, before the kind filter."""

    def total(term: Callable[[str], str]) -> str:
        return " + ".join(f"(CASE WHEN {term(p)} ELSE 0 END)" for p in COUNTED_PHASES)

    def counted(field: str) -> str:
        return total(lambda p: f"ok_{p} THEN {_int(_window(p, field))}")

    def wall(p: str) -> str:
        return f"ran_{p} THEN coalesce({_int(_window(p, 'wall_ms'))}, 0)"

    def reliable(p: str) -> str:
        return f"ok_{p} AND {_truthy(_window(p, 'reliable'))} THEN 1"

    audit = _raw("$.body.audit")
    return [
        ("agent", _string(_raw("$.body.agent"))),
        ("claimed_usd_micros", f"coalesce({_int(_raw('$.body.claimed.usd_micros'))}, 0)"),
        ("claimed_joules_mj", f"coalesce({_int(_raw('$.body.claimed.joules_mj'))}, 0)"),
        ("audit_flagged", f"coalesce(starts_with({audit}, '[') AND {audit} <> '[]', false)"),
        ("counted_gross_mj", counted("gross_mj")),
        ("counted_marginal_mj", counted("marginal_mj")),
        ("counted_wall_ms", total(wall)),
        ("counted_windows", total(lambda p: f"ran_{p} THEN 1")),
        ("reliable_windows", total(reliable)),
        ("invalid_windows", total(lambda p: f"ran_{p} AND NOT ok_{p} THEN 1")),
        *(
            (
                f"{p}_source",
                f"(CASE WHEN ran_{p} THEN coalesce({_string(_window(p, 'source'))}, '') END)",
            )
            for p in COUNTED_PHASES
        ),
        ("integrity_level", _string(_raw("$.body.integrity.level"))),
    ]


def _derived(kind: str) -> list[tuple[str, str]]:
    """(column, SQL) for every column, reading `__j`, the phase flags and `kind`."""
    kinds = ", ".join(f"'{k}'" for k in INDEXED_KINDS)
    out: list[tuple[str, str]] = []
    for name, sql_type in QUERY_COLUMNS:
        value = _str(f"$.body.{name}")
        if sql_type != "VARCHAR":
            value = f"TRY_CAST({value} AS {sql_type})"
        out.append((name, f"(CASE WHEN {kind} IN ({kinds}) THEN {value} END)"))
    types = dict(FRONTIER_COLUMNS)
    for name, expr in _frontier_exprs():
        out.append((name, f"(CASE WHEN {kind} = 'result' THEN ({expr})::{types[name]} END)"))
    return out


def _parsed(source: str, payload_text: str, keep: str) -> str:
    """`source` with its payload's JSON texts and phase flags beside the columns in `keep`."""
    paths = ", ".join(f"'{p}'" for p in _PATHS)
    flags = ", ".join(f"{sql} AS {name}" for name, sql in _phase_flags())
    inner = (
        f"SELECT {keep}, json_extract({payload_text}, [{paths}])::VARCHAR[] AS {_J} FROM {source}"
    )
    # Each text gets its own column once: expressions then read columns, not list elements.
    texts = ", ".join(f"{_J}[{i + 1}] AS __r{i}" for i in range(len(_PATHS)))
    rows = f"SELECT * EXCLUDE ({_J}), {texts} FROM ({inner})"
    fields = ", ".join(f"'$.{f}'" for f in _WINDOW_FIELDS)
    windows = ", ".join(
        f"json_extract({_raw(f'$.body.energy.{p}')}, [{fields}])::VARCHAR[] AS __w_{p}"
        for p in COUNTED_PHASES
    )
    rows = f"SELECT *, {windows} FROM ({rows})"
    split = ", ".join(
        f"__w_{p}[{i + 1}] AS {_window(p, f)}"
        for p in COUNTED_PHASES
        for i, f in enumerate(_WINDOW_FIELDS)
    )
    dropped = ", ".join(f"__w_{p}" for p in COUNTED_PHASES)
    rows = f"SELECT * EXCLUDE ({dropped}), {split} FROM ({rows})"
    return f"SELECT *, {flags} FROM ({rows})"


def derived_select(source: str, payload_text: str, keep: str) -> str:
    """SELECT `keep`, then `kind`, `time` and every column, all derived from the payload."""
    kind = _str("$.kind")
    exprs = ", ".join(f"{sql} AS {name}" for name, sql in _derived("__kind"))
    return (
        f"SELECT {keep}, __kind AS kind, {_str('$.time')} AS time, {exprs} "
        f"FROM (SELECT *, {kind} AS __kind FROM ({_parsed(source, payload_text, keep)}))"
    )


def mismatch_sql(table: str, payload_text: str, present: Sequence[str] = ALL_NAMES) -> str:
    """SQL returning (seq, columns) for the first row whose stored columns disagree with its
    payload: `columns` names the disagreeing ones, `kind` included, in name order, joined
    with commas.

    `present` names the columns the table has (an older snapshot lacks the frontier ones).
    """
    checked = [(n, sql) for n, sql in _derived("__kind") if n in present]
    keep = ", ".join(["seq", "kind", *(f'"{n}"' for n, _ in checked)])
    differs = [("kind", "kind IS DISTINCT FROM __kind")] + [
        (n, f'"{n}" IS DISTINCT FROM {sql}') for n, sql in checked
    ]
    names = ", ".join(f"CASE WHEN {cond} THEN '{n}' END" for n, cond in sorted(differs))
    rows = f"SELECT *, {_str('$.kind')} AS __kind FROM ({_parsed(table, payload_text, keep)})"
    return (
        f"SELECT seq, concat_ws(',', {names}) AS cols FROM ({rows}) "
        f"WHERE {' OR '.join(cond for _, cond in differs)} ORDER BY seq LIMIT 1"
    )


# -- appends: the query columns stored with each entry -------------------------------


def query_values(kind: str, body: dict[str, Any]) -> list[Any]:
    if kind not in INDEXED_KINDS:
        return [None] * len(QUERY_COLUMNS)
    return [body.get(name) for name in NAMES]
