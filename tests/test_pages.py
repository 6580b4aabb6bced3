"""Paged answers: bounded pages, tokens checked, rows computed once per ledger change."""

from __future__ import annotations

import threading

import pytest

from jouled import pages
from jouled.errors import UsageError


def test_a_page_never_holds_more_than_the_bound() -> None:
    rows = [{"i": i} for i in range(2500)]
    first = pages.page(rows, 0, "", 7)
    assert len(first["rows"]) == pages.PAGE_ROWS_MAX == 1000
    assert first["next_page_token"] == "1000" and first["rows_total"] == 2500
    assert first["version"] == 7
    last = pages.page(rows, 5000, "2000", 7)
    assert last["rows"] == rows[2000:] and last["next_page_token"] == ""
    assert pages.page(rows, 10, "9999", 7)["rows"] == []


@pytest.mark.parametrize("token", ["-1", "x", "1e3", "9" * 16, "١٢"])
def test_a_token_the_daemon_did_not_give_is_refused(token: str) -> None:
    with pytest.raises(UsageError, match="page_token"):
        pages.page([], 0, token, 0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rows_are_computed_once_per_version(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(pages.time, "monotonic", clock)
    cache = pages.RowCache()
    calls: list[int] = []

    def compute(n: int) -> list[dict[str, int]]:
        calls.append(n)
        return [{"n": n}]

    assert cache.rows("q", 1, lambda: compute(1)) == (1, [{"n": 1}])
    assert cache.rows("q", 1, lambda: compute(9)) == (1, [{"n": 1}])
    assert cache.rows("q", 2, lambda: compute(2)) == (2, [{"n": 2}])  # fast: always current
    assert calls == [1, 2]


def test_slow_rows_are_kept_for_a_bounded_share_of_the_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(pages.time, "monotonic", clock)
    cache = pages.RowCache()

    def slow(n: int) -> list[dict[str, int]]:
        clock.now += 2.0  # the computation takes 2 s
        return [{"n": n}]

    assert cache.rows("q", 1, lambda: slow(1))[0] == 1
    # The ledger changed, but recomputing now would spend more than a fifth of a core.
    clock.now += 2.0 * pages.LAG_FACTOR
    assert cache.rows("q", 2, lambda: slow(2))[0] == 1
    clock.now += 2.0 + 0.01
    assert cache.rows("q", 2, lambda: slow(2))[0] == 2


def test_callers_asking_at_once_share_one_computation() -> None:
    cache = pages.RowCache()
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def compute() -> list[dict[str, int]]:
        calls.append(1)
        started.set()
        release.wait(60)
        return [{"n": 1}]

    first = threading.Thread(target=lambda: cache.rows("q", 1, compute))
    first.start()
    started.wait(60)
    got: list[tuple[int, list[dict[str, int]]]] = []
    second = threading.Thread(target=lambda: got.append(cache.rows("q", 1, compute)))
    second.start()
    release.set()
    first.join()
    second.join()
    assert calls == [1] and got == [(1, [{"n": 1}])]
