"""The daemon's answers that are not ledger documents: what a query returns.

Declared once, here: the daemon builds each answer through its class, and the
client (`jb_client.documents`) parses the same class back (docs/protocol.md
names each). Signed documents (bodies, receipts, the export line) and the
frontier row live in `jouled.documents.bodies` and `jouled.documents.sent`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from jouled.documents.base import Document
from jouled.documents.vocabulary import Status


@dataclass(kw_only=True)
class BestOfKRow(Document):
    """One k of one (suite, solver, model, revision) (docs/protocol.md, BestOfK)."""

    NAME: ClassVar[str] = "best-of-k row"
    NULL: ClassVar[frozenset[str]] = frozenset({"revision", "usd_cumulative", "pass_at_k"})

    suite: str
    solver: str
    model: str
    revision: int | None = None
    digest_set: str
    k: int
    tasks: int
    attempts: int
    resolved_within_k: int
    resolution_within_k: float
    selected_resolved: int
    selected_resolution: float
    joules_cumulative: float
    invalid_windows: int
    tampered: int
    usd_cumulative: float | None = None
    usd_source: str
    pass_at_k: float | None = None
    pass_at_k_tasks: int


@dataclass(kw_only=True)
class Checkpoint(Document):
    """The latest signed checkpoint (docs/ledger.md, Checkpoints)."""

    NAME: ClassVar[str] = "checkpoint"

    size: int
    root: str  # hex
    origin: str
    note: str  # the signed note


@dataclass(kw_only=True)
class MeterStatus(Document):
    """What the daemon meters with (docs/protocol.md, MeterStatus)."""

    NAME: ClassVar[str] = "meter status"
    NULL: ClassVar[frozenset[str]] = frozenset({"calibration"})

    source: str
    measured: bool | None = None
    policy: str | None = None
    domains: Any = None  # per meter: RAPL's zones, NVML's GPUs, the estimator's model
    calibration: dict[str, Any] | None = None


@dataclass(kw_only=True)
class SkippedRecord(Document):
    NAME: ClassVar[str] = "skipped record"

    instance_id: str
    reason: str
    code: str | None = None


@dataclass(kw_only=True)
class Registration(Document):
    """What RegisterSwebench registered, and what it skipped and why."""

    NAME: ClassVar[str] = "registration"

    registered: list[str]
    skipped: list[SkippedRecord]


@dataclass(kw_only=True)
class Logs(Document):
    """A result's captured runs and its full failing and missing test ids (GetLogs)."""

    NAME: ClassVar[str] = "logs"

    seq: int
    task_id: str
    status: Status
    runs: dict[str, dict[str, Any]]
    attempt_id: str | None = None
    max_bytes: int | None = None
    tests_failed: dict[str, Any] | None = None
    tests_missing: dict[str, Any] | None = None
    withheld: str | None = None


@dataclass(kw_only=True)
class PublicKey(Document):
    NAME: ClassVar[str] = "public key"

    keyid: str
    status: str
    pem: str


@dataclass(kw_only=True)
class PublicKeys(Document):
    NAME: ClassVar[str] = "public keys"

    origin: str
    keys: list[PublicKey]
