"""Agent CLIs as daemon-hosted solvers: a real daemon runs a fake agent in its sandbox.

The agent is `tests/fixtures/fake_agent.py`, copied beside the fixed files it
applies and shown to the sandbox read-only through the solver's `paths`.
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jb_client.api import Client
from jb_client.errors import ClientError

from .conftest import TASKS, Daemon, start_daemon

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "fake_agent.py"
TASK = "smoke/lrucache"
SECRET = f"sk-test-{secrets.token_hex(16)}"


def solvers_file(root: Path, agent_dir: Path) -> Path:
    def solver(mode: str, timeout: int = 120) -> str:
        return (
            f"[solvers.fake-{mode}]\n"
            f'argv = ["{sys.executable}", "{agent_dir / "fake_agent.py"}", "{mode}"]\n'
            'env = ["FAKE_API_KEY"]\n'
            f"timeout_s = {timeout}\n"
            'network = "none"\n'
            f'paths = ["{agent_dir}"]\n'
            f"[solvers.fake-{mode}.usage]\n"
            'usd = "total_cost_usd"\n'
            'tokens_in = "usage.input_tokens"\n'
            'tokens_out = "usage.output_tokens"\n\n'
        )

    path = root / "solvers.toml"
    path.write_text(
        "".join(solver(m) for m in ("fix", "fail", "tests", "binary")) + solver("hang", 3)
    )
    return path


@pytest.fixture(scope="module")
def agent_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("agents")
    agent_dir = root / "agent"
    (agent_dir / "fix").mkdir(parents=True)
    shutil.copy(FIXTURE, agent_dir / "fake_agent.py")
    shutil.copytree(
        TASKS / "smoke" / "lrucache" / "reference", agent_dir / "fix", dirs_exist_ok=True
    )
    for path in [agent_dir, *agent_dir.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    d = start_daemon(
        root / "data",
        "--solvers",
        str(solvers_file(root, agent_dir)),
        env={"FAKE_API_KEY": SECRET},
    )
    yield d
    assert d.stop() == 0, d.log.read_text()


def run(daemon: Daemon, solver: str, rollout: int = 0) -> dict[str, Any]:
    with Client(daemon.target, timeout_s=300) as client:
        return client.run_solver(TASK, solver, run_id="agents", rollout=rollout).to_dict()


def body(receipt: dict[str, Any]) -> dict[str, Any]:
    import base64

    return json.loads(base64.b64decode(receipt["entry"]["payload"]))["body"]


def test_an_agent_fix_is_metered_claimed_and_graded(agent_daemon: Daemon) -> None:
    receipt = run(agent_daemon, "fake-fix")
    assert receipt["status"] == "resolved", receipt
    signed = body(receipt)
    solve = signed["energy"]["solve"]
    assert solve["source"] == "estimator" and solve["gross_mj"] > 0 and solve["wall_ms"] > 0
    assert signed["claimed"] == {"usd_micros": 12300, "tokens_in": 1000, "tokens_out": 200}
    assert signed["solve"]["exit_code"] == 0 and signed["solve"]["network"] == "loopback"
    assert signed["solver"] == "fake-fix"
    # Every op of the attempt is metered, and the total adds them up.
    assert {"seed", "solve", "grade"} <= set(signed["energy"])
    total = signed["energy_total"]
    assert total["ops"] == sorted(signed["energy"])
    assert total["gross_mj"] == sum(w["gross_mj"] for w in signed["energy"].values())
    assert total["wall_ms"] == sum(w["wall_ms"] for w in signed["energy"].values())
    assert (
        signed["patch_sha256"] != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_an_agent_that_hangs_is_cut_off_and_graded(agent_daemon: Daemon) -> None:
    receipt = run(agent_daemon, "fake-hang")
    signed = body(receipt)
    assert signed["solve"]["timed_out"] is True
    assert receipt["status"] == "unresolved"  # it changed nothing
    assert signed["energy"]["solve"]["wall_ms"] >= 3000


def test_an_agent_that_fails_still_has_its_work_graded(agent_daemon: Daemon) -> None:
    receipt = run(agent_daemon, "fake-fail")
    assert body(receipt)["solve"]["exit_code"] == 3
    assert receipt["status"] == "resolved"  # the files it left fix the bug


def test_an_agent_rewriting_the_tests_gains_nothing(agent_daemon: Daemon) -> None:
    receipt = run(agent_daemon, "fake-tests")
    assert receipt["status"] == "unresolved"
    assert body(receipt)["tests"]["failed"] > 0


def test_what_no_patch_can_carry_is_dropped_and_named(agent_daemon: Daemon) -> None:
    receipt = run(agent_daemon, "fake-binary")
    assert receipt["status"] == "resolved"
    assert sorted(body(receipt)["solve"]["dropped"]) == ["logo.bin", "prompt-link"]


def test_the_api_key_reaches_no_record(agent_daemon: Daemon, tmp_path: Path) -> None:
    run(agent_daemon, "fake-fix", rollout=1)
    out = tmp_path / "ledger.jsonl"
    agent_daemon.client_json("export", "--out", str(out))
    records = out.read_text()
    payloads = "".join(
        __import__("base64").b64decode(json.loads(line)["payload"]).decode()
        for line in records.splitlines()
    )
    assert SECRET not in records and SECRET not in payloads
    assert SECRET not in agent_daemon.log.read_text()
    kept = "".join(p.read_text() for p in (agent_daemon.data_dir / "output").glob("*"))
    assert SECRET not in kept


def test_hosted_names_cannot_be_used_by_submissions(agent_daemon: Daemon) -> None:
    with Client(agent_daemon.target) as client, pytest.raises(ClientError) as caught:
        client.submit(TASK, b"", solver="fake-fix")
    assert "reserved: the daemon runs it itself" in caught.value.message


def test_an_unknown_hosted_solver_names_the_ones_there_are(agent_daemon: Daemon) -> None:
    with Client(agent_daemon.target) as client, pytest.raises(ClientError) as caught:
        client.run_solver(TASK, "claude")
    assert "fake-fix" in caught.value.diagnostics()
