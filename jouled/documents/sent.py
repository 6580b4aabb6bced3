"""What the daemon sends: the export line, the receipts, the frontier row."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from jouled.documents.base import Document
from jouled.documents.bodies import OpBody, Payload, ResultBody
from jouled.documents.parts import Energy, EnergyWindow, GradeCounts, InclusionProof, Signature
from jouled.documents.vocabulary import EntryKind, Status
from jouled.errors import DocumentError


@dataclass(kw_only=True)
class ExportRecord(Document):
    """One export line (docs/ledger.md, Exports): the DSSE envelope with its seq and leaf hash.

    Lines written before the envelope used DSSE's own spelling say `payload_type`;
    such a line is read, and written again, with that spelling.
    """

    NAME: ClassVar[str] = "export line"

    seq: int
    payload: str  # base64 of the signed payload
    payload_type: str = field(metadata={"key": "payloadType"})
    signatures: list[Signature]
    leaf_hash: str
    # Read from a line that spelt the type `payload_type`: written back the same way.
    legacy_spelling: bool = field(default=False, init=False, repr=False, compare=False)

    @classmethod
    def _parse(cls, data: object, document: str, prefix: str) -> Self:
        if isinstance(data, Mapping) and "payloadType" not in data and "payload_type" in data:
            renamed = {("payloadType" if k == "payload_type" else k): v for k, v in data.items()}
            record = super()._parse(renamed, document, prefix)
            record.legacy_spelling = True
            return record
        return super()._parse(data, document, prefix)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.legacy_spelling:
            out = {("payload_type" if k == "payloadType" else k): v for k, v in out.items()}
        return out

    def payload_bytes(self) -> bytes:
        try:
            return base64.b64decode(self.payload, validate=True)
        except ValueError as err:
            raise DocumentError(
                f"is not base64: {err}", document=self.NAME, field="payload"
            ) from None

    def parsed_payload(self) -> Payload:
        """The payload's document, read (not verified: `jouled.ledger.verify` does that)."""
        try:
            data = json.loads(self.payload_bytes())
        except ValueError as err:
            raise DocumentError(
                f"is not JSON: {err}", document=self.NAME, field="payload"
            ) from None
        return Payload.parse(data, where=f"entry {self.seq}: payload")


@dataclass(kw_only=True)
class Receipt(Document):
    """Everything needed to check one result alone (docs/ledger.md, Receipts).

    Only `entry`, `proof` and `checkpoint` are worth trusting; the other fields
    are unsigned copies of the signed body, for convenience. An agent's receipt of
    a result graded with hidden tests has `entry` null and says why in `withheld`
    (`jouled.visibility`): its payload lists hidden test ids.
    """

    NAME: ClassVar[str] = "receipt"
    NULL: ClassVar[frozenset[str]] = frozenset({"verdict"})  # null: the payload has none

    seq: int
    task_id: str
    patch_sha256: str
    status: Status
    resolved: bool
    tests: GradeCounts
    energy: dict[str, EnergyWindow]
    solver: str
    audit: list[dict[str, Any]] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    leaf_hash: str
    replayed: bool = False
    tests_failed: list[str] = field(default_factory=list)
    tests_missing: list[str] = field(default_factory=list)
    output_tail: str = ""
    entry: ExportRecord | None  # null: withheld from this caller (see `withheld`)
    proof: InclusionProof
    checkpoint: str
    withheld: str | None = None  # what this caller is not sent, and why

    @property
    def joules(self) -> dict[str, Energy]:
        """Each phase's window (`grade`, `seed`, `apply`, `solve`, ...) in joules."""
        return {phase: Energy.of(window) for phase, window in self.energy.items()}

    @classmethod
    def of(
        cls,
        body: ResultBody,
        *,
        seq: int,
        leaf_hash: str,
        entry: ExportRecord,
        proof: InclusionProof,
        checkpoint: str,
        output_tail: str = "",
        replayed: bool = False,
    ) -> Receipt:
        """The receipt of a result entry: the body's routing fields copied beside its proof."""
        return cls(
            seq=seq,
            task_id=body.task_id,
            patch_sha256=body.patch_sha256,
            status=body.status,
            resolved=body.resolved,
            tests=body.tests,
            energy=body.energy,
            solver=body.solver,
            audit=body.audit or [],
            # Copied from the signed body: the contract's own verdict (SWE-bench's official).
            verdict=body.verdict,
            leaf_hash=leaf_hash,
            replayed=replayed,
            # Copied from the signed body: the first failing and missing test ids.
            tests_failed=body.tests_failed or [],
            tests_missing=body.tests_missing or [],
            # Not signed: the body signs the kept output's sha256 and size.
            output_tail=output_tail,
            entry=entry,
            proof=proof,
            checkpoint=checkpoint,
        )


@dataclass(kw_only=True)
class OpReceipt(Document):
    """An op entry with what checks it alone (docs/protocol.md, CloseWindow)."""

    NAME: ClassVar[str] = "op receipt"

    seq: int
    kind: EntryKind
    window_id: str
    label: str
    agent: str
    task_id: str
    run_id: str
    rollout: int
    energy: EnergyWindow
    end: str
    abandoned: bool
    leaf_hash: str
    entry: ExportRecord
    proof: InclusionProof
    checkpoint: str

    @property
    def joules(self) -> Energy:
        """The window's energy in joules."""
        return Energy.of(self.energy)

    @classmethod
    def of(
        cls,
        body: OpBody,
        *,
        seq: int,
        leaf_hash: str,
        entry: ExportRecord,
        proof: InclusionProof,
        checkpoint: str,
    ) -> OpReceipt:
        return cls(
            seq=seq,
            kind=EntryKind.OP,
            window_id=body.window_id,
            label=body.label,
            agent=body.agent,
            task_id=body.task_id,
            run_id=body.run_id,
            rollout=body.rollout,
            energy=body.energy,
            end=body.end,
            abandoned=body.abandoned,
            leaf_hash=leaf_hash,
            entry=entry,
            proof=proof,
            checkpoint=checkpoint,
        )


@dataclass(kw_only=True)
class FrontierRow(Document):
    """One (suite, solver, model, revision) of the frontier (docs/protocol.md, Frontier).

    `revision` is null on a row that pools a task's digests; `pareto` is null
    where the row gets no verdict on the axis, and both it and `pareto_axis`
    are set once the rows are compared. A fleet's rows also name their `host`.
    """

    NAME: ClassVar[str] = "frontier row"
    NULL: ClassVar[frozenset[str]] = frozenset(
        {
            "revision", "joules_per_resolved", "wall_median_s", "usd_total", "usd_per_resolved",
            "usd_claimed_share", "reliable_share", "op_reliable_share", "integrity",
        }
    )  # fmt: skip

    suite: str
    solver: str
    model: str
    revision: int | None = None
    digest_set: str
    merged_digests: int
    attempts: int
    tasks: int
    resolved: int
    resolution: float
    ci_low: float
    ci_high: float
    joules_total: float
    joules_marginal: float
    joules_per_resolved: float | None = None
    wall_median_s: float | None = None
    usd_total: float | None = None
    usd_per_resolved: float | None = None
    usd_claimed_share: float | None = None
    usd_source: str
    claimed_joules: float
    energy_source: str
    reliable_share: float | None = None
    invalid_windows: int
    invalid: int
    tampered: int
    audit_flagged: int
    integrity: str | None = None
    errors: int
    timeouts: int
    op_joules: float
    op_windows: int
    op_reliable_share: float | None = None
    op_abandoned: int
    pareto: bool | None = None
    pareto_axis: str | None = None
    host: str | None = None
