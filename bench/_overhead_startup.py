"""Every `jb-client` command's start-up against `python -c "import grpc"`
(`--startup-only` runs only this)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from _overhead_fixtures import (
    TASK_ID,
    Scratch,
    Series,
    _bytecode_env,
    _cli,
    _ms,
    _row,
    _run_quiet,
    timed,
)

# The aim (issue 24): each command's fixed start-up at most this many times
# `python -c "import grpc"` in the same environment.
STARTUP_AIM = 1.5
GRPC_IMPORT = '`python -c "import grpc"`'
# The libraries every command that calls the daemon needs: gRPC, the generated stubs
# (protobuf) and the CLI's parser (argparse; typer before the switch in cli_args).
FLOOR_IMPORTS = "import grpc, argparse, jouled.v1.jouled_pb2_grpc"


@dataclass
class Startup:
    rows: list[tuple[str, str, Series]]  # (label, what it pays for, samples)
    baseline: Series  # `python -c "import grpc"`
    bare: Series  # `python -c pass`
    floor: Series  # FLOOR_IMPORTS: what a command that calls the daemon cannot do without
    uncached: Series  # `jb-client tasks --json` compiling the project's modules on every run
    load_before: float
    load_after: float


def _startup_commands(target: str, scratch: Scratch, seq: int) -> list[tuple[str, str, list[str]]]:
    """(label, kind, argv) of each command: one cheap real call each, and --help for the rest.

    "daemon": a whole run of the command against a warm daemon with a one-result
    ledger (the call itself is a few ms of it); "offline": a whole run on small files;
    "help": the command's own `--help`, i.e. parsing and its module's imports.
    """
    cli = _cli()
    t = ["--target", target]
    files = scratch.fresh("startup-files")
    files.mkdir()
    export = files / "ledger.jsonl"
    subprocess.run([*cli, *t, "export", "--out", str(export)], check=True, capture_output=True)
    receipt = files / "receipt.json"
    done = subprocess.run(
        [*cli, *t, "receipt", "--seq", str(seq), "--json"], check=True, capture_output=True
    )
    receipt.write_bytes(done.stdout)
    pubkey = Path(target.removeprefix("unix:")).with_name("jouled.pub")
    work = files / "work"
    daemon_calls = [
        ["tasks", "--json"],
        ["fetch", "--task", TASK_ID, "--out", str(work), "--force", "--json"],
        ["frontier", "--json"],
        ["bestofk", "--json"],
        ["receipt", "--seq", str(seq), "--json"],
        ["logs", "--seq", str(seq), "--json"],
        ["keys", "--json"],
        ["checkpoint", "--json"],
        ["proof", "--seq", str(seq), "--json"],
        ["consistency", "--old", "1", "--json"],
        ["meter", "--json"],
    ]
    offline = [
        ["verify", str(export), "--pubkey", str(pubkey), "--json"],
        ["audit", str(receipt), "--pubkey", str(pubkey), "--json"],
        ["frontier", "--from-export", str(export), "--json"],
    ]
    # Commands whose real run is not start-up (an attempt, a calibration, an export's
    # Parquet snapshot): their --help is what every run of them pays before it works.
    helped = [
        "submit", "run", "compare", "swebench", "export", "verify", "calibrate", "meter-run",
        "report",
    ]  # fmt: skip
    out = [("`jb-client --help`", "help", [*cli, "--help"])]
    for a in daemon_calls:
        label = " ".join([a[0], *(x for x in a[1:] if x in ("--force", "--json"))])
        out.append((f"`jb-client {label}`", "daemon", [*cli, *t, *a]))
    out.append(("`jb-client audit --json`", "offline", [*cli, *offline[1]]))
    # Verifying an export is the command's work, not its start-up: every signature, the
    # Merkle root, and the Parquet snapshot read back through DuckDB (~0.1 s to import).
    out.append(("`jb-client verify --json`", "work", [*cli, *offline[0]]))
    out.append(("`jb-client frontier --from-export --json`", "work", [*cli, *offline[2]]))
    out += [(f"`jb-client {name} --help`", "help", [*cli, name, "--help"]) for name in helped]
    return out


def startup(target: str, scratch: Scratch, seq: int, repeats: int) -> Startup:
    """Each command's whole run against `python -c "import grpc"`, interleaved round by round."""
    commands = _startup_commands(target, scratch, seq)
    # Every module's bytecode cached, as an installed wheel has it (an editable install
    # under PYTHONDONTWRITEBYTECODE=1 compiles the project's sources on every run; the
    # `uncached` row shows what that adds), in a private prefix, not the source tree.
    env = _bytecode_env(write=True, pycache=scratch.fresh("startup-pycache"))
    grpc_argv = [sys.executable, "-c", "import grpc"]
    tasks_argv = next(a for label, _, a in commands if label == "`jb-client tasks --json`")
    floor_argv = [sys.executable, "-c", FLOOR_IMPORTS]
    baseline, bare, floor = Series("import grpc"), Series("pass"), Series("floor")
    uncached = Series("`jb-client tasks --json`, no bytecode for the project's modules")
    series = [Series(label) for label, _, _ in commands]
    load_before = os.getloadavg()[0]
    for argv in [grpc_argv, floor_argv, *(a for _, _, a in commands)]:  # warm every cache
        _run_quiet(argv, env)
    for _ in range(repeats):
        baseline.add(timed(partial(_run_quiet, grpc_argv, env))[0])
        bare.add(timed(partial(_run_quiet, [sys.executable, "-c", "pass"], env))[0])
        floor.add(timed(partial(_run_quiet, floor_argv, env))[0])
        for (_, _, argv), s in zip(commands, series, strict=True):
            s.add(timed(partial(_run_quiet, argv, env))[0])
        uncached.add(timed(partial(_run_quiet, tasks_argv, _bytecode_env(write=False)))[0])
    rows = [(label, kind, s) for (label, kind, _), s in zip(commands, series, strict=True)]
    return Startup(rows, baseline, bare, floor, uncached, load_before, os.getloadavg()[0])


def render_startup(r: Startup, repeats: int) -> str:
    base = r.baseline.median_ms
    lines = [
        "## Every command's start-up against `import grpc`",
        "",
        f"- Host: nproc {len(os.sched_getaffinity(0))} (of {os.cpu_count()} CPUs), "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
        f"load average {r.load_before:.2f} at start, {r.load_after:.2f} at the end",
        f"- Repeats: {repeats} per row, every row once per round (interleaved); medians",
        f"- Baseline: {GRPC_IMPORT} {_ms(base)} ms (IQR {_ms(r.baseline.iqr_ms)}); "
        f'`python -c pass` {_ms(r.bare.median_ms)} ms; `python -c "{FLOOR_IMPORTS}"` '
        f"{_ms(r.floor.median_ms)} ms ({r.floor.median_ms / base:.2f}x): the floor of a "
        "command that calls the daemon, before any of its own code",
        f"- Aim: each command at most {STARTUP_AIM}x the baseline",
        "",
        _row("Command", "Kind", "Median ms", "IQR ms", "Ratio to import grpc", "Aim"),
        _row("---", "---", "---:", "---:", "---:", "---"),
    ]
    for label, kind, s in r.rows:
        ratio = s.median_ms / base
        lines.append(
            _row(
                label,
                kind,
                _ms(s.median_ms),
                _ms(s.iqr_ms),
                f"{ratio:.2f}",
                "(not start-up)"
                if kind == "work"
                else "met"
                if ratio <= STARTUP_AIM
                else f"over by {_ms(s.median_ms - STARTUP_AIM * base)} ms",
            )
        )
    starts = [s for _, kind, s in r.rows if kind != "work"]
    met = sum(s.median_ms <= STARTUP_AIM * base for s in starts)
    tasks = next(s for label, _, s in r.rows if label == "`jb-client tasks --json`")
    lines += [
        "",
        f'- {met} of {len(starts)} start-up rows within {STARTUP_AIM}x. "daemon" rows are '
        "whole runs against a warm daemon with a one-result ledger (the call itself is a few "
        'ms); "offline" a whole `audit` of one receipt; "help" rows the command\'s '
        "`--help`: parsing and its own module's imports, the fixed part of every run of it. "
        '"work" rows verify that ledger\'s export and are not start-up (not counted).',
        f"- Bytecode: every row runs with every module's bytecode cached (a private "
        "`PYTHONPYCACHEPREFIX`), as an installed wheel has it. Without bytecode for the "
        "project's own modules (this editable install under `PYTHONDONTWRITEBYTECODE=1`), "
        f"`jb-client tasks --json` takes {_ms(r.uncached.median_ms)} ms "
        f"({r.uncached.median_ms / base:.2f}x), {_ms(r.uncached.median_ms - tasks.median_ms)} "
        "ms of compiling.",
        "",
    ]
    return "\n".join(lines)
