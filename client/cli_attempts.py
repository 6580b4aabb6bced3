"""`jb-client`'s commands that grade: list and fetch tasks, submit a patch, run solvers."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from jb_client.cli_args import Option
from jb_client.cli_common import (
    CLAIM_MAX,
    EXIT_USAGE,
    Json,
    Suite,
    ask,
    connect,
    emit,
    error,
    fail,
    interrupted,
    progress,
    read_file,
    render,
)

if TYPE_CHECKING:
    from jb_client.documents import Receipt

from jb_client.cli_fleet import fleet_run, is_fleet

from jouled.errors import JouledError, UsageError
from jouled.limits import ROLLOUT_MAX


def tasks(suite: Suite = "", as_json: Json = False) -> None:
    """List the tasks the daemon grades."""
    found = ask(lambda c: c.tasks(suite))
    if as_json:
        emit({"tasks": [t.to_dict() for t in found]})
    else:
        render.tasks_table(found)


def fetch(
    task: Annotated[str, Option("--task", help="SUITE/NAME")],
    out: Annotated[
        Path, Option("--out", help="A new or empty directory to write the buggy tree into.")
    ],
    force: Annotated[
        bool, Option("--force", help="Write over what a non-empty --out holds.")
    ] = False,
    as_json: Json = False,
) -> None:
    """Fetch a task's prompt and pristine buggy tree to work on."""
    try:
        with connect() as c:
            meta = c.task(task)
            written = c.fetch(task, out, force=force)
        (out / "PROMPT.md").write_text(meta.prompt + "\n", encoding="utf-8")
    except OSError as err:
        fail(UsageError(f"cannot write {out / 'PROMPT.md'}: {err.strerror}"))
    except JouledError as err:
        fail(err)
    if as_json:
        emit({"task": meta.to_dict(), "files": written, "out": str(out)})
    else:
        render.err.print(f"{task}: {len(written)} files in {out} (prompt in PROMPT.md)")


def _interrupted_submit(signum: int, frame: object) -> None:
    error(
        "interrupted: the daemon stops the attempt; one that had started is signed "
        "as an abort, which no frontier counts (submit again to grade the patch)"
    )
    interrupted()


def submit(
    task: Annotated[str, Option("--task", help="SUITE/NAME")],
    patch: Annotated[Path, Option("--patch", help="Unified diff file ('-' for stdin).")],
    solver: Annotated[
        str, Option(help="Who produced the patch (default: your credential's name).")
    ] = "",
    model: Annotated[str, Option(help="The model behind the solver.")] = "",
    run_id: Annotated[str, Option(help="Groups attempts into a run.")] = "",
    rollout: Annotated[
        int | None,
        Option(
            min=0,
            max=ROLLOUT_MAX,
            help="Rollout index within the run (default: the next free one for this "
            "task, solver, model and run).",
        ),
    ] = None,
    tokens_in: Annotated[int, Option(min=0, max=CLAIM_MAX, help="Claimed input tokens.")] = 0,
    tokens_out: Annotated[int, Option(min=0, max=CLAIM_MAX, help="Claimed output tokens.")] = 0,
    usd_micros: Annotated[
        int, Option(min=0, max=CLAIM_MAX, help="Claimed cost in micro-dollars.")
    ] = 0,
    claimed_joules_mj: Annotated[
        int, Option(min=0, max=CLAIM_MAX, help="Agent-reported mJ (claimed).")
    ] = 0,
    idempotency_key: Annotated[
        str, Option(help="Reuse to retry safely; default: a fresh key.")
    ] = "",
    as_json: Json = False,
) -> None:
    """Grade a patch. An unresolved result is an answer, not a failure (exit 0)."""
    raw = sys.stdin.buffer.read() if str(patch) == "-" else read_file(patch)
    claimed = {
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "usd_micros": usd_micros,
        "joules_mj": claimed_joules_mj,
    }
    # Ctrl-C is answered where it lands, and the process ends there (the daemon sees the
    # call end): raised as KeyboardInterrupt through the gRPC library's wait and then the
    # channel's close, it once left the client hanging on a busy host.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _interrupted_submit) if main else None
    try:
        with connect() as c:
            receipt = c.submit(
                task,
                raw,
                solver=solver,
                model=model,
                run_id=run_id,
                rollout=rollout,
                claimed=claimed,
                idempotency_key=idempotency_key,
                progress=progress,
            )
    except JouledError as err:
        fail(err)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    if as_json:
        emit(receipt.to_dict())
    else:
        render.receipt_line(receipt)
        if not receipt.resolved:
            render.failure_lines(receipt)


def run(
    suite: Annotated[str, Option("--suite", help="The suite to run.")],
    solvers: Annotated[
        str, Option(help="Daemon-hosted solvers, comma separated.")
    ] = "reference,noop",
    rollouts: Annotated[
        int, Option(min=1, max=ROLLOUT_MAX, help="Attempts per task and solver.")
    ] = 1,
    run_id: Annotated[str, Option(help="Default: a fresh id.")] = "",
    model: Annotated[str, Option(help="The model a command solver runs (default: its own).")] = "",
    as_json: Json = False,
) -> None:
    """Run daemon-hosted solvers (built-in or agent CLIs) over a suite, then its frontier.

    With several targets (or --fleet) the suite is spread across the hosts and the
    frontier merges their verified ledgers.
    """
    names = [s.strip() for s in solvers.split(",") if s.strip()]
    if not names:
        fail(
            UsageError(
                f"--solvers {solvers!r} names no solver",
                hint="name the daemon-hosted solvers to run, comma separated "
                "(e.g. --solvers reference,noop)",
            )
        )
    if is_fleet():
        return fleet_run(suite, solvers, rollouts, run_id, model, as_json)
    run_id = run_id or os.urandom(6).hex()
    receipts: list[Receipt] = []
    try:
        with connect() as c:
            hosted = c.solvers()
            unknown = [name for name in names if name not in hosted]
            if unknown:  # before any attempt: a typo must not come after signed work
                raise UsageError(
                    f"the daemon hosts no solver {', '.join(map(repr, unknown))}",
                    hint=f"it hosts {', '.join(hosted)}; other solvers submit patches "
                    "(jb-client submit)",
                )
            found = c.tasks(suite)
            if not found:
                error(f"no tasks in suite {suite!r}")
                raise SystemExit(EXIT_USAGE)
            total = len(found) * len(names) * rollouts
            n = 0
            for solver in names:
                for rollout in range(rollouts):
                    for t in found:
                        n += 1
                        render.err.print(
                            f"[{n}/{total}] {solver} r{rollout} {t.task_id}", highlight=False
                        )
                        # The key makes a re-run of the same run id resume, not duplicate.
                        key = f"{run_id}:{solver}:{model}:{rollout}:{t.task_id}"
                        r = c.run_solver(
                            t.task_id,
                            solver,
                            run_id=run_id,
                            rollout=rollout,
                            idempotency_key=key,
                            model=model,
                        )
                        receipts.append(r)
                        if not as_json:
                            render.receipt_line(r)
            rows = c.frontier(suite).rows
    except JouledError as err:
        fail(err)
    if as_json:
        emit(
            {
                "run_id": run_id,
                "receipts": [r.to_dict() for r in receipts],
                "frontier": [r.to_dict() for r in rows],
            }
        )
    else:
        render.frontier_table(rows)
