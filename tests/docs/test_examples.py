"""Every example in docs/ runs, or matches what the daemon really writes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from jouled.ledger import canonical
from tests.docs.blocks import Block, blocks, pages
from tests.docs.conftest import Real
from tests.docs.shapes import differences
from tests.docs.vectors import entries_vector
from tests.integration.conftest import Daemon

PAGES = pages()
ALL = [b for page in PAGES for b in blocks(page)]


def _id(page: Path) -> str:
    return page.name


def test_every_block_says_what_it_is() -> None:
    unmarked = [b.where for b in ALL if not b.marker]
    assert not unmarked, f"fenced blocks without an example/not-run marker: {unmarked}"
    known = {"python", "sh", "json"}
    odd = [b.where for b in ALL if b.marker == "example" and b.args[:1] and b.args[0] not in known]
    assert not odd, f"examples of an unknown kind: {odd}"


def _run(block: Block, workdir: Path, daemon: Daemon) -> None:
    env = {
        **os.environ,
        "JB_TARGET": daemon.target,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    script = workdir / f"example-{block.line}"
    script.write_text(block.text)
    argv = (
        [sys.executable, str(script)]
        if block.args[0] == "python"
        else ["bash", "-euo", "pipefail", str(script)]
    )
    done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (
        f"the example at {block.where} failed (exit {done.returncode}):\n"
        f"{done.stdout}\n{done.stderr}"
    )


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_runnable_examples(page: Path, workdir: Path, docs_daemon: Daemon) -> None:
    """A page's python and sh examples, in order, in one directory, against a live daemon."""
    for block in blocks(page):
        if block.marker == "example" and block.args[0] in ("python", "sh"):
            _run(block, workdir, docs_daemon)


def _json(block: Block) -> Any:
    try:
        return json.loads(block.text)
    except ValueError as err:
        pytest.fail(f"the example at {block.where} is not JSON: {err}")


def _real_for(block: Block, real: Real) -> Any:
    what = block.args[1]
    if what == "payload":
        return real.payloads[block.args[2]]
    if what == "export-line":
        return real.export_line
    if what == "receipt":
        return real.receipt
    raise AssertionError(f"{block.where}: unknown JSON example {what!r}")


SHAPED = [b for b in ALL if b.marker == "example" and b.args[:1] == ("json",)]
SHAPED = [b for b in SHAPED if b.args[1] != "vector"]


@pytest.mark.parametrize("block", SHAPED, ids=lambda b: f"{b.where}:{'-'.join(b.args[1:])}")
def test_json_examples_have_the_shape_the_daemon_writes(block: Block, real: Real) -> None:
    found = differences(_json(block), _real_for(block, real))
    assert not found, f"the example at {block.where} departs from the daemon's:\n" + "\n".join(
        found
    )


def _vector(kind: str) -> dict[str, Any]:
    [block] = [b for b in ALL if b.marker == "example" and b.args[1:] == ("vector", kind)]
    value = _json(block)
    assert isinstance(value, dict)
    return value


def test_the_canonical_json_vector() -> None:
    vector = _vector("canonical")
    for pair in vector["pairs"]:
        assert canonical.dumps(pair["value"]) == pair["canonical"]
    for value in vector["refused"]:
        with pytest.raises(canonical.CanonicalError):
            canonical.dumps(value)


def test_the_worked_example_is_what_the_daemon_computes() -> None:
    assert _vector("entries") == entries_vector()


def test_the_worked_example_checks_out_without_jouled() -> None:
    """The vector's values follow from the page's rules alone: hashlib and an Ed25519 library."""
    vector = _vector("entries")
    key = serialization.load_pem_public_key(vector["public_key_pem"].encode())
    assert isinstance(key, Ed25519PublicKey)
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert base64.b64encode(raw).decode() == vector["public_key_raw"]
    assert hashlib.sha256(raw).hexdigest() == vector["keyid"]
    prev = ""
    leaves = []
    for seq, entry in enumerate(vector["entries"]):
        payload = entry["payload_text"].encode()
        line = entry["export_line"]
        assert base64.b64decode(line["payload"]) == payload and line["seq"] == seq
        doc = json.loads(payload)
        assert doc["seq"] == seq and doc["prev"] == prev
        t = line["payloadType"].encode()
        pae = b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)
        assert pae == entry["pae_text"].encode()
        [sig] = line["signatures"]
        assert sig["keyid"] == vector["keyid"]
        key.verify(base64.b64decode(sig["sig"]), pae)
        leaf = hashlib.sha256(b"\x00" + payload).digest()
        assert leaf.hex() == entry["leaf_hash"] == line["leaf_hash"]
        leaves.append(leaf)
        prev = leaf.hex()
    root = hashlib.sha256(b"\x01" + leaves[0] + leaves[1]).digest()
    assert root.hex() == vector["root"]
    assert vector["inclusion_proof_of_seq_1"] == [leaves[0].hex()]
    text, _, sigs = vector["checkpoint_note"].partition("\n\n")
    origin, size, root_b64 = text.split("\n")
    assert int(size) == vector["tree_size"] and base64.b64decode(root_b64) == root
    name, blob = sigs.strip("\n").removeprefix("\u2014 ").split(" ")
    assert name == origin
    raw_sig = base64.b64decode(blob)
    assert raw_sig[:4] == hashlib.sha256(name.encode() + b"\n\x01" + raw).digest()[:4]
    key.verify(raw_sig[4:], (text + "\n").encode())
