"""Places held at once: bounded in all and per holder, refused at once, given back once."""

from __future__ import annotations

import pytest

from jouled.errors import BusyError, Kind
from jouled.quotas import Places


def places() -> Places:
    return Places("reads in progress", total=3, per_holder=2, hint="retry later")


def test_one_holder_cannot_take_every_place() -> None:
    p = places()
    p.take("mallory"), p.take("mallory")
    with pytest.raises(BusyError) as err:
        p.take("mallory")
    assert err.value.kind == Kind.RESOURCE_EXHAUSTED
    assert "mallory already has 2 reads in progress; the limit is 2 per credential" in (
        err.value.message
    )
    assert err.value.hint == "retry later"
    p.take("alice")  # another holder still gets the last place
    with pytest.raises(BusyError, match="3 reads in progress on this daemon; the limit is 3"):
        p.take("bob")


def test_trusted_callers_count_towards_the_total_only() -> None:
    p = places()
    for _ in range(3):
        p.take(None)
    with pytest.raises(BusyError, match="the limit is 3"):
        p.take(None)


def test_a_place_is_given_back_once() -> None:
    p = places()
    give_back = p.take("alice")
    assert p.held("alice") == 1 and p.held() == 1
    give_back()
    give_back()
    assert p.held("alice") == 0 and p.held() == 0
    p.take("alice"), p.take("alice")
