import pytest
from slidingwindow import chunked, moving_average, windows


def test_overlapping_windows():
    assert list(windows([1, 2, 3, 4, 5], 3)) == [(1, 2, 3), (2, 3, 4), (3, 4, 5)]


def test_window_as_long_as_input():
    assert list(windows("abc", 3)) == [("a", "b", "c")]


def test_windows_from_a_generator():
    assert list(windows((n * n for n in range(4)), 2)) == [(0, 1), (1, 4), (4, 9)]


def test_windows_with_step_that_skips_the_tail():
    assert list(windows(range(6), 2, step=3)) == [(0, 1), (3, 4)]
    assert list(windows(range(8), 3, step=3)) == [(0, 1, 2), (3, 4, 5)]


def test_tiling_windows():
    assert list(windows(range(6), 2, step=2)) == [(0, 1), (2, 3), (4, 5)]


def test_input_shorter_than_window():
    assert list(windows([1, 2], 3)) == []
    assert list(windows([], 1)) == []


@pytest.mark.parametrize(("size", "step"), [(0, 1), (2, 0), (-1, 1), (2.5, 1)])
def test_invalid_arguments(size, step):
    with pytest.raises(ValueError):
        list(windows([1, 2, 3], size, step))


def test_chunked_keeps_the_short_tail():
    assert list(chunked("abcdefg", 3)) == [("a", "b", "c"), ("d", "e", "f"), ("g",)]
    assert list(chunked([], 3)) == []


def test_moving_average():
    assert moving_average([2, 4, 6, 8], 2) == [3.0, 5.0, 7.0]
    assert moving_average([5], 1) == [5.0]
