"""The :class:`Interval` type and interval-set helpers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class Interval:
    """The half-open interval ``[start, end)``: ``start`` is included, ``end`` is not.

    Intervals are never empty, so ``start`` must be strictly less than
    ``end``. Endpoints can be numbers, dates, datetimes or anything else that
    is totally ordered, which makes the type convenient for time slots:
    a meeting from 9:00 to 10:00 and one from 10:00 to 11:00 do not clash.
    """

    start: Any
    end: Any

    def __post_init__(self) -> None:
        if not self.start < self.end:
            raise ValueError(f"empty interval: start {self.start!r} is not before end {self.end!r}")

    def __repr__(self) -> str:
        return f"Interval({self.start!r}, {self.end!r})"

    def __contains__(self, point: Any) -> bool:
        return self.start <= point < self.end

    @property
    def length(self) -> Any:
        return self.end - self.start

    def overlaps(self, other: Interval) -> bool:
        """True if the two intervals share at least one point."""
        return self.start <= other.end and other.start <= self.end

    def touches(self, other: Interval) -> bool:
        """True if one interval ends exactly where the other begins."""
        return self.end == other.start or other.end == self.start

    def contains_interval(self, other: Interval) -> bool:
        """True if every point of ``other`` lies in this interval."""
        return self.start <= other.start and other.end <= self.end

    def intersection(self, other: Interval) -> Interval | None:
        """The common part of both intervals, or ``None`` if they do not overlap."""
        if not self.overlaps(other):
            return None
        return Interval(max(self.start, other.start), min(self.end, other.end))

    def gap(self, other: Interval) -> Interval | None:
        """The interval strictly between two disjoint intervals, if there is one."""
        if self.overlaps(other) or self.touches(other):
            return None
        first, second = sorted((self, other))
        return Interval(first.end, second.start)


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Coalesce intervals that overlap or touch; the result is sorted and disjoint.

    >>> merge([Interval(5, 8), Interval(1, 3), Interval(3, 4)])
    [Interval(1, 4), Interval(5, 8)]
    """
    out: list[Interval] = []
    for iv in sorted(intervals):
        if out and iv.start <= out[-1].end:
            if iv.end > out[-1].end:
                out[-1] = Interval(out[-1].start, iv.end)
        else:
            out.append(iv)
    return out
