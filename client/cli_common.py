"""What every `jb-client` command shares: the global options, the client they make
from them, and the one way a failure is reported (exit codes: 0 ok, 1 a
failed check, 2 usage or a rejected request, 3 the daemon cannot be reached)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

from jb_client.cli_args import Option
from jb_client.target import FALLBACKS

if TYPE_CHECKING:
    # Loaded where used: the API brings gRPC, which offline commands never need,
    # and the fleet module the verifier and DuckDB.
    from jb_client import render
    from jb_client.api import Client
else:
    from jb_client.later import Later

    # Tables and rich load only where a command prints for people, never for --json.
    render = Later("jb_client.render")

from jouled.errors import JouledError, Kind, UsageError, VerificationError
from jouled.ledger.canonical import MAX_SAFE_INTEGER

CLAIM_MAX = MAX_SAFE_INTEGER

T = TypeVar("T")

EXIT_OK, EXIT_FAILED_CHECK, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

# What `jb-client --help` says the program is.
HELP = "Submit patches to a jouled daemon, read its frontier, verify its ledger."

Json = Annotated[bool, Option("--json", help="Machine-readable output on stdout.")]
Suite = Annotated[str, Option("--suite", help="Only this suite.")]
Wide = Annotated[
    bool | None,
    Option(
        "--wide/--compact", help="Every column, or the compact layout (default: by terminal width)."
    ),
]


class State:
    target: str | None = None
    targets: tuple[str, ...] = ()
    fleet: Path | None = None
    pins: tuple[str, ...] = ()
    token: str | None = None
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    insecure: bool | None = None
    verbose: bool = False


state = State()


# The environment variables `quiet_grpc` set (a command's child process is run without them).
QUIETED: dict[str, str] = {}


def quiet_grpc(env: MutableMapping[str, str] | None = None) -> None:
    """Keep gRPC's C core from logging to the CLI's stderr ("I1207 ... Handshake
    failed"): the CLI reports each failure itself, as one error and a hint. Set before
    gRPC loads, and only where the user has not set them (to debug the transport)."""
    env = os.environ if env is None else env
    for name, value in (("GRPC_VERBOSITY", "NONE"), ("GRPC_TRACE", "")):
        if name not in env:
            env[name] = QUIETED[name] = value


def child_env() -> dict[str, str]:
    """The environment for a command the CLI runs: the user's, without `quiet_grpc`'s."""
    return {k: v for k, v in os.environ.items() if k not in QUIETED}


def main_options(
    target: Annotated[
        list[str] | None,
        Option(
            "--target",
            help=f"unix:PATH or HOST:PORT (default {FALLBACKS}). Repeat it for a fleet "
            "(run, frontier, export).",
        ),
    ] = None,
    fleet: Annotated[
        Path | None,
        Option(help="Fleet file (TOML): [[host]] tables with target and pubkey."),
    ] = None,
    pin: Annotated[
        list[str] | None,
        Option(help="HOST=KEYFILE: the public key pinned for a fleet host (repeatable)."),
    ] = None,
    token: Annotated[
        str | None,
        Option(help="Bearer token (default $JB_TOKEN); over TCP it is how the daemon knows you."),
    ] = None,
    ca: Annotated[
        Path | None,
        Option(help="CA certificate the daemon's TLS certificate chains to ($JB_CA)."),
    ] = None,
    cert: Annotated[Path | None, Option(help="Client certificate for mTLS ($JB_CERT).")] = None,
    key: Annotated[Path | None, Option(help="Client key for mTLS ($JB_KEY).")] = None,
    insecure: Annotated[
        bool | None,
        Option("--insecure", help="Plaintext TCP to a loopback daemon ($JB_INSECURE=1)."),
    ] = None,
    verbose: Annotated[bool, Option("--verbose", "-v", help="Show tracebacks.")] = False,
) -> None:
    state.targets = tuple(target or ())
    state.target = state.targets[0] if state.targets else None
    state.fleet, state.pins = fleet, tuple(pin or ())
    state.token, state.ca, state.cert, state.key = token, ca, cert, key
    state.insecure = insecure
    state.verbose = verbose


def connect() -> Client:
    from jb_client.api import Client

    if len(state.targets) > 1 or state.fleet is not None:
        error(
            "this command talks to one daemon; give --target once "
            "(run, frontier and export take a fleet)"
        )
        raise SystemExit(EXIT_USAGE)
    return Client(
        state.target,
        token=state.token,
        ca=state.ca,
        cert=state.cert,
        key=state.key,
        insecure=state.insecure,
    )


def ask(call: Callable[[Client], T]) -> T:
    """One call to the daemon, its failure reported the one way every command does."""
    try:
        with connect() as c:
            return call(c)
    except JouledError as err:
        fail(err)


def fail(err: JouledError) -> NoReturn:
    if state.verbose:
        raise err
    error(err.diagnostics())
    if isinstance(err, VerificationError):
        raise SystemExit(EXIT_FAILED_CHECK)
    if err.kind == Kind.UNAVAILABLE:
        raise SystemExit(EXIT_UNREACHABLE)
    raise SystemExit(EXIT_USAGE if err.kind != Kind.INTERNAL else EXIT_FAILED_CHECK)


def interrupted() -> NoReturn:
    """Exit 130 (128 + SIGINT, as a shell reports it) at once, once Ctrl-C was answered:
    the gRPC library's shutdown, left to run, may raise the interrupt again and end the
    process by the signal instead."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def error(message: str) -> None:
    """`error: MESSAGE` on stderr, the message (a path, an id, the daemon's words) as
    written: every error the CLI reports goes through here."""
    render.err.print(render.marked("[red]error:[/] {}", message))


def emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


def progress(phase: str, message: str) -> None:
    render.err.print(render.marked("[dim]{}[/] {}", f"{phase:>9}", message))


def read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        fail(UsageError(f"cannot read {path}: {err.strerror}", hint="give a readable file's path"))
