"""One `result` body as the frontier counts it: its group, status, counted energy,
claims and revision (the counting rules are `jouled.frontier`'s docstring)."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jouled.documents.vocabulary import INTEGRITY_LEVELS, STATUSES, Status
from jouled.errors import UsageError

RESOLVED, UNRESOLVED, TIMEOUT, ERROR, INVALID, TAMPERED = (s.value for s in Status)

COUNTED_PHASES = ("solve", "grade")

Key = tuple[str, str, str]  # (suite, solver, model)
RowKey = tuple[str, str, str, int]  # (suite, solver, model, revision)
OpKey = tuple[str, str, str, int]  # (agent, task_id, run_id, rollout)


@dataclass(frozen=True)
class Energy:
    """The counted phases of one attempt, summed."""

    gross_mj: int  # valid windows only
    marginal_mj: int
    wall_ms: int
    windows: int
    reliable_windows: int
    invalid_windows: int
    sources: frozenset[str]


@dataclass(frozen=True)
class Attempt:
    suite: str
    solver: str
    model: str
    task_id: str
    rollout: int
    status: str
    resolved: bool
    energy: Energy
    usd_micros: int
    claimed_mj: int
    audit_flagged: bool = False
    visible_passed: float = 0.0  # share of the visible expected tests that passed
    patch_sha256: str = ""
    agent: str = ""
    run_id: str = ""
    task_digest: str = ""
    integrity: int = 0  # the rank of its `integrity.level` in INTEGRITY_LEVELS

    @property
    def key(self) -> Key:
        return (self.suite, self.solver, self.model)

    @property
    def claims_usd(self) -> bool:
        return self.usd_micros > 0

    @property
    def op_key(self) -> OpKey:
        return (self.agent, self.task_id, self.run_id, self.rollout)


@dataclass
class OpSum:
    """The op windows signed for one (agent, task, run, rollout)."""

    marginal_mj: int = 0
    windows: int = 0
    reliable: int = 0
    abandoned: int = 0

    def add(self, other: OpSum) -> None:
        self.marginal_mj += other.marginal_mj
        self.windows += other.windows
        self.reliable += other.reliable
        self.abandoned += other.abandoned


def parse_op(body: Mapping[str, Any]) -> tuple[OpKey, OpSum] | None:
    """An `op` body's key and energy; None when it names no task."""
    task_id = str(body.get("task_id") or "")
    if not task_id:
        return None
    key = (
        str(body.get("agent") or ""),
        task_id,
        str(body.get("run_id") or ""),
        int(body.get("rollout") or 0),
    )
    window = body.get("energy")
    window = window if isinstance(window, Mapping) else {}
    valid = _window_is_valid(window)
    return key, OpSum(
        marginal_mj=int(window["marginal_mj"]) if valid else 0,
        windows=1,
        reliable=int(valid and window.get("reliable") is True),
        abandoned=int(body.get("abandoned") is True),
    )


def suite_of(body: Mapping[str, Any]) -> str:
    suite = body.get("suite")
    if suite:
        return str(suite)
    return str(body.get("task_id", "")).split("/", 1)[0]


def _window_is_valid(window: Mapping[str, Any]) -> bool:
    if window.get("valid") is False:
        return False
    return window.get("gross_mj") is not None and window.get("marginal_mj") is not None


def _counted_energy(energy: Mapping[str, Any]) -> Energy:
    gross = marginal = wall = windows = reliable = invalid = 0
    sources: set[str] = set()
    for phase in COUNTED_PHASES:
        window = energy.get(phase)
        if not isinstance(window, Mapping):
            continue  # the phase did not run
        windows += 1
        # The clock kept running through a failed energy read, so wall still counts.
        wall += int(window.get("wall_ms") or 0)
        sources.add(str(window.get("source", "")))
        if _window_is_valid(window):
            gross += int(window["gross_mj"])
            marginal += int(window["marginal_mj"])
            reliable += bool(window.get("reliable"))
        else:
            invalid += 1
    return Energy(gross, marginal, wall, windows, reliable, invalid, frozenset(sources))


def _integrity_rank(level: object) -> int:
    """A result's `integrity.level` as its rank in INTEGRITY_LEVELS; unknown or absent: none."""
    return INTEGRITY_LEVELS.index(level) if level in INTEGRITY_LEVELS else 0


def parse_attempt(body: Mapping[str, Any]) -> Attempt:
    task_id = str(body.get("task_id", ""))
    status = body.get("status")
    if status not in STATUSES:
        raise UsageError(
            f"result for {task_id!r} has unknown status {status!r}",
            hint="the ledger was written by a newer jouled; upgrade jb-client",
        )
    rollout = int(body.get("rollout") or 0)
    if rollout < 0:
        raise UsageError(f"result for {task_id!r} has negative rollout {rollout}")
    claimed = body.get("claimed") or {}
    integrity = body.get("integrity")
    return Attempt(
        suite=suite_of(body),
        solver=str(body.get("solver") or ""),
        model=str(body.get("model") or ""),
        task_id=task_id,
        rollout=rollout,
        status=status,
        resolved=status == RESOLVED and body.get("resolved") is True,
        energy=_counted_energy(body.get("energy") or {}),
        usd_micros=int(claimed.get("usd_micros") or 0),
        claimed_mj=int(claimed.get("joules_mj") or 0),
        audit_flagged=isinstance(body.get("audit"), list) and bool(body["audit"]),
        visible_passed=_visible_share(body),
        patch_sha256=str(body.get("patch_sha256") or ""),
        agent=str(body.get("agent") or ""),
        run_id=str(body.get("run_id") or ""),
        task_digest=str(body.get("task_digest") or ""),
        integrity=_integrity_rank(
            integrity.get("level") if isinstance(integrity, Mapping) else None
        ),
    )


class Revisions:
    """Each task's digests, numbered in the order they first appear."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, int]] = {}

    def of(self, a: Attempt) -> int:
        return self.see(a.task_id, a.task_digest)

    def see(self, task_id: str, task_digest: str) -> int:
        digests = self._seen.setdefault(task_id, {})
        return digests.setdefault(task_digest, len(digests))


def digest_set_id(pairs: Iterable[tuple[str, str]]) -> str:
    """The id of a set of (task_id, task_digest) pairs: equal sets, equal ids."""
    lines = sorted({f"{task}\0{digest}" for task, digest in pairs})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _visible_share(body: Mapping[str, Any]) -> float:
    """What share of the tests an agent could run itself passed (all expected ids when
    the result does not say which were hidden)."""
    tests = body.get("tests_visible") or body.get("tests") or {}
    expected = int(tests.get("expected") or 0)
    return int(tests.get("passed") or 0) / expected if expected else 0.0


def select_visible(samples: Sequence[Attempt]) -> Attempt | None:
    """The rollout an agent would submit, seeing only what it could see.

    Most visible tests passing first; among equals, the patch the most rollouts
    produced (identical patches agreeing); then the earliest rollout.
    """
    if not samples:
        return None
    votes = Counter(a.patch_sha256 for a in samples)
    return min(samples, key=lambda a: (-a.visible_passed, -votes[a.patch_sha256], a.rollout))


def grouped(results: Iterable[Mapping[str, Any]], suite: str | None) -> dict[RowKey, list[Attempt]]:
    groups: dict[RowKey, list[Attempt]] = defaultdict(list)
    revisions = Revisions()
    for body in results:
        attempt = parse_attempt(body)
        revision = revisions.of(attempt)  # numbered over every suite, as in `Frontier`
        if suite is None or attempt.suite == suite:
            groups[(*attempt.key, revision)].append(attempt)
    return groups
