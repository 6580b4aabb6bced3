"""The wire documents and their vocabulary: statuses, test outcomes, entry kinds.

Every layer spells these the same way because they are declared once, here,
below the contracts and the pipeline. Members are `str` enums: they compare
equal to, and serialise as, the plain strings the ledger and the API carry.

The documents themselves (ledger entry bodies, the signed payload, the export
line, the receipt, the frontier row) are dataclasses with `parse`, which checks
a JSON object and names the first bad field, and `to_dict`, which gives back
exactly the object the daemon signs or sends. docs/ledger.md and
docs/protocol.md describe them; the tests hold their examples to these classes.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Self, TypedDict

from jouled.errors import DocumentError


class Status(StrEnum):
    """An attempt's verdict, as signed in a `result` body."""

    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    TIMEOUT = "timeout"
    ERROR = "error"  # the harness could not grade the attempt (not the solver's fault)
    INVALID = "invalid"  # the task cannot be graded as given (its baseline says why)
    TAMPERED = "tampered"  # the run forged or interfered with its own grading


STATUSES = frozenset(s.value for s in Status)

# How far a run's outcomes can be trusted against the code under test, weakest first
# (a result's `integrity.level`): "none", read from output the code writes; "reduced",
# the runner's authenticated report with checks made from inside the process (Python
# < 3.8); "monitor", the report kept and checked by an audit-hook integrity monitor
# (docs/threat-model.md).
INTEGRITY_LEVELS = ("none", "reduced", "monitor")


class Outcome(StrEnum):
    """One test id's outcome in one run."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"


# When one id is reported more than once (a failing call plus an erroring
# teardown), the worst outcome wins.
SEVERITY = {Outcome.PASSED: 0, Outcome.SKIPPED: 1, Outcome.FAILED: 2, Outcome.ERROR: 3}


class EntryKind(StrEnum):
    """The kind of a ledger entry; its body's schema follows from it."""

    GENESIS = "genesis"
    CALIBRATION = "calibration"
    BASELINE = "baseline"
    RESULT = "result"
    ABORT = "abort"
    KEY_ROTATION = "key_rotation"
    OP = "op"


ENTRY_KINDS = tuple(k.value for k in EntryKind)


# -- the documents ------------------------------------------------------------------------
#
# Each document is a dataclass over one JSON object. `parse` checks the object
# and names the first bad field; `to_dict` gives back the same object: a field
# absent from the parsed object stays absent, a field the class does not
# declare is kept verbatim in `extra`, and values are the JSON values as read.
# So a signed body parsed and serialised again has the same canonical bytes,
# and a body that a newer daemon extended keeps its new fields.


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


@dataclass(frozen=True)
class _Field:
    name: str  # the attribute
    key: str  # the JSON key
    hint: Any
    required: bool
    null: bool  # None is written as null rather than left out
    default: Any  # an optional field's default (from its factory, if it has one)


@dataclass(kw_only=True)
class Document:
    """Base of the wire documents: parse from a JSON object, serialise back to the same one."""

    NAME: ClassVar[str] = "document"
    # Optional fields written as null when None; the others are left out when None.
    NULL: ClassVar[frozenset[str]] = frozenset()

    # Fields this class does not declare (and declared optional ones read as null),
    # kept as read so that serialising gives back the same object.
    extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # Declared optional fields the parsed object did not have: serialising leaves them
    # out while they keep their default.
    absent: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def parse(cls, data: object, *, where: str = "") -> Self:
        """The document `data` holds; DocumentError names the first bad field."""
        return cls._parse(data, where or cls.NAME, "")

    @classmethod
    def _parse(cls, data: object, document: str, prefix: str) -> Self:
        if not isinstance(data, Mapping):
            raise DocumentError(
                f"must be a JSON object, not {_json_type(data)}",
                document=document,
                field=prefix.removesuffix("."),
            )
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        absent: set[str] = set()
        specs = _fields(cls)
        for spec in specs:
            path = prefix + spec.key
            if spec.key not in data:
                if spec.required:
                    raise DocumentError("is missing", document=document, field=path)
                absent.add(spec.key)
                continue
            value = data[spec.key]
            if value is None and not spec.required and not spec.null:
                extra[spec.key] = None  # kept as read; the typed field stays None
                continue
            values[spec.name] = _check(value, spec.hint, document, path)
        known = {s.key for s in specs}
        extra.update((k, v) for k, v in data.items() if k not in known)
        return cls(**values, extra=extra, absent=frozenset(absent))

    def set(self, key: str, value: Any) -> None:
        """Set a field by its JSON key: a declared one by attribute, any other in `extra`."""
        for spec in _fields(type(self)):
            if spec.key == key:
                setattr(self, spec.name, value)
                self.extra.pop(key, None)
                return
        self.extra[key] = value

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the parsed one again, or the one the daemon signs or sends."""
        out: dict[str, Any] = {}
        for spec in _fields(type(self)):
            value = getattr(self, spec.name)
            if spec.key in self.absent and value == spec.default:
                continue
            if value is None and not spec.required and not spec.null:
                continue
            out[spec.key] = _dump(value)
        out.update(self.extra)
        return out


_FIELDS: dict[type[Document], tuple[_Field, ...]] = {}


def _fields(cls: type[Document]) -> tuple[_Field, ...]:
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name in ("extra", "absent") or not f.init:
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None if f.default is dataclasses.MISSING else f.default
        out.append(
            _Field(
                name=f.name,
                key=f.metadata.get("key", f.name),
                hint=hints[f.name],
                required=required,
                null=f.name in cls.NULL,
                default=default,
            )
        )
    _FIELDS[cls] = tuple(out)
    return _FIELDS[cls]


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if hint in (int, float):
        return "a number"
    if hint is str:
        return "a string"
    if hint is bool:
        return "a boolean"
    if origin is list:
        return "an array"
    if origin is dict or typing.is_typeddict(hint) or hint is dict:
        return "an object"
    if isinstance(hint, type) and issubclass(hint, Document):
        return "an object"
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return "a string"
    return str(hint)


def _check(value: Any, hint: Any, document: str, path: str) -> Any:
    """`value` checked against `hint`: enums and nested documents built, the rest as read."""

    def wrong() -> DocumentError:
        return DocumentError(
            f"must be {_describe(hint)}, not {_json_type(value)}", document=document, field=path
        )

    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(hint)
        if value is None:
            if type(None) in args:
                return None
            raise wrong()
        others = [a for a in args if a is not type(None)]
        if len(others) == 1:
            return _check(value, others[0], document, path)
        for option in others:
            try:
                return _check(value, option, document, path)
            except DocumentError:
                continue
        raise wrong()
    if origin is list:
        if not isinstance(value, list):
            raise wrong()
        (item,) = typing.get_args(hint)
        return [_check(v, item, document, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise wrong()
        args = typing.get_args(hint)
        if not args or args[1] is Any:
            return value
        return {k: _check(v, args[1], document, f"{path}.{k}") for k, v in value.items()}
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            raise wrong()
        missing = sorted(hint.__required_keys__ - value.keys())
        if missing:
            raise DocumentError("is missing", document=document, field=f"{path}.{missing[0]}")
        hints = typing.get_type_hints(hint)
        for key, item in value.items():
            if key in hints:
                _check(item, hints[key], document, f"{path}.{key}")
        return value
    if isinstance(hint, type) and issubclass(hint, Document):
        return hint._parse(value, document, f"{path}.")
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        if not isinstance(value, str) or value not in hint._value2member_map_:
            raise DocumentError(
                f"{value!r} is not one of {', '.join(m.value for m in hint)}",
                document=document,
                field=path,
                hint="the document was written by a newer jouled; upgrade this one",
            )
        return hint(value)
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif hint is str:
        ok = isinstance(value, str)
    else:
        raise TypeError(f"documents cannot check {hint!r}")
    if not ok:
        raise wrong()
    return value


def _dump(value: Any) -> Any:
    if isinstance(value, Document):
        return value.to_dict()
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


# -- parts shared by several documents ------------------------------------------------------


class GradeCounts(TypedDict):
    """How many expected test ids passed, failed or were missing."""

    expected: int
    passed: int
    failed: int
    missing: int


class EnergyWindow(TypedDict, total=False):
    """One metered window (docs/ledger.md, `result`: `energy`); every key is optional."""

    gross_mj: int | None
    idle_mj: int | None
    marginal_mj: int | None
    wall_ms: int
    wall_us: int
    edge_us: int
    domains: dict[str, int | None]  # every one null in an invalid window
    source: str
    attribution: str
    valid: bool
    reliable: bool
    reasons: list[str]


def _joules(mj: int | None) -> float | None:
    return None if mj is None else mj / 1000


@dataclass(frozen=True)
class Energy:
    """One metered window in joules and seconds, as floats: an `EnergyWindow` read.

    A figure the window does not have (an invalid window's, one an older daemon
    did not write) is None. `to_dict()` is the window as signed, in millijoules.
    """

    gross_j: float | None
    idle_j: float | None
    marginal_j: float | None
    wall_s: float | None
    domains_j: dict[str, float | None]  # per-domain gross
    source: str
    attribution: str
    valid: bool
    reliable: bool
    reasons: list[str]
    window: EnergyWindow = field(repr=False, compare=False)

    @classmethod
    def of(cls, window: EnergyWindow) -> Energy:
        if "wall_us" in window:
            wall_s: float | None = window["wall_us"] / 1_000_000
        elif "wall_ms" in window:
            wall_s = window["wall_ms"] / 1000
        else:
            wall_s = None
        return cls(
            gross_j=_joules(window.get("gross_mj")),
            idle_j=_joules(window.get("idle_mj")),
            marginal_j=_joules(window.get("marginal_mj")),
            wall_s=wall_s,
            domains_j={k: _joules(v) for k, v in window.get("domains", {}).items()},
            source=window.get("source", ""),
            attribution=window.get("attribution", ""),
            valid=window.get("valid", True),
            reliable=window.get("reliable", False),
            reasons=list(window.get("reasons", [])),
            window=window,
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.window)


class Signature(TypedDict):
    keyid: str
    sig: str


class InclusionProof(TypedDict):
    seq: int
    leaf_hash: str
    tree_size: int
    root: str
    hashes: list[str]


# -- ledger entry bodies ----------------------------------------------------------------------


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


# -- what the daemon sends ---------------------------------------------------------------------


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
