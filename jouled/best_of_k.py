"""Best-of-k: the share of tasks an agent would solve with k rollouts, picking the one it
would submit from what it could see (counting rules: `jouled.frontier`)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jouled.documents.answers import BestOfKRow
from jouled.frontier import USD_SOURCE, pass_at_k
from jouled.frontier_attempts import (
    ERROR,
    TAMPERED,
    Attempt,
    RowKey,
    digest_set_id,
    grouped,
    select_visible,
)


def _best_of_k_row(key: RowKey, by_task: Mapping[str, Sequence[Attempt]], k: int) -> dict[str, Any]:
    """The row as docs/protocol.md describes it (`BestOfKRow`), as its JSON object."""
    # "Within k" follows rollout indices, so repeated (task, rollout) samples
    # both fall inside the same k; pass@k instead treats every sample as a draw.
    first_k = [a for samples in by_task.values() for a in samples if a.rollout < k]
    solved = {a.task_id for a in first_k if a.resolved}
    picks = [select_visible([a for a in by_task[t] if a.rollout < k]) for t in by_task]
    selected = sum(1 for a in picks if a is not None and a.resolved)
    # Sorted so the mean sums in the same order whatever order the ledger came in.
    estimable = [by_task[t] for t in sorted(by_task) if len(by_task[t]) >= k]
    estimates = [pass_at_k(len(s), sum(a.resolved for a in s), k) for s in estimable]
    tasks = len(by_task)
    return BestOfKRow(
        suite=key[0],
        solver=key[1],
        model=key[2],
        revision=key[3],
        digest_set=digest_set_id((t, s[0].task_digest) for t, s in by_task.items()),
        k=k,
        tasks=tasks,
        attempts=len(first_k),
        resolved_within_k=len(solved),
        resolution_within_k=len(solved) / tasks,
        # Without the oracle: the rollout chosen by `select_visible`, per task.
        selected_resolved=selected,
        selected_resolution=selected / tasks,
        joules_cumulative=sum(a.energy.gross_mj for a in first_k) / 1000,
        invalid_windows=sum(a.energy.invalid_windows for a in first_k),
        tampered=sum(a.status == TAMPERED for a in first_k),
        # Null when none of the first k claimed: unknown, never $0 (as the frontier's usd_total).
        usd_cumulative=sum(a.usd_micros for a in first_k) / 1_000_000
        if any(a.usd_micros for a in first_k)
        else None,
        usd_source=USD_SOURCE,
        pass_at_k=statistics.fmean(estimates) if estimates else None,
        pass_at_k_tasks=len(estimable),
    ).to_dict()


def best_of_k(
    results: Iterable[Mapping[str, Any]], *, suite: str | None = None
) -> list[dict[str, Any]]:
    """Per (suite, solver, model, revision) and k = 1..N: what the first k rollouts bought.

    N is one more than the highest rollout index seen for the group; k runs over
    `k_ladder(N)` (every k up to 32, then sparser, always N). Tasks
    resolved within the first k rollouts stand against the joules and claimed
    dollars those rollouts cost; `pass_at_k` is the unbiased estimate averaged
    over the tasks that have at least k samples (`pass_at_k_tasks` of them;
    null when none has). Error attempts are left out and revisions kept apart,
    as in the frontier; `usd_cumulative` sums the dollars the attempts claimed
    (null when none of them claimed, as the frontier's `usd_total`).

    `resolved_within_k` asks the oracle (any of the first k resolved): an upper
    bound no deployed agent reaches. `selected_resolved` is what an agent gets
    that picks one of its first k rollouts with only what it can see
    (`select_visible`: its visible tests, then agreement between identical
    patches); both stand against the same cumulative joules and dollars.
    """
    rows: list[dict[str, Any]] = []
    groups = grouped(results, suite)
    for key in sorted(groups):
        by_task: dict[str, list[Attempt]] = defaultdict(list)
        for attempt in groups[key]:
            if attempt.status != ERROR:
                by_task[attempt.task_id].append(attempt)
        if not by_task:
            continue
        n_rollouts = 1 + max(a.rollout for samples in by_task.values() for a in samples)
        rows.extend(_best_of_k_row(key, by_task, k) for k in k_ladder(n_rollouts))
    return rows


# Best-of-k has a row for every k up to this, then for k growing by an eighth at a time.
BEST_OF_K_DENSE = 32
BEST_OF_K_GROWTH = 1.125


def k_ladder(n: int) -> list[int]:
    """The k a group of N rollouts gets a best-of-k row for: 1..32, then k growing by an
    eighth (rounded up) each row, always ending at N.

    The rows a group costs grow with the logarithm of its highest rollout index, not
    with the index: 80 rows for 10,001 rollouts (the most a submission may number),
    120 for a million.
    """
    ks = list(range(1, min(n, BEST_OF_K_DENSE) + 1))
    k = len(ks)
    while k < n:
        k = min(n, max(k + 1, math.ceil(k * BEST_OF_K_GROWTH)))
        ks.append(k)
    return ks
