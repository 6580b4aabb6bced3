"""The bounds on everything a client sends, checked before anything is signed.

Every name that reaches a signed entry, a table or a terminal is short, printable
ASCII from a small alphabet (no spaces, no control characters); every number
fits the ledger's canonical JSON (integers below 2**53).
"""

from __future__ import annotations

import re

from jouled.errors import UsageError
from jouled.ledger.canonical import MAX_SAFE_INTEGER

NAME_MAX = 128
KEY_MAX = 256
TASK_ID_MAX = 256
# Rollout indices per (run, task): best-of-k curves are read over them, so an index is
# the one number an agent sends that sizes what every reader of best-of-k pays for.
ROLLOUT_MAX = 10_000
CALIBRATE_MAX_S = 600
SWEBENCH_RECORDS_MAX = 10_000

_ALPHABET = r"A-Za-z0-9._:/@+=-"
NAME_RE = re.compile(rf"[A-Za-z0-9][{_ALPHABET}]*")


def shown(value: str) -> str:
    """A value as an error message may quote it: short, escaped."""
    return repr(value[:40] + ("..." if len(value) > 40 else ""))


def name(what: str, value: str, *, max_len: int = NAME_MAX, empty: bool = False) -> str:
    """A solver, model, agent, run id, suite or key: `[A-Za-z0-9][A-Za-z0-9._:/@+=-]*`."""
    if value == "" and empty:
        return value
    if len(value) > max_len:
        raise UsageError(
            f"{what} is {len(value)} characters long; the limit is {max_len}",
            hint=f"use a shorter {what}",
        )
    if not NAME_RE.fullmatch(value):
        raise UsageError(
            f"{what} {shown(value)} is not a valid name",
            hint=f"a {what} starts with a letter or digit and holds only letters, digits "
            "and . _ : / @ + = - (no spaces or control characters)",
        )
    return value


def task_id(value: str) -> str:
    if not value:
        raise UsageError("no task id given", hint="name a task as SUITE/NAME (`jb-client tasks`)")
    return name("task id", value, max_len=TASK_ID_MAX)


def rollout_index(value: int) -> int:
    """A rollout index: 0 to ROLLOUT_MAX."""
    if not 0 <= value <= ROLLOUT_MAX:
        raise UsageError(
            f"rollout {value} is out of range: rollout indices run from 0 to {ROLLOUT_MAX:,}",
            hint=f"number a task's rollouts 0, 1, 2, ...; at most {ROLLOUT_MAX + 1:,} of them "
            "are told apart",
        )
    return value


def integer(what: str, value: int, *, low: int = 0, high: int = MAX_SAFE_INTEGER) -> int:
    if not low <= value <= high:
        raise UsageError(
            f"{what} {value} is out of range",
            hint=f"{what} must be between {low} and {high}",
        )
    return value


def attempt_request(
    task: str,
    solver: str,
    *,
    model: str = "",
    agent: str = "",
    run_id: str = "",
    rollout: int = 0,
    idempotency_key: str = "",
) -> None:
    """The bounds of one attempt's request, wherever it comes from.

    `Submit` and `RunSolver` check them before an attempt is accepted; the
    attempt journal checks what it replays at start against the same bounds
    before an abort is signed from it.
    """
    task_id(task)
    name("solver", solver)
    name("model", model, empty=True)
    name("agent", agent, empty=True)
    name("run id", run_id, empty=True)
    name("idempotency key", idempotency_key, max_len=KEY_MAX, empty=True)
    rollout_index(rollout)
