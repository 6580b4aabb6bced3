"""What `jb_client.fleet` returns for a fleet: its frontier and its export's manifest.

Kept apart from `jb_client.documents` so that a command for one daemon never
builds them. Like those, every field is read and checked as the answer is
made, and `to_dict()` gives back the JSON object (`jb-client ... --json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jb_client.documents import Answer

from jouled.documents.base import Document

__all__ = [
    "FleetDuplicate",
    "FleetExport",
    "FleetFrontier",
    "FleetHost",
    "FleetRow",
    "HostCheckpoint",
    "Unreachable",
]


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
