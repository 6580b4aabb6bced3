"""`jb-client`'s help on a real terminal, 80 and 100 columns wide: every command's
positional arguments are named in upper case (FILE, COMMAND...), as its options'
values are named, never as argparse's braced `{choices}`."""

from __future__ import annotations

import re

import pytest
from jb_client.cli import COMMANDS

from tests.client.terminal import in_terminal

WIDTHS = (80, 100)
# A positional's name in usage and help: FILE, RECEIPT, COMMAND...
UPPER = re.compile(r"[A-Z][A-Z0-9_-]*(\.\.\.)?")


def usage_and_arguments(screen: str) -> tuple[list[str], list[str]]:
    """The words of the usage line (wrapped or not) past `[OPTIONS]`, and the names
    the Arguments section lists."""
    usage = " ".join(screen.split("\n\n", 1)[0].split())
    assert usage.startswith("Usage: jb-client ") and "[OPTIONS]" in usage, usage
    words = usage.split("[OPTIONS]", 1)[1].split()
    section = screen.split("\nArguments:\n", 1)[1:]
    entries = section[0].split("\n\n", 1)[0].splitlines() if section else []
    listed = [line.split()[0] for line in entries if re.match(r"  \S", line)]
    return words, listed


@pytest.mark.parametrize("columns", WIDTHS)
def test_every_command_names_its_positional_arguments_in_upper_case(columns: int) -> None:
    named = []
    for args in [["--help"], *([name, "--help"] for name, _, _ in COMMANDS)]:
        status, screen = in_terminal(args, columns)
        assert status == 0, (args, screen)
        words, listed = usage_and_arguments(screen)
        positionals = [w for w in words if w != "[ARGS]..."]
        shown = [*positionals, *listed]
        braced = [w for w in shown if "{" in w or "}" in w]
        assert not braced, (args, braced, screen)
        assert all(UPPER.fullmatch(w) for w in shown), (args, shown, screen)
        if listed:  # what usage shows is what the Arguments section explains
            assert listed == positionals, (args, screen)
        named += listed
    assert named, "no command's help lists an argument"
