"""A Node.js client written from docs/ alone submits a patch and verifies its receipt.

The client (`node/client.mjs`) uses `@grpc/grpc-js`, `@grpc/proto-loader` and
Node's own crypto. Its dependencies are installed from the lockfile into
`node/node_modules` (npm's cache beside them, not in the home directory) on
first use. Without `node` and `npm`, or without a route to the npm registry
on first use, the test is skipped and says why.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jouled.ledger.audit import audit_receipt
from jouled.ledger.signing import load_public_key
from tests.docs.conftest import FIX, TASK
from tests.integration.conftest import Daemon

NODE_DIR = Path(__file__).resolve().parent / "node"
PROTO = NODE_DIR.parents[2] / "proto" / "jouled" / "v1" / "jouled.proto"
STAMP = NODE_DIR / "node_modules" / ".installed-lock-sha256"
NETWORK = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|"
    r"network|request to \S+ failed",
    re.I,
)


def _tools() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(n for n, p in (("node", node), ("npm", npm)) if p is None)
        pytest.skip(f"{missing} not found on PATH: the Node.js docs client needs Node.js 18+")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    major = int(version.stdout.strip().lstrip("v").split(".")[0])
    if major < 18:
        pytest.skip(f"node {version.stdout.strip()} is too old: the docs client needs 18+")
    return node, npm


def _install(npm: str) -> None:
    """`npm ci` once per lockfile, serialised between test processes by a file lock."""
    lock_hash = hashlib.sha256((NODE_DIR / "package-lock.json").read_bytes()).hexdigest()
    with (NODE_DIR / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if STAMP.is_file() and STAMP.read_text() == lock_hash:
            return
        done = subprocess.run(
            [
                npm,
                "ci",
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                "--prefer-offline",
                "--cache",
                str(NODE_DIR / ".npm-cache"),
            ],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "npm_config_update_notifier": "false"},
        )
        if done.returncode != 0:
            reason = NETWORK.search(done.stderr)
            if reason:
                line = next(x for x in done.stderr.splitlines() if reason.group() in x)
                pytest.skip(
                    "npm could not reach its registry to install the docs client's "
                    f"dependencies: {line.strip()}"
                )
            pytest.fail(f"npm ci failed:\n{done.stdout}\n{done.stderr}")
        STAMP.write_text(lock_hash)


@pytest.fixture(scope="module")
def node() -> str:
    node, npm = _tools()
    _install(npm)
    return node


def _client(node: str, *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [node, str(NODE_DIR / "client.mjs"), *args],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, f"the Node client printed nothing (exit {done.returncode}):\n{done.stderr}"
    return done.returncode, json.loads(lines[-1])


def test_the_node_client_submits_and_verifies(
    node: str, docs_daemon: Daemon, tmp_path: Path
) -> None:
    receipt_path = tmp_path / "receipt.json"
    rc, out = _client(
        node, "submit",
        "--target", docs_daemon.target,
        "--proto", str(PROTO),
        "--pubkey", str(docs_daemon.pubkey),
        "--task", TASK,
        "--patch", str(FIX),
        "--out", str(receipt_path),
    )  # fmt: skip
    assert rc == 0 and out["ok"], out
    assert out["status"] == "resolved" and out["phases"][-1] == "signed"
    receipt = json.loads(receipt_path.read_text())
    # What the Node client accepted, jouled's own auditor accepts.
    assert audit_receipt(receipt, [load_public_key(docs_daemon.pubkey)])["seq"] == out["seq"]

    # A receipt in the old spelling still verifies; an edited payload does not.
    entry = receipt["entry"]
    legacy = {
        **receipt,
        "entry": {
            **{k: v for k, v in entry.items() if k != "payloadType"},
            "payload_type": entry["payloadType"],
        },
    }
    doc = json.loads(base64.b64decode(entry["payload"]))
    doc["body"]["status"] = "unresolved"
    edited_payload = base64.b64encode(json.dumps(doc).encode()).decode()
    forged = {**receipt, "entry": {**entry, "payload": edited_payload}}
    for name, variant, want in (("legacy", legacy, 0), ("forged", forged, 1)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(variant))
        rc, out = _client(node, "verify", "--pubkey", str(docs_daemon.pubkey), str(path))
        assert rc == want, (name, out)
