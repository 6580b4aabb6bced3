"""`jb-client tasks --json` answered by the entry point's own call equals the full CLI's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from jb_client.entry import _tasks_json

from .conftest import Daemon

FULL_CLI = "from jb_client.cli import main; main()"


def run(args: list[str], *, full: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", FULL_CLI] if full else [sys.executable, "-m", "jb_client"]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "args",
    [
        ["tasks", "--json"],
        ["tasks", "--json", "--suite", "smoke"],
        ["tasks", "--suite=smoke", "--json"],
    ],
)
def test_the_fast_answer_is_the_full_clis(daemon: Daemon, args: list[str]) -> None:
    target = ["--target", daemon.target]
    fast, full = run([*target, *args]), run([*target, *args], full=True)
    assert fast.returncode == full.returncode == 0, fast.stderr + full.stderr
    assert fast.stdout == full.stdout and '"tasks"' in fast.stdout
    assert run([f"--target={daemon.target}", *args]).stdout == full.stdout


def test_a_refusal_takes_the_full_clis_path(daemon: Daemon) -> None:
    args = ["--target", daemon.target, "tasks", "--json", "--suite", "no-such-suite"]
    fast, full = run(args), run(args, full=True)
    assert fast.returncode == full.returncode == 2, fast.stderr + full.stderr
    assert fast.stderr == full.stderr and "no suite 'no-such-suite'" in fast.stderr
    assert fast.stdout == full.stdout == ""


def test_an_unreachable_daemon_is_reported_as_the_full_cli_reports_it(tmp_path: Path) -> None:
    args = ["--target", f"unix:{tmp_path / 'nobody.sock'}", "tasks", "--json"]
    env = {**os.environ, "COLUMNS": "200"}
    fast = subprocess.run(
        [sys.executable, "-m", "jb_client", *args], capture_output=True, text=True, env=env
    )
    full = subprocess.run(
        [sys.executable, "-c", FULL_CLI, *args], capture_output=True, text=True, env=env
    )
    assert fast.returncode == full.returncode == 3
    assert fast.stderr == full.stderr and fast.stdout == full.stdout == ""


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["tasks", "--json"], (None, "")),
        (["--target", "unix:/s", "tasks", "--json", "--suite", "a"], ("unix:/s", "a")),
        (["--target=/s", "tasks", "--suite=b", "--json"], ("/s", "b")),
        (["tasks"], None),  # a table: the full CLI draws it
        (["tasks", "--json", "--json"], None),
        (["tasks", "--json", "--help"], None),
        (["-v", "tasks", "--json"], None),
        (["--target", "a", "--target", "b", "tasks", "--json"], None),
        (["--target", "--json", "tasks"], None),
        (["submit", "--json"], None),
    ],
)
def test_only_the_plain_command_line_takes_the_fast_path(
    argv: list[str], parsed: tuple[str | None, str] | None
) -> None:
    assert _tasks_json(argv) == parsed
