"""`jb-client` on a real terminal: a pseudo-terminal 80 and 100 columns wide.

The CLI learns the width the way a user's shell gives it (the terminal's window
size, no `COLUMNS`): help lists every command's first sentence whole, and the
tables of a real daemon's answers fit the terminal without cutting a task id.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from jb_client.cli import COMMANDS, load, summary

from tests.client.terminal import in_terminal

from .conftest import TASKS, Daemon
from .test_daemon import make_patch

WIDTHS = (80, 100)


@pytest.mark.parametrize("columns", WIDTHS)
def test_help_lists_every_command_s_first_sentence_whole(columns: int) -> None:
    status, screen = in_terminal(["--help"], columns)
    assert status == 0, screen
    assert max(len(line) for line in screen.splitlines()) <= columns, screen
    listing = screen.split("Commands:", 1)[1]
    assert "..." not in listing, listing
    flat = " ".join(listing.split())
    commands = load()
    for name, function in commands.items():
        assert function.__doc__
        assert f"{name} {summary(function.__doc__)}" in flat, (name, flat)
    assert len(commands) == len(COMMANDS)


def test_every_command_s_help_fits_an_80_column_terminal() -> None:
    for name, _, _ in COMMANDS:
        status, screen = in_terminal([name, "--help"], 80)
        assert status == 0, (name, screen)
        too_long = [line for line in screen.splitlines() if len(line) > 80]
        assert not too_long, (name, too_long)


@pytest.mark.parametrize("columns", WIDTHS)
def test_the_task_table_fits_and_keeps_every_id(daemon: Daemon, columns: int) -> None:
    listed = daemon.client("tasks", "--json")
    assert listed.returncode == 0, listed.stderr
    ids = re.findall(r'"task_id": "([^"]+)"', listed.stdout)
    assert ids
    status, screen = in_terminal(["--target", daemon.target, "tasks"], columns)
    assert status == 0, screen
    assert max(len(line) for line in screen.splitlines()) <= columns, screen
    for task_id in ids:
        assert task_id in screen, (task_id, screen)


def test_a_receipt_on_a_narrow_terminal_breaks_between_its_parts(
    daemon: Daemon, tmp_path: Path
) -> None:
    """The one-line receipt is about 90 characters: at 80 columns its verdict and tests
    come first, its energy, rollout and sequence number on an indented line of their own,
    never a word cut across the edge."""
    patch = make_patch(tmp_path, TASKS / "smoke" / "slidingwindow", {}, reference=True)
    args = ["--target", daemon.target, "submit", "--task", "smoke/slidingwindow"]
    status, screen = in_terminal([*args, "--patch", str(patch)], 80)
    assert status == 0, screen
    lines = [line for line in screen.splitlines() if line.strip()]
    first = next(i for i, line in enumerate(lines) if line.startswith("smoke/slidingwindow"))
    assert re.fullmatch(r"smoke/slidingwindow resolved tests \d+/\d+ *", lines[first])
    second = re.fullmatch(r"  grade \S+ J \(\w+\)  rollout \d+  seq (\d+) *", lines[first + 1])
    assert second is not None, lines[first + 1]
    status, screen = in_terminal(
        ["--target", daemon.target, "receipt", "--seq", second.group(1)], 120
    )
    one = next(line for line in screen.splitlines() if line.startswith("smoke/slidingwindow"))
    assert "resolved" in one and "grade" in one and f"seq {second.group(1)}" in one
