"""`jb-client`: a thin CLI over `jb_client.api` and the offline verifier.

Tables on a terminal, `--json` on stdout for scripts, progress and logs on
stderr. Exit codes: 0 ok, 1 a failed check, 2 usage or a rejected request,
3 the daemon cannot be reached, 130 interrupted.

The global options and the helpers every command shares are in `cli_common`;
the commands live in one module per group, as plain functions whose typed
parameters `cli_args` turns into argparse's options. `main` loads only the
command the command line names (all of them for the `--help` that lists them),
so a command pays for its own module's imports and no other's; each module
loads rich, gRPC, DuckDB and the rest only where a command uses them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from jb_client import cli_args
from jb_client.cli_args import Command, summary

# (command, module, function), in the order `--help` lists them.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("tasks", "cli_attempts", "tasks"),
    ("fetch", "cli_attempts", "fetch"),
    ("submit", "cli_attempts", "submit"),
    ("run", "cli_attempts", "run"),
    ("frontier", "cli_results", "frontier"),
    ("compare", "cli_results", "compare"),
    ("swebench", "cli_swebench", "swebench"),
    ("logs", "cli_results", "logs"),
    ("receipt", "cli_results", "receipt"),
    ("keys", "cli_results", "keys"),
    ("bestofk", "cli_results", "bestofk"),
    ("export", "cli_ledger", "export"),
    ("verify", "cli_ledger", "verify"),
    ("audit", "cli_ledger", "audit"),
    ("checkpoint", "cli_ledger", "checkpoint_cmd"),
    ("proof", "cli_ledger", "proof"),
    ("consistency", "cli_ledger", "consistency"),
    ("meter", "cli_meter", "meter"),
    ("calibrate", "cli_meter", "calibrate"),
    ("meter-run", "cli_meter", "meter_run"),
    ("report", "cli_results", "report"),
)
NAMES = frozenset(name for name, _, _ in COMMANDS)

# The global options (`cli_common.main_options`) that take a value.
_VALUED = frozenset({"--target", "--fleet", "--pin", "--token", "--ca", "--cert", "--key"})


def command_named(argv: Sequence[str]) -> str | None:
    """The command `argv` runs, past the global options; None: none, or `--help` first.

    Read without parsing (for tools and tests); `main`'s parse finds the same one."""
    args = iter(argv)
    for arg in args:
        if arg in _VALUED:
            next(args, None)
        elif arg.startswith("-"):
            if arg == "--help":
                return None
        else:
            return arg if arg in NAMES else None
    return None


def load(names: Sequence[str] | None = None) -> dict[str, Command]:
    """The functions of the commands `names` (None: every one), in `--help`'s order;
    each imports its own module."""
    return {
        name: _loader(module, function)()
        for name, module, function in COMMANDS
        if names is None or name in names
    }


def _loader(module: str, function: str) -> Callable[[], Command]:
    def load() -> Command:
        found: Command = getattr(importlib.import_module(f"jb_client.{module}"), function)
        return found

    return load


def main(argv: Sequence[str] | None = None) -> None:
    """`jb-client ARGV` (default: the process's arguments). A usage error, a failed
    check or an unreachable daemon ends in SystemExit with its exit code."""
    import sys

    from jb_client.cli_common import HELP, main_options, quiet_grpc

    quiet_grpc()

    cli_args.run(
        sys.argv[1:] if argv is None else list(argv),
        prog="jb-client",
        description=HELP,
        options=main_options,
        commands={name: _loader(module, function) for name, module, function in COMMANDS},
    )


__all__ = ["COMMANDS", "NAMES", "command_named", "load", "main", "summary"]
