from datetime import datetime

import pytest
from interval import Interval, merge


def test_empty_intervals_are_rejected():
    with pytest.raises(ValueError):
        Interval(3, 3)
    with pytest.raises(ValueError):
        Interval(5, 1)


def test_membership_is_half_open():
    iv = Interval(1, 4)
    assert 1 in iv
    assert 3.999 in iv
    assert 4 not in iv
    assert 0 not in iv


def test_overlapping_and_nested_intervals():
    assert Interval(1, 5).overlaps(Interval(4, 8))
    assert Interval(4, 8).overlaps(Interval(1, 5))
    assert Interval(1, 10).overlaps(Interval(3, 4))
    assert Interval(1, 10).contains_interval(Interval(3, 4))
    assert not Interval(3, 4).contains_interval(Interval(1, 10))


def test_disjoint_intervals_do_not_overlap():
    assert not Interval(1, 2).overlaps(Interval(5, 6))
    assert Interval(1, 2).intersection(Interval(5, 6)) is None
    assert Interval(1, 2).gap(Interval(5, 6)) == Interval(2, 5)


def test_adjacent_intervals_do_not_overlap():
    assert Interval(1, 3).touches(Interval(3, 5))
    assert not Interval(1, 3).overlaps(Interval(3, 5))
    assert not Interval(3, 5).overlaps(Interval(1, 3))


def test_intersection_of_adjacent_intervals_is_none():
    assert Interval(1, 3).intersection(Interval(3, 5)) is None
    assert Interval(1, 3).gap(Interval(3, 5)) is None


def test_back_to_back_meetings_do_not_clash():
    nine_to_ten = Interval(datetime(2024, 5, 6, 9), datetime(2024, 5, 6, 10))
    ten_to_eleven = Interval(datetime(2024, 5, 6, 10), datetime(2024, 5, 6, 11))
    half_past_nine = Interval(datetime(2024, 5, 6, 9, 30), datetime(2024, 5, 6, 10, 30))
    assert not nine_to_ten.overlaps(ten_to_eleven)
    assert nine_to_ten.overlaps(half_past_nine)
    assert nine_to_ten.intersection(half_past_nine).length.total_seconds() == 1800


def test_intersection():
    assert Interval(1, 5).intersection(Interval(4, 8)) == Interval(4, 5)
    assert Interval(1, 10).intersection(Interval(3, 4)) == Interval(3, 4)


def test_merge_coalesces_overlapping_and_touching():
    merged = merge(
        [Interval(5, 8), Interval(1, 3), Interval(3, 4), Interval(6, 7), Interval(10, 12)]
    )
    assert merged == [Interval(1, 4), Interval(5, 8), Interval(10, 12)]
    assert merge([]) == []
