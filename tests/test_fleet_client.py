"""The fleet's host list and spread, without daemons."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jb_client import fleet
from jb_client.cli import main

from jouled.errors import UsageError
from jouled.ledger.signing import public_pem


@pytest.fixture
def pub(tmp_path: Path) -> Path:
    path = tmp_path / "a.pub"
    path.write_bytes(public_pem(Ed25519PrivateKey.generate().public_key()))
    return path


def test_every_host_needs_a_pinned_key(pub: Path) -> None:
    with pytest.raises(UsageError, match="no key pinned for unix:/b"):
        fleet.fleet_hosts(["unix:/a", "unix:/b"], [f"unix:/a={pub}"])
    with pytest.raises(UsageError, match="names no host"):
        fleet.fleet_hosts(["unix:/a"], [f"unix:/a={pub}", f"unix:/c={pub}"])
    [host] = fleet.fleet_hosts(["unix:/a"], [f"unix:/a={pub}"])
    assert host.name == "unix:/a" and len(host.keyids) == 1


def test_a_fleet_file_names_hosts_and_their_keys(tmp_path: Path, pub: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(
        '[[host]]\nname = "node-a"\ntarget = "unix:/a"\npubkey = "a.pub"\n'
        '[[host]]\ntarget = "node-b:7443"\npubkey = "a.pub"\nca = "ca.pem"\n'
    )
    a, b = fleet.fleet_hosts([], [], path)
    assert (a.name, a.target, b.name, b.ca) == (
        "node-a",
        "unix:/a",
        "node-b:7443",
        tmp_path / "ca.pem",
    )
    path.write_text('[[host]]\ntarget = "unix:/a"\n')
    with pytest.raises(UsageError, match="pin its key"):
        fleet.fleet_hosts([], [], path)


def test_the_spread_is_deterministic_and_moves_only_a_lost_hosts_work() -> None:
    units = fleet.units_of([f"s/t{i}" for i in range(30)], ["reference"], 2, "run", "")
    hosts = ["a", "b", "c"]
    home = {u.key: fleet.assign(u.key, hosts) for u in units}
    assert home == {u.key: fleet.assign(u.key, list(reversed(hosts))) for u in units}
    assert set(Counter(home.values())) == set(hosts)
    after = {u.key: fleet.assign(u.key, ["a", "c"]) for u in units}
    assert all(after[k] == h for k, h in home.items() if h != "b")


def test_single_daemon_commands_refuse_several_targets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--target", "unix:/a", "--target", "unix:/b", "tasks"])
    assert done.value.code == 2
    assert "talks to one daemon" in capsys.readouterr().err
