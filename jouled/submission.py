"""A submission and the attempt it asks for, checked before it is queued."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from jouled import limits
from jouled.auth import Identity
from jouled.contracts import TaskRegistry
from jouled.documents.bodies import ResultBody
from jouled.errors import DeniedError, UsageError
from jouled.ledger.entry import Entry
from jouled.patch import Patch, parse_patch, patch_sha256
from jouled.pipeline.evaluate import Attempt
from jouled.solvers import Solvers

CLAIMED_KEYS = ("tokens_in", "tokens_out", "usd_micros", "joules_mj")


@dataclass(frozen=True)
class Submission:
    """What a client asks the daemon to grade."""

    task_id: str
    patch: bytes | None  # None: run a daemon-hosted solver
    solver: str
    model: str = ""
    agent: str = ""
    run_id: str = ""
    rollout: int | None = 0  # None: the next free index of (task, solver, model, run) (rollouts.py)
    claimed: Mapping[str, int] = field(default_factory=dict)
    idempotency_key: str = ""
    # Who asks: names its results and bounds what it may sign. None: an in-process
    # caller the daemon trusts (tests, tools), whose names are taken as given.
    caller: Identity | None = None


def attempt_of(
    sub: Submission, registry: TaskRegistry, solvers: Solvers, *, max_patch_bytes: int
) -> Attempt:
    """The attempt a submission asks for, checked: its task, solver, names and patch."""
    limits.task_id(sub.task_id)
    contract = registry.get(sub.task_id)
    caller = sub.caller
    if sub.patch is None and not solvers.is_hosted(sub.solver):
        raise UsageError(
            f"solver {sub.solver!r} cannot run in the daemon",
            hint=f"daemon-hosted solvers are {', '.join(solvers.names)}; "
            "other solvers submit patches (operators declare agent CLIs with --solvers)",
        )
    if sub.patch is not None and solvers.is_hosted(sub.solver):
        raise DeniedError(
            f"solver {sub.solver!r} is reserved: the daemon runs it itself, so a "
            "submitted patch cannot be signed under its name",
            hint="submit under your own solver name",
        )
    solver = sub.solver or ("remote" if sub.patch is not None else "")
    agent = sub.agent
    if caller is not None:
        if sub.patch is not None:
            solver = caller.solver_for(sub.solver)
        if sub.agent and sub.agent != caller.name:
            raise UsageError(
                f"agent {sub.agent[:40]!r} is not the caller: results name the "
                f"credential's holder ({caller.name}) as their agent",
                hint="leave the agent out",
            )
        agent = caller.name
    limits.attempt_request(
        sub.task_id,
        solver,
        model=sub.model,
        agent=agent,
        run_id=sub.run_id,
        rollout=sub.rollout or 0,
        idempotency_key=sub.idempotency_key,
    )
    claimed = {}
    for k, v in sub.claimed.items():
        if k not in CLAIMED_KEYS:
            raise UsageError(f"unknown claimed figure {k!r}", hint=", ".join(CLAIMED_KEYS))
        if v:
            claimed[k] = limits.integer(f"claimed {k}", int(v))
    patch = None
    if sub.patch is not None:
        if not sub.patch.strip():
            # An empty prediction is an answer: the pristine tree is graded, unresolved.
            patch = Patch((), patch_sha256(b""))
        else:
            patch = parse_patch(sub.patch, max_bytes=max_patch_bytes)
    return Attempt(
        contract=contract,
        patch=patch,
        solver=solver,
        model=sub.model,
        agent=agent,
        run_id=sub.run_id,
        rollout=sub.rollout or 0,  # a next free index is taken only once it is queued
        claimed=claimed,
        idempotency_key=sub.idempotency_key,
        attempt_id=uuid.uuid4().hex,
    )


def check_same(previous: Entry, attempt: Attempt) -> None:
    body = ResultBody.parse(previous.body, where=f"entry {previous.seq}: result body")
    same_patch = attempt.patch is None or body.patch_sha256 == attempt.patch.sha256
    if body.task_id != attempt.contract.task_id or not same_patch:
        raise UsageError(
            f"idempotency key {attempt.idempotency_key!r} was already used for a different "
            f"submission (entry {previous.seq}, {body.task_id})",
            hint="use a fresh idempotency key for each distinct submission",
        )
