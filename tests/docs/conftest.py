"""One daemon for the docs' examples, and the real documents they are compared with."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jb_client.api import Client

from jouled.ledger.signing import Signer
from tests.integration.conftest import Daemon, start_daemon
from tests.ledger.test_store import open_ledger

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures" / "lrucache-fix.diff"
TASK = "smoke/lrucache"


@dataclass
class Real:
    """What the daemon really wrote: one payload of each kind, an export line, a receipt."""

    payloads: dict[str, dict[str, Any]]
    export_line: dict[str, Any]
    receipt: dict[str, Any]


@pytest.fixture(scope="session")
def docs_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("docs") / "data")
    yield d
    assert d.stop() == 0, d.log.read_text()


def payloads(lines: list[str]) -> dict[str, dict[str, Any]]:
    """The latest payload of each kind among export lines."""
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        doc = json.loads(base64.b64decode(json.loads(line)["payload"]))
        out[doc["kind"]] = doc
    return out


def rotation_payload(tmp: Path) -> dict[str, Any]:
    """A key_rotation payload, written by the store call `jouled keys rotate` makes."""
    ledger = open_ledger(tmp)
    try:
        return json.loads(ledger.rotate(Signer(Ed25519PrivateKey.generate()), 2).payload)
    finally:
        ledger.close()


@pytest.fixture(scope="session")
def real(docs_daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> Real:
    with Client(docs_daemon.target) as client:
        client.submit(TASK, FIX.read_bytes(), solver="docs/first")  # pays for the baseline
        receipt = client.submit(TASK, FIX.read_bytes(), solver="docs/second").to_dict()
        client.calibrate(1)
        lines = [v for kind, v in client.export_stream() if kind == "entry"]
    found = payloads(lines)
    found["key_rotation"] = rotation_payload(tmp_path_factory.mktemp("rotation"))
    return Real(found, json.loads(lines[receipt["seq"]]), receipt)


@pytest.fixture
def workdir(docs_daemon: Daemon, tmp_path: Path) -> Path:
    """The directory every page's examples run in: fix.diff and the daemon's jouled.pub."""
    shutil.copy(FIX, tmp_path / "fix.diff")
    shutil.copy(docs_daemon.pubkey, tmp_path / "jouled.pub")
    return tmp_path
