"""Three real daemons as one fleet: a suite spread across them, one killed mid-run.

Each daemon has its own data dir, key and ledger. The test kills one of them
right after its first receipt (on the run's own callback, before that host
takes its next attempt), so which attempts move is decided by the spread, not
by timing.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jb_client import fleet
from jb_client.api import Client
from jb_client.documents import Receipt

from jouled.errors import VerificationError
from tests.integration.conftest import TASKS, Daemon, start_daemon

SUITE = "fleet"
NAMES = ("lrucache", "interval", "semver", "permutation")  # four tasks over three hosts


@pytest.fixture
def tasks_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    for name in NAMES:
        shutil.copytree(TASKS / "smoke" / name, root / SUITE / name)
    return root


@pytest.fixture
def daemons(tmp_path: Path, tasks_dir: Path) -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    try:
        for name in ("a", "b", "c"):
            started.append(start_daemon(tmp_path / name, tasks=tasks_dir))
        yield started
    finally:
        for d in started:
            if d.proc.poll() is None:
                d.stop(signal.SIGKILL)


def pins(daemons: list[Daemon]) -> list[str]:
    return [a for d in daemons for a in ("--pin", f"{d.target}={d.pubkey}")]


def targets(daemons: list[Daemon]) -> list[str]:
    return [a for d in daemons for a in ("--target", d.target)]


def jb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jb_client", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def jb_json(*args: str) -> Any:
    done = jb(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_suite_spread_over_three_hosts_survives_losing_one(
    tmp_path: Path, tasks_dir: Path, daemons: list[Daemon]
) -> None:
    hosts = fleet.fleet_hosts([d.target for d in daemons], pins(daemons)[1::2])
    by_target = {d.target: d for d in daemons}
    units = fleet.units_of(
        [f"{SUITE}/{n}" for n in sorted(NAMES)], ["reference"], 1, "fleet-run", ""
    )
    home = Counter(fleet.assign(u.key, [h.name for h in hosts]) for u in units)
    victim, planned = home.most_common(1)[0]
    assert planned >= 2  # four attempts on three hosts: one host has two or more

    killed: list[str] = []

    def on_receipt(host: str, unit: fleet.Unit, receipt: Receipt) -> None:
        if host == victim and not killed:
            by_target[host].stop(signal.SIGKILL)
            killed.append(unit.key)

    run = fleet.run_suite(
        hosts,
        SUITE,
        ["reference"],
        run_id="fleet-run",
        client_for=lambda h: Client(h.target),
        on_receipt=on_receipt,
    )

    # Every attempt has exactly one receipt; the victim signed only its first.
    assert sorted(run.receipts) == sorted(u.key for u in units)
    on_victim = [k for k, r in run.receipts.items() if r["host"] == victim]
    assert on_victim == killed
    assert set(run.gone) == {victim}
    moved = {r["key"] for r in run.retried}
    assert len(moved) == planned - 1
    assert all(r["from"] == victim and r["to"] != victim for r in run.retried)
    assert all(run.receipts[k]["host"] != victim for k in moved)
    assert all(r["resolved"] for r in run.receipts.values())

    # The victim comes back with its ledger; the merged frontier counts each attempt once.
    daemons[[d.target for d in daemons].index(victim)] = start_daemon(
        by_target[victim].data_dir, tasks=tasks_dir
    )
    merged = jb_json(*targets(daemons), *pins(daemons), "frontier", "--suite", SUITE)
    rows = merged["rows"]
    assert {r["host"] for r in rows} <= {h.name for h in hosts}
    assert all(r["energy_source"] == "estimator" for r in rows)
    per_host = Counter(r["host"] for r in run.receipts.values())
    assert {r["host"]: r["attempts"] for r in rows} == dict(per_host)
    [summary] = merged["summary"]
    assert summary["comparable"] and summary["attempts"] == len(units)
    assert summary["resolved"] == len(units) and summary["tasks"] == len(units)
    assert merged["duplicates"] == [] and merged["unreachable"] == []
    # No task changed digest: pooling revisions leaves every row's counts as they were.
    pooled = jb_json(
        *targets(daemons), *pins(daemons), "frontier", "--suite", SUITE, "--merge-digests"
    )
    assert all(r["revision"] is None and r["merged_digests"] == 0 for r in pooled["rows"])
    assert {r["host"]: r["attempts"] for r in pooled["rows"]} == dict(per_host)

    # Re-running the same run id through the CLI finds every result and runs nothing again.
    before = [d.ledger_size() for d in daemons]
    again = jb_json(
        *targets(daemons),
        *pins(daemons),
        "run",
        "--suite",
        SUITE,
        "--solvers",
        "reference",
        "--run-id",
        "fleet-run",
    )
    assert len(again["receipts"]) == len(units)
    assert all(r["replayed"] for r in again["receipts"])
    assert [d.ledger_size() for d in daemons] == before

    # A merged export: a part per host, each verifiable alone, and a manifest.
    out = tmp_path / "fleet-export"
    manifest = jb_json(*targets(daemons), *pins(daemons), "export", "--out", str(out))
    assert sorted(p["host"] for p in manifest["hosts"]) == sorted(h.name for h in hosts)
    for part, d in zip(
        sorted(manifest["hosts"], key=lambda p: p["target"]),
        sorted(daemons, key=lambda d: d.target),
        strict=True,
    ):
        done = jb("verify", str(out / part["file"]), "--pubkey", str(d.pubkey))
        assert done.returncode == 0, done.stderr
    offline = jb_json(*pins(daemons), "frontier", "--from-export", str(out))
    assert offline["rows"] == merged["rows"] and offline["summary"] == merged["summary"]

    # One byte edited in one host's part: the merge is refused, naming that host.
    part = manifest["hosts"][0]
    path = out / part["file"]
    lines = path.read_text().splitlines(keepends=True)
    entry = json.loads(lines[-1])
    sig = entry["signatures"][0]["sig"]
    entry["signatures"][0]["sig"] = ("B" if sig[0] == "A" else "A") + sig[1:]
    lines[-1] = json.dumps(entry) + "\n"
    path.write_text("".join(lines))
    done = jb(*pins(daemons), "frontier", "--from-export", str(out))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{part['host']}: its ledger does not verify" in done.stderr
    assert "not merged" in done.stderr and "does not verify" in done.stderr
    assert done.stdout == ""
    with pytest.raises(VerificationError):
        fleet.load_export_dir(out, hosts)
