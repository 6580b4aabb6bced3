"""`jb-client` has one start-up path, and each command loads only what it uses.

The console script enters `jb_client.cli:main` (no protocol code of our own); a
command's run imports its own module and the libraries it calls, nothing else:
`--json` never loads rich, a daemon's command never DuckDB, an offline one never
gRPC. What that buys in time is measured in bench/overhead.py, never asserted here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from jb_client.api import Client
from jb_client.cli import COMMANDS, NAMES, command_named

from .conftest import Daemon

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jb_client", *args],
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,  # type: ignore[call-overload]
    )


# `jb-client ARGS`, then the names of every module the run loaded, on stderr's last line.
PROBE = """
import sys
from jb_client.cli import main
try:
    main(sys.argv[1:])
finally:
    sys.stderr.write("\\nMODULES " + " ".join(sorted(sys.modules)) + "\\n")
"""


def imported(args: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """A run of `jb-client ARGS`, and the modules it loaded."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120
    )
    last = done.stderr.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("MODULES "), done.stderr
    return done, set(last.split()[1:])


def test_the_console_script_is_the_cli() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["jb-client"] == "jb_client.cli:main"
    assert not (REPO / "client" / "entry.py").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["tasks", "--json"],
        ["tasks", "--json", "--suite", "smoke"],
        ["tasks", "--suite=smoke", "--json"],
    ],
)
def test_tasks_json_is_the_apis_tasks(daemon: Daemon, args: list[str]) -> None:
    suite = "smoke" if any("smoke" in a for a in args) else ""
    with Client(daemon.target) as client:
        expected = {"tasks": [t.to_dict() for t in client.tasks(suite)]}
    for target in (["--target", daemon.target], [f"--target={daemon.target}"]):
        done = run([*target, *args])
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == expected and expected["tasks"]
    # The same bytes as ever: sorted keys, two-space indent, one trailing newline.
    assert done.stdout == json.dumps(expected, indent=2, sort_keys=True) + "\n"


def test_an_unknown_suite_is_refused(daemon: Daemon) -> None:
    done = run(["--target", daemon.target, "tasks", "--json", "--suite", "no-such-suite"])
    assert done.returncode == 2 and done.stdout == ""
    assert "no suite 'no-such-suite'" in done.stderr


def test_an_unreachable_daemon_exits_3(tmp_path: Path) -> None:
    done = run(
        ["--target", f"unix:{tmp_path / 'nobody.sock'}", "tasks", "--json"],
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 3 and done.stdout == ""
    assert "cannot reach the daemon" in done.stderr and "jouled serve" in done.stderr


def test_help_lists_every_command_in_order() -> None:
    done = run(["--help"])
    assert done.returncode == 0, done.stderr
    listing = done.stdout[done.stdout.index("Commands") :]
    listed = re.findall(r"^\W*([a-z][a-z-]*)  ", listing, re.M)
    assert listed == [name for name, _, _ in COMMANDS], done.stdout


def test_an_unknown_command_is_a_usage_error() -> None:
    done = run(["no-such-command"])
    assert done.returncode == 2 and "no-such-command" in done.stderr


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["tasks", "--json"], "tasks"),
        (["--target", "unix:/s", "tasks", "--json"], "tasks"),
        (["--target=unix:/s", "-v", "frontier"], "frontier"),
        (["--pin", "a=b", "--pin", "c=d", "run", "--suite", "s"], "run"),
        (["--token", "tasks", "keys"], "keys"),  # the token's value is not the command
        (["--insecure", "meter-run", "--", "true"], "meter-run"),
        (["--help", "tasks"], None),
        ([], None),
        (["nope"], None),
    ],
)
def test_the_command_is_found_past_the_global_options(argv: list[str], name: str | None) -> None:
    assert command_named(argv) == name


def test_every_command_has_a_module() -> None:
    from jb_client.cli import load

    assert set(load()) >= NAMES


def test_tasks_json_loads_no_tables_and_no_duckdb(daemon: Daemon) -> None:
    done, names = imported(["--target", daemon.target, "tasks", "--json"])
    assert done.returncode == 0, done.stderr
    assert "grpc" in names
    loaded = {n for n in names if n.split(".")[0] in ("rich", "duckdb", "matplotlib", "nacl")}
    assert not loaded and "jb_client.render" not in names, sorted(loaded)
    others = ("cli_results", "cli_ledger", "cli_meter", "cli_swebench")  # other commands'
    assert "jb_client.cli_attempts" in names and not {f"jb_client.{m}" for m in others} & names


def test_help_loads_no_grpc(tmp_path: Path) -> None:
    done, names = imported(["--help"])
    assert done.returncode == 0, done.stderr
    heavy = {"grpc", "google.protobuf", "duckdb", "nacl", "matplotlib", "jouled.v1"}
    assert not names & heavy, sorted(names & heavy)


def test_an_offline_command_loads_no_grpc(tmp_path: Path) -> None:
    done, names = imported(["audit", str(tmp_path / "missing.json"), "--pubkey", "k.pub"])
    assert done.returncode == 2, done.stderr
    assert "grpc" not in names and "duckdb" not in names
