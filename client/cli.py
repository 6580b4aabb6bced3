"""`jb-client`: a thin CLI over `jb_client.api` and the offline verifier.

Tables on a terminal, `--json` on stdout for scripts, progress and logs on
stderr. Exit codes: 0 ok, 1 a failed check, 2 usage or a rejected request,
3 the daemon cannot be reached.

The global options and the helpers every command shares are in `cli_common`;
the commands live in one module per group. `main` registers only the command
the command line names (all of them for `--help`, no command or an unknown
one), so a command pays for its own module's imports and no other's; each
module loads rich, gRPC, DuckDB and the rest only where a command uses them.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import typer

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
    """The command `argv` runs, past the global options; None: none, or `--help` first."""
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


def build(names: Sequence[str] | None = None) -> typer.Typer:
    """The app with the commands `names` (None: every one) registered on it."""
    from jb_client.cli_common import app

    registered = {info.name for info in app.registered_commands}
    for name, module, function in COMMANDS:
        if (names is None or name in names) and name not in registered:
            command = getattr(importlib.import_module(f"jb_client.{module}"), function)
            app.command(name, short_help=summary(command.__doc__ or ""))(command)
    return app


def summary(doc: str) -> str:
    """A command's line in `--help`: its docstring's first sentence, whole (click would
    cut it at a fixed length and add "...")."""
    text = " ".join(doc.split("\n\n")[0].split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def main(argv: Sequence[str] | None = None) -> None:
    import sys

    args = sys.argv[1:] if argv is None else list(argv)
    name = command_named(args)
    build(None if name is None else [name])(args=args)


def __getattr__(name: str) -> typer.Typer:
    # `jb_client.cli.app`: every command registered (the tests' CliRunner, the docs' help).
    if name == "app":
        return build()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMMANDS", "build", "main"]
