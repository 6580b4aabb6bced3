"""What `jb_client.Client` returns: typed documents, each with `.to_dict()` for the raw form.

They are `jouled.documents`' classes where the daemon has one (`Receipt`,
`OpReceipt`, `FrontierRow`, `CalibrationBody`, and the answers in
`jouled.documents.answers`: `BestOfKRow`, `Checkpoint`, `MeterStatus`,
`Registration`, `Logs`, `PublicKeys`), and small ones of the same kind
for the other answers (`TaskInfo`, built from the protobuf message, is in
`jb_client.taskinfo`); `FleetFrontier` and `FleetExport` are what `jb_client.fleet`
returns for a fleet. Every field is read and checked when the answer arrives;
`to_dict()` gives back exactly the JSON object the daemon sent (the one
`jb-client ... --json` prints), unknown fields included. Energy figures are in
joules, as floats, through `Energy` (`receipt.joules["grade"].gross_j`); the raw
form keeps the wire's millijoules.

`doc["key"]` reads the raw form too (`doc.to_dict()["key"]`), for callers written
against the dicts this API used to return; it is typed `Any`, the attributes are
the typed way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from jb_client.taskinfo import TaskInfo

from jouled.documents import answers, bodies, sent
from jouled.documents.answers import BestOfKRow, PublicKey, SkippedRecord
from jouled.documents.base import Document
from jouled.documents.parts import Energy
from jouled.documents.sent import FrontierRow
from jouled.documents.vocabulary import Status

__all__ = [
    "BestOfK",
    "BestOfKRow",
    "Calibration",
    "Checkpoint",
    "ConsistencyProof",
    "Energy",
    "ExportSummary",
    "FleetDuplicate",
    "FleetExport",
    "FleetFrontier",
    "FleetHost",
    "FleetRow",
    "Frontier",
    "FrontierRow",
    "HostCheckpoint",
    "InclusionProof",
    "Logs",
    "MeterStatus",
    "OpReceipt",
    "PublicKey",
    "PublicKeys",
    "Receipt",
    "Registration",
    "SkippedRecord",
    "Status",
    "TaskInfo",
    "Unreachable",
]


class Answer(Document):
    """A document the client returns: its raw form also read by JSON key."""

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.to_dict()

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)


class Receipt(sent.Receipt, Answer):
    """A graded attempt's receipt (docs/ledger.md, Receipts); `joules` per phase."""


class OpReceipt(sent.OpReceipt, Answer):
    """An op window's signed entry with its proof (docs/protocol.md, CloseWindow)."""


@dataclass(kw_only=True)
class Frontier(Answer):
    """Every row of the frontier (docs/protocol.md, Frontier), all pages read."""

    NAME: ClassVar[str] = "frontier"

    rows: list[FrontierRow]
    rows_total: int | None = None
    version: int | None = None


@dataclass(kw_only=True)
class BestOfK(Answer):
    """Every best-of-k row, all pages read."""

    NAME: ClassVar[str] = "best-of-k"

    rows: list[BestOfKRow]
    rows_total: int | None = None
    version: int | None = None


class Checkpoint(answers.Checkpoint, Answer):
    """The latest signed checkpoint (docs/ledger.md, Checkpoints)."""


@dataclass(kw_only=True)
class InclusionProof(Answer):
    NAME: ClassVar[str] = "inclusion proof"

    seq: int
    leaf_hash: str
    tree_size: int
    root: str
    hashes: list[str]


@dataclass(kw_only=True)
class ConsistencyProof(Answer):
    NAME: ClassVar[str] = "consistency proof"

    old_size: int
    new_size: int
    old_root: str
    new_root: str
    hashes: list[str]


class MeterStatus(answers.MeterStatus, Answer):
    """What the daemon meters with (docs/protocol.md, MeterStatus)."""


@dataclass(kw_only=True)
class Calibration(bodies.CalibrationBody, Answer):
    """A new idle calibration, as signed in its `calibration` entry, with its seq."""

    NAME: ClassVar[str] = "calibration"

    seq: int
    time: str


class Registration(answers.Registration, Answer):
    """What RegisterSwebench registered, and what it skipped and why."""


class Logs(answers.Logs, Answer):
    """A result's captured runs and its full failing and missing test ids (GetLogs)."""


class PublicKeys(answers.PublicKeys, Answer):
    """The daemon's signing keys (docs/protocol.md, PublicKeys)."""


@dataclass(kw_only=True)
class ExportSummary(Answer):
    """The files `Client.export` wrote."""

    NAME: ClassVar[str] = "export"

    out: str
    entries: int
    checkpoints: int
    checkpoint_history: str
    parquet: str


@dataclass(kw_only=True)
class FleetRow(Document):
    """One row of a fleet's frontier (`jb_client.fleet`): a host's own frontier row, `host`
    its name, or one merged across the hosts, `host` "*" and `hosts` the hosts it spans.

    A merged row's metered columns (`joules_total`, `joules_per_resolved`, ...) are null
    where its hosts' meters differ (`comparable` false, each host's source in
    `energy_sources`): energy from different meters is never summed. The row's other
    columns are a frontier row's (`FrontierRow`), kept as sent.
    """

    NAME: ClassVar[str] = "fleet frontier row"

    host: str
    suite: str
    solver: str
    model: str
    attempts: int
    resolved: int
    resolution: float
    joules_total: float | None
    joules_per_resolved: float | None
    energy_source: str
    reliable_share: float | None
    pareto: bool | None = None
    hosts: list[str] | None = None
    comparable: bool | None = None
    energy_sources: dict[str, str] | None = None


@dataclass(kw_only=True)
class FleetDuplicate(Document):
    """An attempt with a result on more than one host, counted once: on `counted_on`."""

    NAME: ClassVar[str] = "fleet duplicate"

    host: str
    counted_on: str
    task_id: str
    idempotency_key: str


@dataclass(kw_only=True)
class HostCheckpoint(Document):
    """A host's newest checkpoint in its verified export: size, root (hex), and the note."""

    NAME: ClassVar[str] = "host checkpoint"

    size: int
    root: str
    note: str | None = None


@dataclass(kw_only=True)
class FleetHost(Document):
    """A host whose export was verified against its pinned keys; `file`, in a fleet
    export's manifest, is its export's path in the export's directory."""

    NAME: ClassVar[str] = "fleet host"

    host: str
    target: str
    file: str | None = None
    keyids: list[str]
    origin: str
    entries: int
    checkpoint: HostCheckpoint


@dataclass(kw_only=True)
class Unreachable(Document):
    """A host left out of a fleet's answer, and why."""

    NAME: ClassVar[str] = "unreachable host"

    host: str
    reason: str


@dataclass(kw_only=True)
class FleetFrontier(Answer):
    """A fleet's frontier: a row per host, the rows merged across hosts (`summary`), the
    attempts counted once, and the hosts merged and left out."""

    NAME: ClassVar[str] = "fleet frontier"

    rows: list[FleetRow]
    summary: list[FleetRow]
    duplicates: list[FleetDuplicate]
    hosts: list[FleetHost]
    unreachable: list[Unreachable]


@dataclass(kw_only=True)
class FleetExport(Answer):
    """A fleet export's manifest: each host's verified export, and the hosts left out."""

    NAME: ClassVar[str] = "fleet export"

    format: str
    hosts: list[FleetHost]
    unreachable: list[Unreachable]
