"""`jb-client`'s command line over the standard library's argparse: the one place that
turns a command's typed parameters into its options and arguments.

A command is a plain function. Each parameter is an option, `--name` from the
parameter's name unless `Option` names it, or, marked `Argument`, a positional;
its type says how its text is read:

- `str`, `Path`, `int` (a range with `Option(min=, max=)`): one value;
- `bool`: a flag (`Option("--force")`); unnamed, or named `"--wide/--compact"`, a
  pair (`--merkle-only/--no-merkle-only`); as `bool | None` it is None unless given;
- `list[X]`: an option given once per value, or an argument taking the rest;
- no default: required.

The global options are one more such function, called before the command; they
come before the command's name, the command's own after it. Only the command the
command line names is loaded (every one for the help that lists them). Help reads
as before: usage, the docstring, the options with `[default: ...]`, `[required]`
and ranges, and the commands with their first sentence; a usage error prints the
usage, `error: ...` and a hint on stderr and exits 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

EXIT_USAGE = 2

Command = Callable[..., Any]


class Option:
    """An option's names (default: `--` and the parameter's name, `_` as `-`), help and range."""

    __slots__ = ("help", "max", "min", "names")

    def __init__(
        self, *names: str, help: str = "", min: int | None = None, max: int | None = None
    ) -> None:
        self.names, self.help, self.min, self.max = names, help, min, max


class Argument:
    """A positional argument, named in help and usage by its parameter's name."""

    __slots__ = ("help",)

    def __init__(self, help: str = "") -> None:
        self.help = help


def summary(doc: str) -> str:
    """A command's line in `--help`: its docstring's first sentence, whole."""
    text = " ".join(doc.split("\n\n")[0].split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


# -- from parameters to argparse ---------------------------------------------------------


_NO_DEFAULT = object()


def _metavar(kind: type, ranged: bool) -> str:
    return "<int range>" if ranged else {Path: "<path>", int: "<int>"}.get(kind, "<str>")


def _range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"{low}<=x<={high}"
    return f"x>={low}" if low is not None else f"x<={high}"


def _reader(kind: type, low: int | None, high: int | None) -> Callable[[str], Any]:
    if kind is not int:
        return kind

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is not in the range {_range(low, high)}")
        return value

    whole.__name__ = "int"
    return whole


def _unpack(hint: Any) -> tuple[Any, Option | Argument | None]:
    """(the type, the Option or Argument it is annotated with)."""
    meta = None
    if typing.get_origin(hint) is typing.Annotated:
        hint, *extras = typing.get_args(hint)
        meta = next((m for m in extras if isinstance(m, Option | Argument)), None)
    return hint, meta


def _base(hint: Any) -> tuple[type, bool]:
    """(the type of one value, whether the parameter is a list of them); `X | None` is X."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return item, True
    return hint, False


class _Switch(argparse.Action):
    """A flag pair, `--wide/--compact`: the first sets True, the second False."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, option_string == self.option_strings[0])


def _escape(text: str) -> str:
    return text.replace("%", "%%")  # argparse formats help text with %


def _add_parameters(parser: argparse.ArgumentParser, function: Command) -> list[str]:
    """`function`'s parameters as `parser`'s options and arguments; the arguments' names."""
    while hasattr(function, "__wrapped__"):  # a decorated command: its own parameters
        function = function.__wrapped__
    code = function.__code__
    names = code.co_varnames[: code.co_argcount]
    given = function.__defaults__ or ()
    defaults = dict(zip(names[len(names) - len(given) :], given, strict=True))
    hints = typing.get_type_hints(function, include_extras=True)
    options = parser._optionals
    positional: list[str] = []
    for name in names:
        hint, meta = _unpack(hints[name])
        kind, many = _base(hint)
        default = defaults.get(name, _NO_DEFAULT)
        required = default is _NO_DEFAULT
        if isinstance(meta, Argument) or (meta is None and required):
            shown = name.upper() + ("..." if many else "")
            help_text = (meta.help if meta else "") + "  [required]"
            parser.add_argument(
                name,
                metavar=shown,
                nargs="+" if many else None,
                type=_reader(kind, None, None),
                help=_escape(help_text.strip()),
            )
            positional.append(shown)
            continue
        option = meta if isinstance(meta, Option) else Option()
        declared = [n for spec in option.names for n in spec.split("/")]
        flags = declared or ["--" + name.replace("_", "-")]
        flags.sort(key=lambda f: f.startswith("--"))  # -v before --verbose
        notes = []
        kwargs: dict[str, Any] = {"dest": name, "required": required}
        if kind is bool:
            pair = any("/" in spec for spec in option.names) or not option.names
            if pair and len(flags) == 1:
                flags.append("--no-" + flags[0].removeprefix("--"))
            if pair:
                kwargs.update(action=_Switch)
                if isinstance(default, bool):
                    notes.append(f"default: {(flags[0] if default else flags[1])[2:]}")
            else:
                kwargs.update(action="store_true")
        else:
            ranged = option.min is not None or option.max is not None
            kwargs.update(
                type=_reader(kind, option.min, option.max),
                metavar=_metavar(kind, ranged),
                action="append" if many else "store",
            )
            if default not in (None, "", _NO_DEFAULT) and not many:
                notes.append(f"default: {default}")
            if ranged:
                notes.append(_range(option.min, option.max))
        if required:
            notes.append("required")
        else:
            kwargs["default"] = default
        help_text = option.help + (f"  [{'; '.join(notes)}]" if notes else "")
        options.add_argument(*flags, help=_escape(help_text), **kwargs)
    options.add_argument("--help", action="help", help="Show this message and exit.")
    return positional


# -- help and usage errors ---------------------------------------------------------------


class _Layout(argparse.HelpFormatter):
    """click's plain layout: `Usage:`, paragraphs of the docstring indented, pairs as `a / b`."""

    def __init__(self, prog: str) -> None:
        width = min(shutil.get_terminal_size().columns, 80) - 2
        super().__init__(prog, max_help_position=32, width=width)

    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: str | None = None) -> None:
        super().add_usage(usage, actions, groups, "Usage: " if prefix is None else prefix)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            textwrap.fill(
                " ".join(p.split()),
                width,
                initial_indent=indent + "  ",
                subsequent_indent=indent + "  ",
            )
            for p in text.split("\n\n")
            if p.strip()
        )

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if isinstance(action, _Switch):
            return " / ".join(action.option_strings)
        return super()._format_action_invocation(action)


class _Parser(argparse.ArgumentParser):
    """Usage errors as `error: ...` and a hint, exit 2; a listing of commands in help."""

    def __init__(self, prog: str, usage: str, description: str, hint: str) -> None:
        super().__init__(
            prog=prog,
            usage=usage,
            description=description,
            formatter_class=_Layout,
            add_help=False,
            allow_abbrev=False,
        )
        self.hint = hint
        self._positionals.title, self._optionals.title = "Arguments", "Options"
        self.listing: Callable[[], list[tuple[str, str]]] | None = None

    def format_help(self) -> str:
        text = super().format_help()
        if self.listing is None:
            return text
        rows = self.listing()
        width = min(shutil.get_terminal_size().columns, 80) - 2
        column = 2 + max(len(name) for name, _ in rows) + 2
        lines = ["Commands:"]
        for name, line in rows:
            wrapped = textwrap.wrap(line, max(width - column, 20)) or [""]
            lines.append(f"  {name:<{column - 4}}  {wrapped[0]}".rstrip())
            lines += [" " * column + more for more in wrapped[1:]]
        return text + "\n" + "\n".join(lines) + "\n"

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.format_usage()}error: {message}\n  hint: {self.hint}\n")
        sys.exit(EXIT_USAGE)


def run(
    argv: Sequence[str],
    *,
    prog: str,
    description: str,
    options: Command,
    commands: Mapping[str, Callable[[], Command]],
) -> None:
    """Parse `argv` and run the command it names: `options` with the global options,
    then the command (`commands` maps each name to what loads its function)."""
    top = _Parser(
        prog,
        "%(prog)s [OPTIONS] COMMAND [ARGS]...",
        description,
        f"`{prog} --help` lists the commands",
    )
    _add_parameters(top, options)
    top.add_argument("command", nargs="?", metavar="COMMAND", help=argparse.SUPPRESS)
    top.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    top.listing = lambda: [(name, summary(load().__doc__ or "")) for name, load in commands.items()]
    if not argv:  # no arguments: the help, as a usage error
        sys.stderr.write(top.format_help())
        sys.exit(EXIT_USAGE)
    parsed = vars(top.parse_args(argv))
    name, rest = parsed.pop("command"), parsed.pop("args")
    if name is None:
        top.error("missing command")
    if name not in commands:
        top.error(f"no such command {name!r}")
    function = commands[name]()
    parser = _Parser(
        f"{prog} {name}",
        "",
        function.__doc__ or "",
        f"`{prog} {name} --help` lists its options",
    )
    arguments = _add_parameters(parser, function)
    parser.usage = " ".join(["%(prog)s [OPTIONS]", *arguments])
    global_only = _flags(top) - _flags(parser)
    own = rest[: rest.index("--")] if "--" in rest else rest
    misplaced = next((a.split("=", 1)[0] for a in own if a.split("=", 1)[0] in global_only), "")
    if misplaced:  # said only if the command's parse fails
        parser.hint = f"{misplaced} goes before the command: {prog} {misplaced} ... {name} ..."
    values = vars(parser.parse_args(rest))
    options(**parsed)
    try:
        function(**values)
    except KeyboardInterrupt:  # 128 + SIGINT, as a shell reports it
        sys.stderr.write("\ninterrupted\n")
        from jb_client.cli_common import interrupted

        interrupted()
    except BrokenPipeError:
        # The reader left (`jb-client ... | head`): say nothing more, as click did.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {f for action in parser._actions for f in action.option_strings if f != "--help"}
