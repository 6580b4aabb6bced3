"""The comparison of two solvers (`jb-client compare A B`), as `jouled.compare` builds it.

Declared once, here: `jouled.compare` builds a `Comparison`, `jb-client compare
--json` prints its `to_dict()`, and the client's report reads its fields.
Fields are declared in the order the JSON object has them. A field that may
be null has no default, so it is always written (null when None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from jouled.documents.base import Document


@dataclass(kw_only=True)
class Summary(Document):
    """n, mean, min, quartiles and max of one distribution of per-task values."""

    NAME: ClassVar[str] = "summary"

    n: int
    mean: float
    min: float
    q1: float
    median: float
    q3: float
    max: float


@dataclass(kw_only=True)
class ComparedSide(Document):
    """One side of the comparison: what its spec selected."""

    NAME: ClassVar[str] = "compared side"

    spec: str
    solver: str
    model: str | None  # None: every model of the solver
    models: list[str]
    tasks: int
    attempts: int


@dataclass(kw_only=True)
class FirstRollouts(Document):
    """Paired tasks by which side's first rollout resolved them (McNemar's table)."""

    NAME: ClassVar[str] = "first rollouts"

    both: int
    a_only: int
    b_only: int
    neither: int


@dataclass(kw_only=True)
class Resolution(Document):
    """Per-task resolution shares, their mean difference and the exact McNemar test."""

    NAME: ClassVar[str] = "resolution"

    tasks: int
    a_rate: float | None
    b_rate: float | None
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    first_rollout: FirstRollouts
    test: str
    p_value: float
    conclusive: bool
    verdict: str


@dataclass(kw_only=True)
class PairedMetric(Document):
    """Each side's per-task values, their differences (A - B) and the bootstrap interval."""

    NAME: ClassVar[str] = "paired metric"

    tasks: int
    a: Summary | None
    b: Summary | None
    difference: Summary | None
    ci_low: float | None
    ci_high: float | None
    conclusive: bool
    verdict: str


@dataclass(kw_only=True)
class PairedJoules(PairedMetric):
    NAME: ClassVar[str] = "paired joules"

    left_out: int  # paired tasks with no valid read on some rollout
    sources_a: list[str]
    sources_b: list[str]
    unreliable_pairs: int


@dataclass(kw_only=True)
class PairedUsd(PairedMetric):
    NAME: ClassVar[str] = "paired dollars"

    left_out: int  # paired tasks where some rollout claims no dollars
    usd_source: str


@dataclass(kw_only=True)
class Bootstrap(Document):
    NAME: ClassVar[str] = "bootstrap"

    statistic: str
    resamples: int
    seed: int
    level: float


@dataclass(kw_only=True)
class PairedSide(Document):
    """One side's attempts at one paired task."""

    NAME: ClassVar[str] = "paired side"

    attempts: int
    rate: float
    first_resolved: bool
    joules: float | None
    usd: float | None


@dataclass(kw_only=True)
class PairRow(Document):
    NAME: ClassVar[str] = "pair"

    task_id: str
    task_digest: str
    a: PairedSide
    b: PairedSide


@dataclass(kw_only=True)
class Comparison(Document):
    """A against B on the tasks both attempted (the rules: `jouled.compare`)."""

    NAME: ClassVar[str] = "comparison"

    a: ComparedSide
    b: ComparedSide
    suite: str | None
    paired_on: str
    paired_tasks: int
    only_a: int
    only_b: int
    digest_changed: list[str]
    min_pairs: int
    enough_pairs: bool
    conclusive: bool  # True when any of resolution, joules or dollars shows a difference
    notes: list[str]
    resolution: Resolution
    joules: PairedJoules
    usd: PairedUsd
    bootstrap: Bootstrap
    disagreements: list[PairRow]
    pairs: list[PairRow]
