"""Answers whose length the ledger decides, served a bounded page at a time.

Frontier and best-of-k have a row per (suite, solver, model, revision), and
anyone who submits can add rows. So no answer carries more than `PAGE_ROWS_MAX`
rows: a caller asks again with the `next_page_token` of the page before until
it is empty. The rows a page is cut from are computed once per question and
kept until the ledger changes (`RowCache`), so paging through N rows costs one
computation and N/PAGE_ROWS_MAX slices, and callers asking the same question at
once share one computation.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from jouled.errors import UsageError

PAGE_ROWS_MAX = 1000  # rows per answer, and the page size when none is asked for
CACHED_QUESTIONS = 16  # distinct (kind, suite, axis, ...) questions whose rows are kept
# Rows whose computation took at least SLOW_S are kept, even after the ledger changed,
# until LAG_FACTOR times that long has passed: however fast results are signed, a
# question's rows take at most 1 / (1 + LAG_FACTOR) of one core to keep current.
SLOW_S = 1.0
LAG_FACTOR = 4.0


def page_size(requested: int) -> int:
    """The rows a page holds: `requested`, 0 for the default, never above PAGE_ROWS_MAX."""
    if requested < 0:
        raise UsageError(f"page_size {requested} is negative", hint="ask for 0 (the default)")
    return min(requested or PAGE_ROWS_MAX, PAGE_ROWS_MAX)


def offset(token: str) -> int:
    """Where a page starts: "" for the first, else a `next_page_token` this daemon gave."""
    if not token:
        return 0
    if not (token.isascii() and token.isdigit() and len(token) <= 15):
        raise UsageError(
            f"page_token {token[:40]!r} is not one this daemon gave",
            hint="start with an empty page_token, then pass each answer's next_page_token",
        )
    return int(token)


def page(rows: Sequence[dict[str, Any]], size: int, token: str, version: int) -> dict[str, Any]:
    """One page of `rows`: the rows, how many there are in all, and the next page's token.

    `version` says which state of the ledger the rows were computed from: pages of
    one version fit together; a caller that sees it change may start again.
    """
    start = offset(token)
    end = start + page_size(size)
    return {
        "rows": list(rows[start:end]),
        "rows_total": len(rows),
        "next_page_token": str(end) if end < len(rows) else "",
        "version": version,
    }


class RowCache:
    """The rows of the last few questions, each kept while the ledger's version holds."""

    def __init__(self, size: int = CACHED_QUESTIONS) -> None:
        self._size = size
        # question -> (version, rows, when computed, seconds it took), monotonic clock
        self._rows: OrderedDict[Hashable, tuple[int, list[dict[str, Any]], float, float]] = (
            OrderedDict()
        )
        # A fixed set of locks, one per question's hash: as many as there are kept rows.
        self._stripes = [threading.Lock() for _ in range(size)]
        self._lock = threading.Lock()

    def rows(
        self, question: Hashable, version: int, compute: Callable[[], list[dict[str, Any]]]
    ) -> tuple[int, list[dict[str, Any]]]:
        """The rows for `question` and the version they are of: `version`, or an older one
        while slow rows are kept (SLOW_S). Computed once however many ask at once."""
        # One computation per question: callers asking it meanwhile wait for it and share it.
        with self._stripes[hash(question) % len(self._stripes)]:
            with self._lock:
                cached = self._rows.get(question)
                if cached is not None:
                    old, rows, at, took = cached
                    fresh = old == version
                    kept = took >= SLOW_S and time.monotonic() < at + took * (1 + LAG_FACTOR)
                    if fresh or kept:
                        self._rows.move_to_end(question)
                        return old, rows
            start = time.monotonic()
            rows = compute()
            end = time.monotonic()
            with self._lock:
                self._rows[question] = (version, rows, end, end - start)
                self._rows.move_to_end(question)
                while len(self._rows) > self._size:
                    self._rows.popitem(last=False)
            return version, rows
