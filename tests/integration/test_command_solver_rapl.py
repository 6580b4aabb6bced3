"""An agent CLI's solve window on a daemon metering a fake powercap tree at a known power.

The fake's counters advance at exactly `BUSY_W` while the agent works, so the
solve window's gross energy must be that power times the window's own signed
wall time, within what its signed edges allow, and its marginal energy the
gross less the signed idle power over the same time. Nothing here asserts on
wall time itself.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jb_client.api import Client

from .conftest import TASKS, Daemon
from .test_command_solvers import FIXTURE
from .test_meter_daemon import (  # noqa: F401 - fixtures
    BUSY_W,
    DOMAIN,
    P_BUSY,
    PoweredTree,
    powered,
    start_rapl_daemon,
    within,
)


@pytest.fixture
def agent_rapl_daemon(tmp_path: Path, powered: PoweredTree) -> Iterator[Daemon]:  # noqa: F811
    agent = tmp_path / "agent"
    (agent / "fix").mkdir(parents=True)
    shutil.copy(FIXTURE, agent / "fake_agent.py")
    shutil.copytree(TASKS / "smoke" / "lrucache" / "reference", agent / "fix", dirs_exist_ok=True)
    for path in [tmp_path, agent, *agent.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    solvers = tmp_path / "solvers.toml"
    solvers.write_text(
        "[solvers.fake-fix]\n"
        f'argv = ["{sys.executable}", "{agent / "fake_agent.py"}", "fix"]\n'
        'network = "none"\n'
        f'paths = ["{agent}"]\n'
    )
    d = start_rapl_daemon(tmp_path / "data", powered, "--solvers", str(solvers))
    try:
        yield d
    finally:
        if d.proc.poll() is None:
            assert d.stop() == 0, d.log.read_text()


def test_the_solve_window_meters_the_known_power(
    agent_rapl_daemon: Daemon,
    powered: PoweredTree,  # noqa: F811
) -> None:
    powered.set_power(BUSY_W)
    with Client(agent_rapl_daemon.target, timeout_s=300) as client:
        receipt = client.run_solver("smoke/lrucache", "fake-fix")
    assert receipt["status"] == "resolved", receipt
    body = json.loads(base64.b64decode(receipt["entry"]["payload"]))["body"]
    e = body["energy"]["solve"]
    where = f"{e}\n--- daemon log ---\n{agent_rapl_daemon.log.read_text()}"
    assert e["source"] == "rapl" and e["valid"] is True and e["reliable"] is True, where
    assert within(e["gross_mj"], P_BUSY, e), where
    assert e["marginal_mj"] == e["gross_mj"] - e["idle_mj"], where
    for zone_id, name in DOMAIN.items():
        assert within(e["domains"][name], BUSY_W[zone_id], e), where
