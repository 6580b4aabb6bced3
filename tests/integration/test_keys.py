"""`jouled keys rotate` between two runs of a real daemon, audited with a trust file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import start_daemon


def test_rotate_between_runs_and_verify_with_ranged_trust(tmp_path: Path) -> None:
    data = tmp_path / "data"
    d = start_daemon(data)
    d.client_json("run", "--suite", "smoke", "--solvers", "noop")
    old_pub = (data / "jouled.pub").read_text()
    assert d.stop() == 0

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jouled",
            "keys",
            "rotate",
            "--data-dir",
            str(data),
            "--overlap",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    rotation_seq = int(done.stdout.split("rotated at entry ")[1].split(":")[0])
    assert (data / "jouled.pub").read_text() != old_pub

    d = start_daemon(data)
    try:
        d.client_json("run", "--suite", "smoke", "--solvers", "noop")
        out = tmp_path / "ledger.jsonl"
        assert d.client("export", "--out", str(out)).returncode == 0
        trust = tmp_path / "trust.json"
        trust.write_text(
            json.dumps(
                {
                    "keys": [
                        {"public_key": old_pub, "to_seq": rotation_seq},
                        {
                            "public_key": (data / "jouled.pub").read_text(),
                            "from_seq": rotation_seq + 1,
                        },
                    ]
                }
            )
        )
        ok = d.client("verify", str(out), "--trust", str(trust), "--json")
        assert ok.returncode == 0, ok.stderr
        assert len(json.loads(ok.stdout)["keyids"]) == 2
        stale = d.client("verify", str(out), "--pubkey", str(tmp_path / "old.pub"))
        assert stale.returncode == 2  # no such file: a usage error, not a verdict
        (tmp_path / "old.pub").write_text(old_pub)
        only_old = d.client("verify", str(out), "--pubkey", str(tmp_path / "old.pub"))
        assert only_old.returncode == 1
        assert f"entry {rotation_seq + 1}" in only_old.stderr
    finally:
        assert d.stop() == 0
