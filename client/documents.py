"""What `jb_client.Client` returns: typed documents, each with `.to_dict()` for the raw form.

They are `jouled.documents`' classes where the daemon has one (`Receipt`,
`OpReceipt`, `FrontierRow`, `CalibrationBody`, and the answers in
`jouled.documents.answers`: `BestOfKRow`, `Checkpoint`, `MeterStatus`,
`Registration`, `Logs`, `PublicKeys`), and small ones of the same kind
for the other answers (`TaskInfo`, built from the protobuf message, is in
`jb_client.taskinfo`; a fleet's, `FleetFrontier` and `FleetExport`, are in
`jb_client.fleet_documents`). Every field is read and checked when the answer arrives;
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
    "Frontier",
    "FrontierRow",
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
