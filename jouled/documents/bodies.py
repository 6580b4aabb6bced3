"""The ledger's documents: a body class per entry kind, and the signed payload that holds one."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from jouled.documents.base import Document
from jouled.documents.parts import EnergyWindow, GradeCounts
from jouled.documents.vocabulary import ENTRY_KINDS, EntryKind, Status
from jouled.errors import DocumentError


@dataclass(kw_only=True)
class GenesisBody(Document):
    NAME: ClassVar[str] = "genesis body"

    keyid: str
    origin: str
    public_key: str
    host: str | None = None
    version: str | None = None


@dataclass(kw_only=True)
class CalibrationBody(Document):
    NAME: ClassVar[str] = "calibration body"

    source: str
    seconds: int
    domains: dict[str, dict[str, int]]


@dataclass(kw_only=True)
class BaselineBody(Document):
    NAME: ClassVar[str] = "baseline body"
    NULL: ClassVar[frozenset[str]] = frozenset({"after"})

    task_id: str
    task_digest: str
    valid: bool
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    suite: str | None = None
    reason: str | None = None
    code: str | None = None  # "broken-environment": attempts on it are refused
    # Expected ids that skipped or xfailed in the baseline (absent from older baselines)
    skipped_before: list[str] | None = None
    evidence: str | None = None  # the baseline output's excerpt that shows why
    derived: bool | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None  # null: no reference run
    energy: dict[str, EnergyWindow] | None = None
    sandbox: str | None = None
    isolation: dict[str, Any] | None = None
    version: str | None = None


@dataclass(kw_only=True)
class ResultBody(Document):
    """A graded attempt (docs/ledger.md, `result`).

    The fields the receipt and the frontier rely on are required; the others are
    optional because results signed by older daemons lack some of them. A field
    added later that this class does not declare is kept in `extra`, so bodies
    that carry it still serialise to their signed bytes.
    """

    NAME: ClassVar[str] = "result body"

    task_id: str
    patch_sha256: str
    status: Status
    resolved: bool
    tests: GradeCounts
    energy: dict[str, EnergyWindow]
    solver: str
    suite: str | None = None
    task_digest: str | None = None
    tests_visible: dict[str, int] | None = None
    integrity: dict[str, Any] | None = None
    audit: list[dict[str, Any]] | None = None
    restored: list[str] | None = None
    output: dict[str, Any] | None = None
    logs: dict[str, dict[str, Any]] | None = None
    tests_failed: list[str] | None = None
    tests_missing: list[str] | None = None
    tests_failed_all: dict[str, Any] | None = None
    tests_missing_all: dict[str, Any] | None = None
    # The contract's own verdict beside the strict grading (SWE-bench's official one).
    verdict: dict[str, Any] | None = None
    model: str | None = None
    agent: str | None = None
    run_id: str | None = None
    rollout: int | None = None
    attempt_id: str | None = None
    idempotency_key: str | None = None
    claimed: dict[str, int] | None = None
    energy_total: dict[str, Any] | None = None
    sandbox: str | None = None
    isolation: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None
    solve: dict[str, Any] | None = None
    refused: str | None = None
    error: str | None = None
    version: str | None = None


@dataclass(kw_only=True)
class AbortBody(Document):
    NAME: ClassVar[str] = "abort body"

    task_id: str
    reason: str
    attempt_id: str | None = None
    idempotency_key: str | None = None
    suite: str | None = None
    solver: str | None = None
    version: str | None = None


@dataclass(kw_only=True)
class OpBody(Document):
    NAME: ClassVar[str] = "op body"

    window_id: str
    label: str
    agent: str
    task_id: str
    run_id: str
    rollout: int
    energy: EnergyWindow
    end: str
    abandoned: bool
    version: str | None = None


@dataclass(kw_only=True)
class KeyRotationBody(Document):
    NAME: ClassVar[str] = "key_rotation body"

    old_keyid: str
    old_public_key: str
    new_keyid: str
    new_public_key: str
    overlap_entries: int


Body = (
    GenesisBody | CalibrationBody | BaselineBody | ResultBody | AbortBody | OpBody | KeyRotationBody
)
BODIES: dict[EntryKind, type[Document]] = {
    EntryKind.GENESIS: GenesisBody,
    EntryKind.CALIBRATION: CalibrationBody,
    EntryKind.BASELINE: BaselineBody,
    EntryKind.RESULT: ResultBody,
    EntryKind.ABORT: AbortBody,
    EntryKind.OP: OpBody,
    EntryKind.KEY_ROTATION: KeyRotationBody,
}


def parse_body(kind: str, body: object, *, where: str = "") -> Body:
    """The typed body of an entry of `kind`."""
    try:
        cls = BODIES[EntryKind(kind)]
    except ValueError:
        raise DocumentError(
            f"{kind!r} is not one of {', '.join(ENTRY_KINDS)}",
            document=where or "entry",
            field="kind",
        ) from None
    return typing.cast(Body, cls.parse(body, where=where or f"{kind} body"))


@dataclass(kw_only=True)
class Payload(Document):
    """A ledger entry's signed payload: its place in the chain and its body."""

    NAME: ClassVar[str] = "payload"

    seq: int
    kind: EntryKind
    prev: str
    time: str
    body: dict[str, Any]

    def typed_body(self) -> Body:
        return parse_body(self.kind, self.body, where=f"entry {self.seq}: {self.kind} body")
