"""Aggregate result entries into frontier rows and a Pareto flag (best-of-k curves:
`jouled.best_of_k`; several hosts' ledgers: `jouled.frontier_fleet`).

Pure functions over `result` entry bodies (docs/ledger.md, `result`): the daemon
feeds them from its ledger and `jb-client` from an export, so both print the
same numbers.

Counting rules, decided once here so every consumer agrees:

- Attempts are grouped by (suite, solver, model, revision). The suite is the
  body's `suite`, else the part of `task_id` before the first "/".
- A task's `task_digest` is its content hash: results at two digests of one
  task graded different work and are never pooled by default. A task's
  digests are numbered in the order they first appear in the ledger (0 for
  the first, 1 for the one after the task changed, ...), and that number is
  the attempt's `revision`. Rows of one (suite, solver, model) at different
  revisions stay apart, each with its `revision` and its `digest_set`: an id
  (the first 16 hex digits of SHA-256 over the sorted "task_id NUL
  task_digest" lines it covers) that two rows share exactly when they graded
  the same versions of the same tasks. The daemon and an export read the
  ledger in the same order, so they number revisions alike. Pareto flags are
  set within one (suite, revision): the attempts on a changed task compete
  with each other, not with the suite's older rows.
- `merge_digests` (`jb-client frontier --merge-digests`, served or offline) pools a
  (suite, solver, model)'s revisions into one row on request: its `revision`
  is null and `merged_digests` counts the tasks whose several digests it
  pools (0 in every row that pools none).
- `error` attempts are infrastructure faults, not the solver's doing: they are
  left out of attempts, energy, dollars and best-of-k, and counted in `errors`.
- `invalid` attempts (the task's baseline did not fail) stay in `attempts` and
  in the energy totals, because the work ran and the solver was asked, but are
  never resolved; they are counted in `invalid`.
- `tampered` attempts (the run's canaries did not come out as planted: its
  report was forged) are treated as `invalid` ones: in `attempts` and the
  energy totals, never resolved, counted in `tampered` (best-of-k too).
- `audit_flagged` counts the attempts (errors aside) whose patch earned any
  audit flag; flags are evidence for a reader and change no other column.
- `integrity` is the weakest report integrity (`none` < `reduced` <
  `monitor`, a result's `integrity.level`) among the row's resolved attempts:
  how far the successes it counts hold against the code under test. A result
  that records no level counts as `none`; the column is null when nothing
  resolved.
- An attempt is resolved only when its status is `resolved` *and* its
  `resolved` flag is true: two fields that disagree do not earn a success.
- An attempt's cost is the energy of its `solve` phase (when the daemon ran
  the solver) plus its `grade` phase. `baseline` is excluded: it runs once per
  task digest and is cached, so charging it to whichever attempt came first
  would make the same work cost different amounts. `seed` and `apply` are
  in each result's breakdown and `energy_total`, not here: they are a few
  milliseconds each, below every meter's floor, and would mark every row
  unreliable for joules that do not tell solvers apart.
- A window whose read failed (`valid: false`, or null figures) adds no joules,
  counts as unreliable in `reliable_share`, and is counted in
  `invalid_windows`, so a total short of some energy says so.
- `wall_median_s` is the median, over attempts that ran a counted phase, of
  each attempt's solve + grade wall time (null when none ran one).
- A group holding only `error` attempts still gets a row, so its faults are
  seen: zero attempts, resolution 0.0, interval (0.0, 1.0).
- Joules are attested (daemon-measured); `claimed_joules` and the dollar
  columns are agent-reported (`usd_source: "claimed"`) and never added to them.
- Dollars count only the attempts that claim them: a positive
  `claimed.usd_micros` (on the wire an unset proto3 field reads 0, so a claim
  of $0 cannot be told from no claim). `usd_total` sums the claims and is null
  when no attempt claimed; `usd_per_resolved` divides it by the resolved
  attempts that claimed (null when none did); `usd_claimed_share` is the share
  of attempts that claimed (null with no attempts). An attempt that claims
  nothing never counts as $0.
- On the "usd" axis a row whose `usd_claimed_share` is below 1 gets
  `pareto: null`: its dollar cost is not known, so it neither joins nor
  blocks the frontier. A row that resolved nothing is still `false` (below).
- `energy_source` is the one source label every counted window carries
  ("estimator", "rapl+nvml", ...), `"mixed:"` followed by the sorted distinct
  labels joined with "," when windows disagree (their joules are not
  comparable with each other), or "none" when no window was counted.
- A row that resolved nothing is never on the Pareto frontier, whatever the
  axis: what it spent bought no success, so its cost per success is infinite.
- `op_joules` is the marginal energy of the agent's own `op` windows (metered
  operations of an agent that runs on the daemon's host: inference, tool
  calls, episodes) that name one of the row's attempts: the same agent,
  task_id, run_id and rollout as a counted (non-error) attempt. It is summed
  once per (agent, task, run, rollout), however many results share that key.
  Every valid window counts, abandoned and unattributed ones included: a
  window left open can only overstate the agent's cost, never lower it.
  `op_windows` counts them, `op_reliable_share` says how many are comparable,
  `op_abandoned` how many the daemon had to close. The column stands beside
  the daemon-measured `joules_*` columns and is never added to them: op
  windows are opened at the agent's discretion, so they attest what the agent
  chose to meter, not everything it spent.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jouled.documents.sent import FrontierRow
from jouled.documents.vocabulary import INTEGRITY_LEVELS, STATUSES
from jouled.errors import UsageError
from jouled.frontier_attempts import (
    ERROR,
    INVALID,
    TAMPERED,
    TIMEOUT,
    Attempt,
    Key,
    OpKey,
    OpSum,
    Revisions,
    RowKey,
    digest_set_id,
    parse_attempt,
    parse_op,
)

# Frontier axis -> the row column that is its cost.
AXES = {
    "joules": "joules_per_resolved",
    "usd": "usd_per_resolved",
    "wall": "wall_median_s",
}

USD_SOURCE = "claimed"


# -- statistics ------------------------------------------------------------------------


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion.

    Unlike the normal approximation it stays inside [0, 1] and is not
    degenerate at 0/n or n/n, which small suites hit all the time. With no
    trials nothing is known: (0.0, 1.0).
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n))
    # At the edges the bound is exact in closed form; rounding would leave 1e-17 off it.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 - C(n-c, k) / C(n, k).

    The binomial ratio is taken as a running product of k factors, so large n
    neither overflows a float nor needs big-integer factorials.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0  # every k-subset holds at least one pass
    all_fail = 1.0
    for i in range(k):
        all_fail *= (n - c - i) / (n - i)
    return 1.0 - all_fail


def pareto(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which points are on the frontier, maximising x and minimising y.

    A point is off the frontier when another is at least as good on both axes
    and strictly better on one. Identical points do not dominate each other, so
    ties are all kept. A point whose y is infinite or NaN is never on the
    frontier: an unbounded cost is no trade-off, even when nothing beats it.
    """
    if any(math.isnan(x) for x, _ in points):
        raise ValueError("a frontier point has no x (NaN)")
    # NaN compares false both ways and would corrupt the sort; as a cost it is unbounded.
    ys = [math.inf if math.isnan(y) else y for _, y in points]
    on = [False] * len(points)
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], ys[i]))
    best_y_above = math.inf  # lowest cost among points with strictly greater x
    start = 0
    while start < len(order):
        x = points[order[start]][0]
        end = start
        while end < len(order) and points[order[end]][0] == x:
            end += 1
        group_min = ys[order[start]]  # sorted by y ascending within equal x
        for i in order[start:end]:
            on[i] = math.isfinite(ys[i]) and ys[i] == group_min and ys[i] < best_y_above
        best_y_above = min(best_y_above, group_min)
        start = end
    return on


# -- frontier rows ---------------------------------------------------------------------


def source_label(labels: set[str]) -> str:
    ordered = sorted(labels)
    if not ordered:
        return "none"
    if len(ordered) == 1:
        return ordered[0]
    return "mixed:" + ",".join(ordered)


def _weakest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _per(total: float, resolved: int) -> float | None:
    return total / resolved if resolved else None


@dataclass
class _Group:
    """Running totals of one (suite, solver, model): enough to write its row."""

    attempts: int = 0
    errors: int = 0
    invalid: int = 0
    tampered: int = 0
    audit_flagged: int = 0
    timeouts: int = 0
    resolved: int = 0
    gross_mj: int = 0
    marginal_mj: int = 0
    usd_micros: int = 0
    usd_claims: int = 0  # attempts that claimed dollars
    usd_resolved: int = 0  # resolved attempts that claimed dollars
    claimed_mj: int = 0
    windows: int = 0
    reliable_windows: int = 0
    invalid_windows: int = 0
    integrity: int | None = None  # the weakest rank among resolved attempts (None: none)
    tasks: set[tuple[str, str]] = field(default_factory=set)  # (task_id, task_digest)
    walls: list[int] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)
    op_keys: set[OpKey] = field(default_factory=set)
    ops: OpSum = field(default_factory=OpSum)
    # The median sorts every wall time; it is kept until the next attempt arrives.
    _median_ms: float | None = None
    _median_fresh: bool = False
    # (digest_set, tasks, merged_digests): hashed again only when a task version is new.
    _coverage: tuple[str, int, int] | None = None

    def add(self, a: Attempt) -> None:
        if a.status == ERROR:
            self.errors += 1
            return
        e = a.energy
        self.attempts += 1
        self.invalid += a.status == INVALID
        self.tampered += a.status == TAMPERED
        self.audit_flagged += a.audit_flagged
        self.timeouts += a.status == TIMEOUT
        self.resolved += a.resolved
        if a.resolved:
            self.integrity = _weakest(self.integrity, a.integrity)
        # Integer millijoules are summed before dividing, so the float is the
        # same whatever order the ledger yields attempts in.
        self.gross_mj += e.gross_mj
        self.marginal_mj += e.marginal_mj
        if a.claims_usd:
            self.usd_micros += a.usd_micros
            self.usd_claims += 1
            self.usd_resolved += a.resolved
        self.claimed_mj += a.claimed_mj
        self.windows += e.windows
        self.reliable_windows += e.reliable_windows
        self.invalid_windows += e.invalid_windows
        version = (a.task_id, a.task_digest)
        if version not in self.tasks:
            self.tasks.add(version)
            self._coverage = None
        if e.windows:
            self.walls.append(e.wall_ms)
            self._median_fresh = False
        self.sources |= e.sources

    def pooled(self, other: _Group) -> None:
        """Add another group's totals; its op windows are the caller's to count."""
        for name in (
            "attempts", "errors", "invalid", "tampered", "audit_flagged", "timeouts",
            "resolved", "gross_mj", "marginal_mj", "usd_micros", "usd_claims",
            "usd_resolved", "claimed_mj", "windows", "reliable_windows", "invalid_windows",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.integrity = _weakest(self.integrity, other.integrity)
        self.tasks |= other.tasks
        self._coverage = None
        self.walls.extend(other.walls)
        self._median_fresh = False
        self.sources |= other.sources
        self.op_keys |= other.op_keys

    def coverage(self) -> tuple[str, int, int]:
        """The digest set id, the distinct tasks, and the tasks seen at several digests."""
        if self._coverage is None:
            per_task = Counter(task for task, _ in self.tasks)
            several = sum(1 for count in per_task.values() if count > 1)
            self._coverage = (digest_set_id(self.tasks), len(per_task), several)
        return self._coverage

    def wall_median_ms(self) -> float | None:
        if not self._median_fresh:
            self._median_ms = statistics.median(self.walls) if self.walls else None
            self._median_fresh = True
        return self._median_ms

    def row(self, key: Key, revision: int | None) -> dict[str, Any]:
        """The group's frontier row (a `FrontierRow`, without its Pareto verdict yet)."""
        n, resolved = self.attempts, self.resolved
        median_ms = self.wall_median_ms()
        low, high = wilson_interval(resolved, n)
        joules_total = self.gross_mj / 1000
        usd_total = self.usd_micros / 1_000_000 if self.usd_claims else None
        digest_set, tasks, merged = self.coverage()
        return FrontierRow(
            suite=key[0],
            solver=key[1],
            model=key[2],
            revision=revision,
            digest_set=digest_set,
            merged_digests=merged,
            attempts=n,
            tasks=tasks,
            resolved=resolved,
            resolution=resolved / n if n else 0.0,
            ci_low=low,
            ci_high=high,
            joules_total=joules_total,
            joules_marginal=self.marginal_mj / 1000,
            joules_per_resolved=_per(joules_total, resolved),
            wall_median_s=None if median_ms is None else median_ms / 1000,
            usd_total=usd_total,
            usd_per_resolved=None if usd_total is None else _per(usd_total, self.usd_resolved),
            usd_claimed_share=self.usd_claims / n if n else None,
            usd_source=USD_SOURCE,
            claimed_joules=self.claimed_mj / 1000,
            energy_source=source_label(self.sources),
            reliable_share=self.reliable_windows / self.windows if self.windows else None,
            invalid_windows=self.invalid_windows,
            invalid=self.invalid,
            tampered=self.tampered,
            audit_flagged=self.audit_flagged,
            integrity=None if self.integrity is None else INTEGRITY_LEVELS[self.integrity],
            errors=self.errors,
            timeouts=self.timeouts,
            op_joules=self.ops.marginal_mj / 1000,
            op_windows=self.ops.windows,
            op_reliable_share=self.ops.reliable / self.ops.windows if self.ops.windows else None,
            op_abandoned=self.ops.abandoned,
        ).to_dict()


def _cost(row: Mapping[str, Any], axis: str) -> float:
    value = row[AXES[axis]]
    if not row["resolved"] or value is None or not _judged(row, axis):
        return math.inf
    return float(value)


def claims_all_usd(row: Mapping[str, Any]) -> bool:
    """Whether every attempt behind a row claimed its dollars: a partial sum is no cost."""
    share = row.get("usd_claimed_share")
    return share is not None and float(share) >= 1


def _judged(row: Mapping[str, Any], axis: str) -> bool:
    """Whether the row's cost on `axis` is known well enough for a Pareto verdict."""
    if axis != "usd" or not row["resolved"]:
        return True  # resolving nothing is a verdict whatever was spent
    return claims_all_usd(row)


def mark_pareto(rows: list[dict[str, Any]], axis: str) -> None:
    pools: dict[tuple[str, int | None], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        row["pareto"] = None  # no verdict unless the pool below gives one
        row["pareto_axis"] = axis
        if _judged(row, axis):
            pools[(row["suite"], row.get("revision", 0))].append(row)
    for pool in pools.values():
        flags = pareto([(r["resolution"], _cost(r, axis)) for r in pool])
        for row, flag in zip(pool, flags, strict=True):
            row["pareto"] = flag


def _sort_key(row: Mapping[str, Any], axis: str) -> tuple[Any, ...]:
    revision = row.get("revision")
    return (
        row["suite"],
        -1 if revision is None else revision,
        -row["resolution"],
        _cost(row, axis),
        row["solver"],
        row["model"],
    )


_Fetch = Callable[..., Sequence[tuple[Any, ...]]]  # (sql, params=()) -> rows

# One row per `result` of a relation holding the ledger's query columns, read as
# `parse_attempt` reads the body (jouled/ledger/columns.py defines each column).
_ATTEMPTS_SQL = """
SELECT seq,
    CASE WHEN coalesce(suite, '') <> '' THEN suite
         ELSE split_part(coalesce(task_id, ''), '/', 1) END AS g_suite,
    coalesce(solver, '') AS g_solver, coalesce(model, '') AS g_model,
    coalesce(task_id, '') AS g_task, coalesce(task_digest, '') AS g_digest,
    status AS g_status, status = 'resolved' AND coalesce(resolved, false) AS g_resolved,
    coalesce(rollout, 0) AS g_rollout, coalesce(agent, '') AS g_agent,
    coalesce(run_id, '') AS g_run, claimed_usd_micros AS g_usd, claimed_joules_mj AS g_cmj,
    audit_flagged AS g_flagged, counted_gross_mj AS g_gross,
    counted_marginal_mj AS g_marginal, counted_wall_ms AS g_wall,
    counted_windows AS g_windows, reliable_windows AS g_reliable,
    invalid_windows AS g_invalid, solve_source AS g_solve_source,
    grade_source AS g_grade_source,
    CASE integrity_level {ranks} ELSE 0 END AS g_integrity
FROM {relation} WHERE kind = 'result'
"""
# integrity_level -> its rank in INTEGRITY_LEVELS, as `_integrity_rank` reads it.
_RANKS = " ".join(f"WHEN '{level}' THEN {i}" for i, level in enumerate(INTEGRITY_LEVELS))
_STATUS_LIST = ", ".join(f"'{s}'" for s in sorted(STATUSES))
_PROBLEM_SQL = """
SELECT g_task, g_status, g_rollout FROM ({attempts})
WHERE g_status IS NULL OR g_status NOT IN ({statuses}) OR g_rollout < 0 ORDER BY seq LIMIT 1
"""
# Each task's digests in the order they first appear: their revision numbers.
_REVISIONS_SQL = """
SELECT g_task, g_digest FROM ({attempts}) GROUP BY g_task, g_digest ORDER BY min(seq)
"""
_WITH_REVISION = """
(SELECT * FROM ({attempts}) JOIN (
    SELECT g_task, g_digest,
           row_number() OVER (PARTITION BY g_task ORDER BY min(seq)) - 1 AS g_revision
    FROM ({attempts}) GROUP BY g_task, g_digest
) USING (g_task, g_digest))
"""
_GROUP_KEY = "g_suite, g_solver, g_model, g_revision"
_COUNTED = "g_status <> 'error'"
# `_Group` fields summed over a group, in the order _GROUPS_SQL selects them.
_GROUP_SUMS = (
    "attempts", "errors", "invalid", "tampered", "audit_flagged", "timeouts", "resolved",
    "gross_mj", "marginal_mj", "usd_micros", "usd_claims", "usd_resolved", "claimed_mj",
    "windows", "reliable_windows", "invalid_windows",
)  # fmt: skip
_GROUPS_SQL = f"""
SELECT {_GROUP_KEY},
    count(*) FILTER (WHERE {_COUNTED}),
    count(*) FILTER (WHERE g_status = 'error'),
    count(*) FILTER (WHERE g_status = 'invalid'),
    count(*) FILTER (WHERE g_status = 'tampered'),
    count(*) FILTER (WHERE {_COUNTED} AND g_flagged),
    count(*) FILTER (WHERE g_status = 'timeout'),
    count(*) FILTER (WHERE {_COUNTED} AND g_resolved),
    sum(g_gross) FILTER (WHERE {_COUNTED}),
    sum(g_marginal) FILTER (WHERE {_COUNTED}),
    sum(g_usd) FILTER (WHERE {_COUNTED} AND g_usd > 0),
    count(*) FILTER (WHERE {_COUNTED} AND g_usd > 0),
    count(*) FILTER (WHERE {_COUNTED} AND g_usd > 0 AND g_resolved),
    sum(g_cmj) FILTER (WHERE {_COUNTED}),
    sum(g_windows) FILTER (WHERE {_COUNTED}),
    sum(g_reliable) FILTER (WHERE {_COUNTED}),
    sum(g_invalid) FILTER (WHERE {_COUNTED}),
    list(g_wall ORDER BY g_wall) FILTER (WHERE {_COUNTED} AND g_windows > 0),
    list(DISTINCT g_solve_source) FILTER (WHERE {_COUNTED} AND g_solve_source IS NOT NULL),
    list(DISTINCT g_grade_source) FILTER (WHERE {_COUNTED} AND g_grade_source IS NOT NULL),
    list(DISTINCT [g_task, g_digest]) FILTER (WHERE {_COUNTED}),
    min(g_integrity) FILTER (WHERE {_COUNTED} AND g_resolved)
FROM {_WITH_REVISION} GROUP BY {_GROUP_KEY}
"""
# The counted attempts an op window's key names; their revision comes from `Revisions`.
_OP_KEY_SQL = f"""
SELECT DISTINCT g_suite, g_solver, g_model, g_task, g_digest FROM ({{attempts}})
WHERE {_COUNTED} AND g_agent = ? AND g_task = ? AND g_run = ? AND g_rollout = ?
"""


class Frontier:
    """Frontier totals kept up to date one result at a time.

    The daemon feeds it each result as it is signed, so serving the frontier
    costs one row per group however long the ledger is; `frontier_rows` runs
    the same code over a list of results, so both always agree.
    """

    def __init__(
        self, results: Iterable[Mapping[str, Any]] = (), ops: Iterable[Mapping[str, Any]] = ()
    ) -> None:
        self._groups: dict[RowKey, _Group] = defaultdict(_Group)
        self._revisions = Revisions()
        self._ops: dict[OpKey, OpSum] = {}
        self._op_groups: dict[OpKey, set[RowKey]] = {}  # the rows holding each key
        self.version = 0  # grows with every result and op added: cached answers go stale
        self.results = 0  # ... and with every result
        # Set when built from columns: which (suite, solver, model, task, digest) hold a key.
        self._holding: Callable[[OpKey], list[tuple[str, str, str, str, str]]] | None = None
        self._lock = threading.Lock()
        for body in ops:
            self.add_op(body)
        for body in results:
            self.add(body)

    def add(self, body: Mapping[str, Any]) -> None:
        attempt = parse_attempt(body)
        with self._lock:
            group_key = (*attempt.key, self._revisions.of(attempt))
            group = self._groups[group_key]
            group.add(attempt)
            self.version += 1
            self.results += 1
            key = attempt.op_key
            if attempt.status != ERROR and key not in group.op_keys:
                group.op_keys.add(key)
                self._op_groups.setdefault(key, set()).add(group_key)
                if key in self._ops:
                    group.ops.add(self._ops[key])

    def add_op(self, body: Mapping[str, Any]) -> None:
        """An `op` entry's body: charged to every row holding an attempt it names."""
        parsed = parse_op(body)
        if parsed is None:
            return
        key, op = parsed
        with self._lock:
            if self._holding is not None and key not in self._ops:
                # Built from columns: the rows holding this key are looked up once, when its
                # first window arrives; every later result with the key is added by `add`.
                for suite, solver, model, task_id, digest in self._holding(key):
                    row_key = (suite, solver, model, self._revisions.see(task_id, digest))
                    self._groups[row_key].op_keys.add(key)
                    self._op_groups.setdefault(key, set()).add(row_key)
            self._ops.setdefault(key, OpSum()).add(op)
            # Only the rows holding the key: an op costs the same however many rows there are.
            for row_key in self._op_groups.get(key, ()):
                self._groups[row_key].ops.add(op)
            self.version += 1

    @classmethod
    def from_columns(
        cls, fetch: _Fetch, relation: str = "entries", ops: Iterable[Mapping[str, Any]] = ()
    ) -> Frontier:
        """The running totals of every `result` in `relation`, from its query columns.

        `relation` holds the ledger's entries with the columns of
        `jouled.ledger.columns` (the daemon's `entries` table, an export read
        by DuckDB); `fetch` runs SQL against it. A few aggregate queries
        replace parsing each payload: the totals equal those of adding every
        result body in seq order. `ops` are the `op` entries' bodies.
        """
        frontier = cls()
        attempts = _ATTEMPTS_SQL.format(relation=relation, ranks=_RANKS)
        bad = fetch(_PROBLEM_SQL.format(attempts=attempts, statuses=_STATUS_LIST))
        if bad:
            task_id, status, rollout = bad[0]
            if status not in STATUSES:
                raise UsageError(
                    f"result for {task_id!r} has unknown status {status!r}",
                    hint="the ledger was written by a newer jouled; upgrade jb-client",
                )
            raise UsageError(f"result for {task_id!r} has negative rollout {rollout}")
        for task_id, task_digest in fetch(_REVISIONS_SQL.format(attempts=attempts)):
            frontier._revisions.see(task_id, task_digest)
        groups = frontier._groups
        for row in fetch(_GROUPS_SQL.format(attempts=attempts)):
            key: RowKey = (row[0], row[1], row[2], int(row[3]))
            group = groups[key]
            counts = row[4 : 4 + len(_GROUP_SUMS)]
            for name, value in zip(_GROUP_SUMS, counts, strict=True):
                setattr(group, name, int(value or 0))
            walls, solve_sources, grade_sources, tasks, integrity = row[4 + len(_GROUP_SUMS) :]
            group.integrity = None if integrity is None else int(integrity)
            group.walls = [int(w) for w in walls or ()]
            group.sources = {*(solve_sources or ()), *(grade_sources or ())}
            group.tasks = {(task_id, task_digest) for task_id, task_digest in tasks or ()}
        # Attempts are matched to op windows by key only for keys that have windows: the
        # first window of a key asks the ledger which rows hold it (`add_op`).
        op_key_sql = _OP_KEY_SQL.format(attempts=attempts)

        def holding(key: OpKey) -> list[tuple[str, str, str, str, str]]:
            rows = fetch(op_key_sql, list(key))
            return [(str(a), str(b), str(c), str(d), str(e)) for a, b, c, d, e in rows]

        frontier._holding = holding
        for body in ops:
            frontier.add_op(body)
        return frontier

    def rows(
        self, *, suite: str | None = None, axis: str = "joules", merge_digests: bool = False
    ) -> list[dict[str, Any]]:
        """One row per (suite, solver, model, revision), Pareto-flagged within each
        (suite, revision); with `merge_digests`, one per (suite, solver, model).

        `axis` picks the cost the frontier trades resolution against: "joules"
        (per resolved task), "usd" (claimed, per resolved task) or "wall"
        (median seconds per attempt). Rows come sorted by suite, revision,
        resolution descending, that cost ascending, then solver and model.
        """
        if axis not in AXES:
            raise UsageError(f"unknown frontier axis {axis!r}", hint=f"use one of {sorted(AXES)}")
        with self._lock:
            chosen = [
                (key, group)
                for key, group in sorted(self._groups.items(), key=lambda item: item[0])
                if suite is None or key[0] == suite
            ]
            if merge_digests:
                rows = [self._pooled(groups).row(key, None) for key, groups in _by_key(chosen)]
            else:
                rows = [group.row(key[:3], key[3]) for key, group in chosen]
        mark_pareto(rows, axis)
        rows.sort(key=lambda r: _sort_key(r, axis))
        return rows

    def _pooled(self, groups: Sequence[_Group]) -> _Group:
        """One group holding several revisions' totals, each op window counted once."""
        pooled = _Group()
        for group in groups:
            pooled.pooled(group)
        for key in pooled.op_keys:
            if key in self._ops:
                pooled.ops.add(self._ops[key])
        return pooled


def _by_key(
    chosen: Sequence[tuple[RowKey, _Group]],
) -> list[tuple[Key, list[_Group]]]:
    merged: dict[Key, list[_Group]] = defaultdict(list)
    for key, group in chosen:
        merged[key[:3]].append(group)
    return sorted(merged.items())


def frontier_rows(
    results: Iterable[Mapping[str, Any]],
    *,
    suite: str | None = None,
    axis: str = "joules",
    ops: Iterable[Mapping[str, Any]] = (),
    merge_digests: bool = False,
) -> list[dict[str, Any]]:
    """The frontier of a list of results and op entry bodies (see `Frontier.rows`)."""
    return Frontier(results, ops).rows(suite=suite, axis=axis, merge_digests=merge_digests)
