"""`jb-client`'s meter commands: status, calibration and metering a command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from jb_client.cli_args import Argument, Option
from jb_client.cli_common import (
    EXIT_USAGE,
    Json,
    ask,
    child_env,
    connect,
    emit,
    error,
    fail,
    render,
)

if TYPE_CHECKING:
    pass

from jouled.errors import JouledError, UsageError
from jouled.limits import ROLLOUT_MAX


def meter(as_json: Json = False) -> None:
    """Energy sources, domains, idle calibration, floors and attribution policy."""
    status = ask(lambda c: c.meter())
    if as_json:
        emit(status.to_dict())
    else:
        render.meter_table(status)


def calibrate(
    seconds: Annotated[int, Option(min=1, max=600, help="Seconds of quiet to sample.")] = 10,
    as_json: Json = False,
) -> None:
    """Re-measure idle power on the daemon's host (keep the host quiet meanwhile)."""
    cal = ask(lambda c: c.calibrate(seconds))
    if as_json:
        emit(cal.to_dict())
    else:
        render.kv(f"calibration (ledger entry {cal.seq})", cal)


def meter_run(
    command: Annotated[list[str], Argument(help="The command to meter, after `--`.")],
    label: Annotated[str, Option("--label", help="What the command is (a short name).")],
    task: Annotated[str, Option("--task", help="The task it works on (SUITE/NAME).")] = "",
    run_id: Annotated[str, Option(help="The run the work belongs to.")] = "",
    rollout: Annotated[
        int, Option(min=0, max=ROLLOUT_MAX, help="Rollout index within the run.")
    ] = 0,
    receipt_file: Annotated[
        Path | None, Option("--receipt", help="Write the op receipt (JSON) here.")
    ] = None,
    as_json: Json = False,
) -> None:
    """Run a command on the daemon's host inside a metered op window; exit with its status.

    The command keeps this terminal; the signed receipt follows on stderr, or as
    JSON on stdout after the command's own output with --json.
    """
    import subprocess

    _check_runnable(command[0])
    if receipt_file is not None:
        # Before the window opens: a receipt that cannot be written is a usage error,
        # not an op window signed and then lost.
        _check_writable(receipt_file)
    status = EXIT_USAGE
    try:
        with connect() as c, c.op(label, task_id=task, run_id=run_id, rollout=rollout) as window:
            try:
                status = subprocess.run(command, env=child_env()).returncode
            except OSError as err:
                error(f"cannot run {command[0]}: {err.strerror}")
                status = 127
    except JouledError as err:
        fail(err)
    receipt = window.receipt
    assert receipt is not None
    if as_json:
        emit(receipt.to_dict())
    else:
        render.op_receipt_line(receipt)
    if receipt_file is not None:
        try:
            receipt_file.write_text(json.dumps(receipt.to_dict(), indent=2, sort_keys=True) + "\n")
        except OSError as err:
            from jb_client.errors import write_error

            fail(write_error(receipt_file, err))
    raise SystemExit(status if status >= 0 else 128 - status)


def _check_writable(path: Path) -> None:
    """Fail with a usage error unless `path` is a file that can be written (or created)."""
    import os

    hint = "name a file in a directory you can write, for --receipt"
    if path.is_dir():
        fail(UsageError(f"--receipt {path} is a directory", hint=hint))
    parent = path.parent
    if not parent.is_dir():
        fail(UsageError(f"cannot write --receipt {path}: no directory {parent}", hint=hint))
    if not os.access(path if path.exists() else parent, os.W_OK):
        fail(UsageError(f"cannot write --receipt {path}: permission denied", hint=hint))


def _check_runnable(program: str) -> None:
    """Fail with a usage error, before any window opens, unless `program` is found and
    executable: a command that cannot start has no energy to sign."""
    import os
    import shutil

    hint = "give the command's path, or a name on your $PATH, after `--`"
    if os.sep in program:
        if not os.path.isfile(program):
            fail(UsageError(f"cannot run {program}: no such file", hint=hint))
        if not os.access(program, os.X_OK):
            fail(UsageError(f"cannot run {program}: not executable", hint=hint))
    elif shutil.which(program) is None:
        fail(UsageError(f"cannot run {program}: not found on $PATH", hint=hint))
