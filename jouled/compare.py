"""Compare two solvers on the tasks both attempted: paired differences, not single numbers.

Pure functions over `result` entry bodies, like `jouled.frontier`, whose
counting rules they share (`error` attempts left out; `invalid` and
`tampered` ones counted and never resolved; an attempt's energy is the
attested gross joules of its `solve` and `grade` ops; dollars are claimed).
`jb-client compare` runs them on an export or on the daemon's ledger; they
answer with a `jouled.documents.comparison.Comparison`.

Rules, decided once here:

- A side is `SOLVER` (every model of it together) or `SOLVER@MODEL`. A spec
  that is a solver name in the results is taken whole, since names may hold
  "@"; otherwise it is split at its first "@".
- Attempts are paired on the task digest: a task enters the comparison only
  when both sides have a counted attempt graded against the same digest.
  Tasks only one side attempted, and task ids the two graded at different
  digests, are counted apart and never paired.
- Several rollouts per task: each side's per-task resolution is the share of
  its counted rollouts that resolved, and the resolution difference is the
  mean over paired tasks of (A's share - B's share). The exact test needs one
  outcome per side and task, so McNemar's test takes each side's first
  rollout (lowest rollout index, earliest in the ledger among equals). With
  one rollout per task the two agree.
- McNemar's exact test: the two-sided binomial test (p = 1/2) on the
  discordant pairs, computed exactly.
- Joules per task: the mean over the side's counted rollouts. A task enters
  the energy comparison only when every counted rollout on both sides has a
  counted op and every counted op's read is valid: a failed read would show
  as less energy.
- Dollars per task: the mean claimed dollars over the side's counted
  rollouts, only on tasks where both sides claim dollars on every counted
  rollout. They are agent-reported, never measured.
- Intervals: a paired bootstrap of the mean per-task difference (A - B):
  `resamples` resamples of the paired tasks with replacement, from a fixed
  seed, so the same ledger gives the same interval; the 95% interval is the
  2.5th and 97.5th percentiles of the resampled means (linear interpolation
  between order statistics).
- Too few: below `MIN_PAIRS` paired tasks nothing is concluded, and a
  resolution difference with no discordant pairs is none the test can see;
  the output says so in words and in `conclusive: false`.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

from jouled.documents.comparison import (
    Bootstrap,
    ComparedSide,
    Comparison,
    FirstRollouts,
    PairedJoules,
    PairedMetric,
    PairedSide,
    PairedUsd,
    PairRow,
    Resolution,
    Summary,
)
from jouled.errors import UsageError
from jouled.frontier import USD_SOURCE
from jouled.frontier_attempts import ERROR, Attempt, parse_attempt

MIN_PAIRS = 10
RESAMPLES = 10_000
SEED = 0
LEVEL = 0.95
ALPHA = 0.05

_Metric = TypeVar("_Metric", bound=PairedMetric)


# -- statistics ------------------------------------------------------------------------


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts.

    Under no difference each discordant pair is a fair coin: p is twice the
    binomial tail of the smaller count, capped at 1. No discordant pairs: 1.0.
    """
    if a_only < 0 or b_only < 0:
        raise ValueError(f"discordant counts must be >= 0, got {a_only}, {b_only}")
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(a_only, b_only) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, interpolating linearly between order statistics."""
    if not ordered:
        raise ValueError("no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"need 0 <= q <= 1, got {q}")
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary(values: Sequence[float]) -> Summary | None:
    """n, mean, min, quartiles and max of a distribution; None when it is empty."""
    if not values:
        return None
    s = sorted(values)
    return Summary(
        n=len(s),
        mean=statistics.fmean(s),
        min=s[0],
        q1=quantile(s, 0.25),
        median=quantile(s, 0.5),
        q3=quantile(s, 0.75),
        max=s[-1],
    )


def bootstrap_mean_interval(
    differences: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> tuple[float, float]:
    """Percentile interval of the mean of paired differences, resampling pairs.

    Deterministic: the same differences, seed and resamples give the same interval.
    """
    if not differences:
        raise ValueError("no differences to resample")
    if resamples < 1:
        raise ValueError(f"need at least one resample, got {resamples}")
    n = len(differences)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(differences, k=n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2
    return quantile(means, tail), quantile(means, 1.0 - tail)


# -- sides and pairs -------------------------------------------------------------------


@dataclass(frozen=True)
class _Side:
    """A task's counted attempts by one side, in ledger order."""

    attempts: tuple[Attempt, ...]

    @property
    def task_id(self) -> str:
        return self.attempts[0].task_id

    @property
    def rate(self) -> float:
        return sum(a.resolved for a in self.attempts) / len(self.attempts)

    @property
    def first(self) -> Attempt:
        # min keeps the earliest among equal rollout indices: attempts are in ledger order.
        return min(self.attempts, key=lambda a: a.rollout)

    @property
    def joules(self) -> float | None:
        for a in self.attempts:
            if not a.energy.windows or a.energy.invalid_windows:
                return None
        return statistics.fmean(a.energy.gross_mj / 1000 for a in self.attempts)

    @property
    def usd(self) -> float | None:
        if any(a.usd_micros <= 0 for a in self.attempts):
            return None
        return statistics.fmean(a.usd_micros / 1_000_000 for a in self.attempts)

    @property
    def reliable(self) -> bool:
        return all(a.energy.reliable_windows == a.energy.windows for a in self.attempts)

    @property
    def sources(self) -> frozenset[str]:
        return frozenset(s for a in self.attempts for s in a.energy.sources)


@dataclass(frozen=True)
class _Selector:
    spec: str
    solver: str
    model: str | None  # None: every model

    def matches(self, a: Attempt) -> bool:
        return a.solver == self.solver and (self.model is None or a.model == self.model)


def _selector(spec: str, solvers: set[str]) -> _Selector:
    if not spec:
        raise UsageError("a side to compare is empty", hint="name a solver, or SOLVER@MODEL")
    if spec in solvers or "@" not in spec:
        return _Selector(spec, spec, None)
    solver, _, model = spec.partition("@")
    return _Selector(spec, solver, model)


def _sides(
    parsed: Sequence[tuple[str, Attempt]], sel: _Selector
) -> tuple[dict[str, _Side], list[str], dict[str, set[str]]]:
    """Per digest, the side's counted attempts; its models; per task id, its digests."""
    by_digest: dict[str, list[Attempt]] = defaultdict(list)
    digests: dict[str, set[str]] = defaultdict(set)
    models: set[str] = set()
    for digest, a in parsed:
        if sel.matches(a) and a.status != ERROR:
            by_digest[digest].append(a)
            digests[a.task_id].add(digest)
            models.add(a.model)
    return {d: _Side(tuple(v)) for d, v in by_digest.items()}, sorted(models), digests


def _side_info(sel: _Selector, sides: Mapping[str, _Side], models: list[str]) -> ComparedSide:
    return ComparedSide(
        spec=sel.spec,
        solver=sel.solver,
        model=sel.model,
        models=models,
        tasks=len(sides),
        attempts=sum(len(s.attempts) for s in sides.values()),
    )


# -- the comparison --------------------------------------------------------------------


def _paired_metric(
    cls: type[_Metric],
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int,
    seed: int,
    what: str,
    verb: str,
    unit: str,
    **more: Any,
) -> _Metric:
    """Each side's distribution, the per-task differences and their bootstrap interval.

    `more` holds the fields `cls` adds to `PairedMetric`'s.
    """
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    low: float | None = None
    high: float | None = None
    conclusive = False
    if n < MIN_PAIRS:
        verdict = f"too few paired tasks to conclude anything about {what}: {n} (need {MIN_PAIRS})"
    else:
        low, high = bootstrap_mean_interval(diffs, resamples=resamples, seed=seed)
        mean = statistics.fmean(diffs)
        shown = f"mean difference {mean:+.4g} {unit} per task, 95% CI [{low:.4g}, {high:.4g}]"
        if low > 0 or high < 0:
            conclusive = True
            more_or_less = "more" if low > 0 else "less"
            verdict = f"A {verb} {more_or_less} {what} per task than B ({shown})"
        else:
            verdict = f"no difference in {what} the interval can tell from zero ({shown})"
    return cls(
        tasks=n,
        a=summary(a),
        b=summary(b),
        difference=summary(diffs),
        ci_low=low,
        ci_high=high,
        conclusive=conclusive,
        verdict=verdict,
        **more,
    )


def _resolution(
    pairs: Sequence[tuple[str, _Side, _Side]], *, resamples: int, seed: int
) -> Resolution:
    both = a_only = b_only = neither = 0
    for _, a, b in pairs:
        ra, rb = a.first.resolved, b.first.resolved
        both += ra and rb
        a_only += ra and not rb
        b_only += rb and not ra
        neither += not ra and not rb
    p = mcnemar_exact(a_only, b_only)
    rates_a = [a.rate for _, a, _ in pairs]
    rates_b = [b.rate for _, _, b in pairs]
    diffs = [x - y for x, y in zip(rates_a, rates_b, strict=True)]
    n = len(pairs)
    low: float | None = None
    high: float | None = None
    if n >= MIN_PAIRS:
        low, high = bootstrap_mean_interval(diffs, resamples=resamples, seed=seed)
    conclusive = False
    counts = f"{a_only} tasks only A resolved, {b_only} only B"
    if n < MIN_PAIRS:
        verdict = (
            f"too few paired tasks to conclude anything about resolution: {n} (need {MIN_PAIRS})"
        )
    elif a_only + b_only == 0:
        verdict = (
            "no discordant pairs: A and B resolved the same tasks, so the test has "
            "nothing to tell them apart by"
        )
    elif p < ALPHA:
        conclusive = True
        better = "A" if a_only > b_only else "B"
        verdict = f"{better} resolves more tasks ({counts}; exact McNemar p = {p:.4g})"
    else:
        verdict = (
            f"no difference in resolution the test can detect ({counts}; exact McNemar p = {p:.4g})"
        )
    return Resolution(
        tasks=n,
        a_rate=statistics.fmean(rates_a) if n else None,
        b_rate=statistics.fmean(rates_b) if n else None,
        difference=statistics.fmean(diffs) if n else None,
        ci_low=low,
        ci_high=high,
        first_rollout=FirstRollouts(both=both, a_only=a_only, b_only=b_only, neither=neither),
        test="exact McNemar: two-sided binomial test on the discordant first rollouts",
        p_value=p,
        conclusive=conclusive,
        verdict=verdict,
    )


def _paired_side(s: _Side) -> PairedSide:
    return PairedSide(
        attempts=len(s.attempts),
        rate=s.rate,
        first_resolved=s.first.resolved,
        joules=s.joules,
        usd=s.usd,
    )


def _pair_row(digest: str, a: _Side, b: _Side) -> PairRow:
    return PairRow(task_id=a.task_id, task_digest=digest, a=_paired_side(a), b=_paired_side(b))


def compare(
    results: Iterable[Mapping[str, Any]],
    a: str,
    b: str,
    *,
    suite: str | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Comparison:
    """A's attempts against B's on the tasks both attempted (see the module's rules)."""
    if resamples < 1:
        raise UsageError(f"--resamples {resamples} must be at least 1")
    parsed = []
    for body in results:
        attempt = parse_attempt(body)
        if suite is None or attempt.suite == suite:
            parsed.append((str(body.get("task_digest") or ""), attempt))
    solvers = {att.solver for _, att in parsed}
    sel_a, sel_b = _selector(a, solvers), _selector(b, solvers)
    sides_a, models_a, digests_a = _sides(parsed, sel_a)
    sides_b, models_b, digests_b = _sides(parsed, sel_b)
    for sel, sides in ((sel_a, sides_a), (sel_b, sides_b)):
        if not sides:
            where = f" in suite {suite!r}" if suite else ""
            raise UsageError(
                f"no counted attempts by {sel.spec!r}{where}",
                hint="name a solver as the frontier shows it, or SOLVER@MODEL "
                f"(solvers here: {', '.join(sorted(solvers)[:10]) or 'none'})",
            )
    if any(sel_a.matches(x) and sel_b.matches(x) for _, x in parsed):
        raise UsageError(
            f"{a!r} and {b!r} select some of the same attempts",
            hint="compare two solvers, or two models of one solver as SOLVER@MODEL each",
        )

    common = sorted(set(sides_a) & set(sides_b) - {""}, key=lambda d: (sides_a[d].task_id, d))
    pairs = [(d, sides_a[d], sides_b[d]) for d in common]
    # The same task id graded at different digests on the two sides: not comparable.
    changed = sorted(
        t for t in set(digests_a) & set(digests_b) if not (digests_a[t] & digests_b[t]) - {""}
    )

    notes: list[str] = []
    n = len(pairs)
    if n < MIN_PAIRS:
        notes.append(
            f"only {n} paired task(s): below {MIN_PAIRS} nothing here ranks one side above "
            "the other; one success or failure more would change the picture"
        )
    if changed:
        notes.append(
            f"{len(changed)} task(s) were graded at different digests by the two sides and "
            f"are not paired: {', '.join(changed[:5])}"
        )
    if any(len(s.attempts) > 1 for _, x, y in pairs for s in (x, y)):
        notes.append(
            "several rollouts per task: resolution rates are per-task shares of rollouts "
            "resolved; McNemar's test uses each side's first rollout"
        )
    for name, models in (("A", models_a), ("B", models_b)):
        if len(models) > 1:
            notes.append(
                f"{name} spans {len(models)} models ({', '.join(m or '-' for m in models)}); "
                "name one as SOLVER@MODEL to compare it alone"
            )

    energy_pairs = [
        (ja, jb, x, y)
        for _, x, y in pairs
        if (ja := x.joules) is not None and (jb := y.joules) is not None
    ]
    sources_a = sorted({s for *_, x, _ in energy_pairs for s in x.sources})
    sources_b = sorted({s for *_, y in energy_pairs for s in y.sources})
    if sources_a and sources_b and sources_a != sources_b:
        notes.append(
            f"energy sources differ (A: {', '.join(sources_a)}; B: {', '.join(sources_b)}): "
            "their joules are not comparable"
        )
    unreliable = sum(not (x.reliable and y.reliable) for *_, x, y in energy_pairs)
    if unreliable:
        notes.append(
            f"{unreliable} of {len(energy_pairs)} energy pairs hold a window below its "
            "meter's floor or within idle noise (unreliable)"
        )
    joules = _paired_metric(
        PairedJoules,
        [ja for ja, *_ in energy_pairs],
        [jb for _, jb, *_ in energy_pairs],
        resamples=resamples,
        seed=seed,
        what="energy",
        verb="used",
        unit="J",
        left_out=n - len(energy_pairs),
        sources_a=sources_a,
        sources_b=sources_b,
        unreliable_pairs=unreliable,
    )
    usd_pairs = [
        (ua, ub) for _, x, y in pairs if (ua := x.usd) is not None and (ub := y.usd) is not None
    ]
    usd = _paired_metric(
        PairedUsd,
        [ua for ua, _ in usd_pairs],
        [ub for _, ub in usd_pairs],
        resamples=resamples,
        seed=seed,
        what="dollars",
        verb="claimed",
        unit="$",
        left_out=n - len(usd_pairs),
        usd_source=USD_SOURCE,
    )
    if n and len(usd_pairs) < n:
        notes.append(
            f"dollars compare only the {len(usd_pairs)} paired task(s) where both sides "
            "claim dollars on every rollout; they are agent-reported, not measured"
        )

    resolution = _resolution(pairs, resamples=resamples, seed=seed)
    rows = [_pair_row(d, x, y) for d, x, y in pairs]
    return Comparison(
        a=_side_info(sel_a, sides_a, models_a),
        b=_side_info(sel_b, sides_b, models_b),
        suite=suite,
        paired_on="task_digest",
        paired_tasks=n,
        only_a=len(set(sides_a) - set(sides_b)),
        only_b=len(set(sides_b) - set(sides_a)),
        digest_changed=changed,
        min_pairs=MIN_PAIRS,
        enough_pairs=n >= MIN_PAIRS,
        conclusive=resolution.conclusive or joules.conclusive or usd.conclusive,
        notes=notes,
        resolution=resolution,
        joules=joules,
        usd=usd,
        bootstrap=Bootstrap(
            statistic="mean of per-task differences (A - B)",
            resamples=resamples,
            seed=seed,
            level=LEVEL,
        ),
        disagreements=[r for r in rows if r.a.rate != r.b.rate],
        pairs=rows,
    )
