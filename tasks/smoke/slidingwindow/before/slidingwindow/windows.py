"""Window and chunk iterators."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def _as_sequence(items: Iterable[T]) -> Sequence[T]:
    return items if isinstance(items, Sequence) else tuple(items)


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def windows(items: Iterable[T], size: int, step: int = 1) -> Iterator[tuple[T, ...]]:
    """Yield every full window of ``size`` consecutive items.

    Windows start at offsets ``0, step, 2 * step, ...``; a window that would
    run past the end of ``items`` is not produced, so the output is empty when
    there are fewer than ``size`` items. With ``step == size`` the windows
    tile the input without overlapping.

    >>> list(windows([1, 2, 3, 4, 5], 3))
    [(1, 2, 3), (2, 3, 4), (3, 4, 5)]
    >>> list(windows(range(7), 3, step=2))
    [(0, 1, 2), (2, 3, 4), (4, 5, 6)]
    """
    _check_positive("size", size)
    _check_positive("step", step)
    seq = _as_sequence(items)
    for start in range(0, len(seq) - size, step):
        yield tuple(seq[start : start + size])


def chunked(items: Iterable[T], size: int) -> Iterator[tuple[T, ...]]:
    """Split ``items`` into consecutive chunks of ``size``; the last may be shorter.

    >>> list(chunked("abcdefg", 3))
    [('a', 'b', 'c'), ('d', 'e', 'f'), ('g',)]
    """
    _check_positive("size", size)
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield tuple(chunk)
            chunk = []
    if chunk:
        yield tuple(chunk)


def moving_average(values: Iterable[float], size: int) -> list[float]:
    """The mean of each window of ``size`` consecutive values.

    >>> moving_average([1, 2, 3, 4], 2)
    [1.5, 2.5, 3.5]
    """
    return [sum(w) / size for w in windows(values, size)]
