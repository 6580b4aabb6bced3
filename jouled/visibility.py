"""What each caller sees of a result: whose it is, and what hidden tests keep back.

- Operators, auditors and in-process callers (no identity) see every result whole.
- An agent-role caller sees only the results its credential submitted: a result
  belongs to the credential named by its signed `agent`. Any other result is
  PERMISSION_DENIED (the frontier and best-of-k stay public aggregates).
- Of a result whose runs included hidden tests, an agent sees the verdict, the
  counts and the ids of its failing *visible* tests, nothing else that came out
  of a run: no output, no exit codes or byte counts, no hidden test id, and not
  the signed entry (its payload lists the failing ids, hidden ones included).
  The same holds for the progress messages of its own Submit, and a task's
  listing names no expected test id in a hidden file. What is signed and
  hashed does not change; only what an agent is sent does.

Which results count as having run hidden tests is decided from the task the
daemon serves now: one whose digest is the result's and that names no hidden
files did not; any other (a task no longer served, or a version of it the
daemon no longer holds) is treated as if it did, since nothing says otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jouled.auth import AUDITOR, OPERATOR, Identity
from jouled.contracts import Contract
from jouled.documents.sent import Receipt
from jouled.errors import DeniedError

# Said in every answer an agent gets with something withheld.
WITHHELD = (
    "hidden tests ran in this result's runs: agents get its verdict, counts and failing "
    "visible test ids; its output, exit codes, hidden test ids and signed entry are "
    "withheld (an auditor or operator of the daemon sees them whole)"
)
# Progress phases whose messages never carry what a run printed or found.
_PLAIN_PHASES = frozenset({"queued", "heartbeat", "replay", "seed", "solve", "signed"})
_RUN_FIELDS = ("sha256", "kept_bytes", "dropped_bytes", "exit_code", "signal")


def sees_all(caller: Identity | None) -> bool:
    """Whether the caller reads every result whole (operators, auditors, the daemon itself)."""
    return caller is None or bool(caller.roles & {OPERATOR, AUDITOR})


def check_owner(caller: Identity | None, body: Mapping[str, Any], seq: int) -> None:
    """Refuse an agent another credential's result."""
    if sees_all(caller):
        return
    assert caller is not None
    if str(body.get("agent") or "") != caller.name:
        raise DeniedError(
            f"entry {seq} is a result of another credential: {caller.name} (agent) reads "
            "only its own results",
            hint="ask for your own results (jb-client receipt --key K, or the seq your "
            "submit returned); the frontier and best-of-k are public aggregates",
        )


@dataclass(frozen=True)
class Secrecy:
    """What hidden tests keep from an agent in one result."""

    hidden: bool  # hidden tests ran (or may have) in the result's runs
    contract: Contract | None  # the task at the result's digest; None when not held

    @classmethod
    def of(cls, contract: Contract | None, body: Mapping[str, Any]) -> Secrecy:
        if contract is None or body.get("task_digest") != contract.digest:
            return cls(True, None)
        return cls(bool(contract.hidden), contract)

    def visible(self, ids: Iterable[str]) -> list[str]:
        """The ids of `ids` in test files an agent was given (none when that is unknown)."""
        contract = self.contract
        if contract is None:
            return []
        out = []
        for test_id in ids:
            rel = str(test_id).split("::", 1)[0]
            if ".." in rel.split("/") or rel.startswith("/") or contract.is_hidden(rel):
                continue
            if (contract.pristine / rel).is_file():
                out.append(str(test_id))
        return out


def expected_ids(contract: Contract, ids: Iterable[str], caller: Identity | None) -> list[str]:
    """A task's expected test ids as `caller` may see them: none in a hidden file for agents."""
    if sees_all(caller) or not contract.hidden:
        return list(ids)
    return Secrecy(True, contract).visible(ids)


def receipt(document: Receipt, secrecy: Secrecy) -> Receipt:
    """An agent's view of a receipt: whole, or without what hidden tests keep back."""
    if not secrecy.hidden:
        return document
    return dataclasses.replace(
        document,
        entry=None,
        output_tail="",
        verdict=None,
        tests_failed=secrecy.visible(document.tests_failed),
        tests_missing=secrecy.visible(document.tests_missing),
        withheld=WITHHELD,
    )


def logs(document: dict[str, Any], secrecy: Secrecy) -> dict[str, Any]:
    """An agent's view of a GetLogs answer: whole, or counts and failing visible ids only."""
    if not secrecy.hidden:
        return document
    runs = {
        phase: {
            **{k: None for k in _RUN_FIELDS},
            "status": "withheld",
            "signed_status": run.get("signed_status"),
            "text": "",
            "clipped_bytes": 0,
        }
        for phase, run in document.get("runs", {}).items()
    }
    ids = {
        key: {
            "count": item["count"],
            "sha256": None,
            "status": item["status"],
            "ids": secrecy.visible(item["ids"]),
            "clipped": item["clipped"],
        }
        for key in ("tests_failed", "tests_missing")
        if (item := document.get(key)) is not None
    }
    return {**document, "runs": runs, **ids, "withheld": WITHHELD}


def progress_message(phase: str, message: str, hidden: bool) -> str:
    """A Submit progress message as an agent may see it."""
    if not hidden or phase in _PLAIN_PHASES:
        return message
    return f"{phase}: details withheld (hidden tests grade this task)"
