"""The attempt journal's rows: authenticated when written, checked before anything is signed.

Before an attempt runs, the daemon writes a row to the ledger file's
`journal` table (attempt id, idempotency key, task id, when it was accepted,
and the request's solver, run id and rollout), so that a crash leaves a
trace; the next start signs an `abort` entry for every row no entry names.
The table lives in the data dir, which anyone who can write the data dir can
also write, so the rows are not trusted for being there:

- each row carries a MAC: HMAC-SHA256, keyed by a hash of the daemon's
  Ed25519 signature over a fixed text (as the column seal, `seal`, with a
  text of its own), over the row's five fields. Without the signing key
  nobody can make one;
- each field is read at most one character past its bound (an oversized
  value is refused by its length, never read whole), and the request's
  fields must meet the bounds of a request (`jouled.limits.attempt_request`).

A row is signed from only when both hold, its MAC by the current key or, after
a rotation, the retired one. Every other row is refused: `review` says why,
and the daemon reports it and removes it; nothing is signed from it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jouled import limits
from jouled.errors import UsageError
from jouled.ledger.signing import Signer

_KEY_TEXT = b"jouled attempt journal v1"

# What each field may hold, at most; the request holds a solver, a run id and a rollout.
ATTEMPT_ID_MAX = limits.NAME_MAX
ACCEPTED_MAX = 32
REQUEST_MAX = 1024
MAC_LEN = 64
_FIELDS = (
    ("attempt_id", ATTEMPT_ID_MAX),
    ("idempotency_key", limits.KEY_MAX),
    ("task_id", limits.TASK_ID_MAX),
    ("accepted", ACCEPTED_MAX),
    ("request", REQUEST_MAX),
    ("mac", MAC_LEN),
)
COLUMNS = tuple(name for name, _ in _FIELDS)
# Unfinished rows (no entry names their attempt), each field cut one character past
# its bound, with its full length beside it.
PENDING_SQL = (
    "SELECT rowid, "
    + ", ".join(f"left({n}::VARCHAR, {m + 1}), length({n}::VARCHAR)" for n, m in _FIELDS)
    + " FROM journal j WHERE NOT EXISTS "
    "(SELECT 1 FROM entries e WHERE e.attempt_id = j.attempt_id::VARCHAR) ORDER BY accepted"
)
ALL_SQL = PENDING_SQL.replace(
    " WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.attempt_id = j.attempt_id::VARCHAR)", ""
)


def mac_key(signer: Signer) -> bytes:
    """The journal's MAC key: deterministic, and out of reach without the signing key."""
    return hashlib.sha256(signer.sign_raw(_KEY_TEXT)).digest()


def mac(
    key: bytes,
    attempt_id: str,
    idempotency_key: str | None,
    task_id: str,
    accepted: str,
    request: str,
) -> str:
    """The row's MAC, over its five fields as one JSON array (no two rows read alike)."""
    message = json.dumps([attempt_id, idempotency_key, task_id, accepted, request])
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class PendingAttempt:
    """An accepted attempt no entry names, checked: an abort may be signed from it."""

    attempt_id: str
    idempotency_key: str | None
    task_id: str
    request: dict[str, Any]


@dataclass(frozen=True)
class RefusedRow:
    """A journal row nothing is signed from: where it is, what it claims (shown), and why."""

    rowid: int
    attempt_id: str  # as an error message quotes it: cut short, escaped
    task_id: str
    reason: str


@dataclass
class Review:
    pending: list[PendingAttempt] = field(default_factory=list)
    refused: list[RefusedRow] = field(default_factory=list)


def _shown(value: str | None) -> str:
    return "None" if value is None else limits.shown(value)


def check(row: Sequence[Any], keys: Sequence[bytes] | None) -> PendingAttempt | str:
    """A row of PENDING_SQL as an attempt, or why it is refused; `keys` None skips the MAC."""
    values: dict[str, str | None] = {}
    for i, (name, bound) in enumerate(_FIELDS):
        value, length = row[1 + 2 * i], row[2 + 2 * i]
        if length is not None and int(length) > bound:
            return f"its {name} is {int(length)} characters long; the limit is {bound}"
        values[name] = value
    attempt_id, key, task_id, accepted, request, tag = (values[n] for n in COLUMNS)
    if attempt_id is None or task_id is None or accepted is None or request is None:
        missing = [n for n in COLUMNS[:-1] if n != "idempotency_key" and values[n] is None]
        return f"its {missing[0]} is empty"
    try:
        fields = json.loads(request)
    except ValueError:
        return "its request is not JSON"
    if not isinstance(fields, dict):
        return "its request is not a JSON object"
    solver, run_id = fields.get("solver"), fields.get("run_id", "")
    rollout = fields.get("rollout", 0)
    if not isinstance(solver, str) or not isinstance(run_id, str):
        return "its request's solver and run id must be strings"
    if not isinstance(rollout, int) or isinstance(rollout, bool):
        return "its request's rollout must be an integer"
    try:
        limits.name("attempt id", attempt_id, max_len=ATTEMPT_ID_MAX)
        limits.attempt_request(
            task_id, solver, run_id=run_id, rollout=rollout, idempotency_key=key or ""
        )
    except UsageError as err:
        return err.message
    if keys is not None:
        if tag is None:
            return "it carries no MAC: this daemon did not write it"
        if not any(
            hmac.compare_digest(tag, mac(k, attempt_id, key, task_id, accepted, request))
            for k in keys
        ):
            return "its MAC does not verify with this daemon's key: this daemon did not write it"
    return PendingAttempt(attempt_id, key, task_id, fields)


def review(rows: Iterable[Sequence[Any]], keys: Sequence[bytes], finished: set[str]) -> Review:
    """Sort rows of PENDING_SQL into attempts to abort and refused rows."""
    out = Review()
    for row in rows:
        checked = check(row, keys)
        if isinstance(checked, PendingAttempt):
            if checked.attempt_id not in finished:
                out.pending.append(checked)
            continue
        attempt_id, task_id = row[1], row[5]
        out.refused.append(RefusedRow(int(row[0]), _shown(attempt_id), _shown(task_id), checked))
    return out
