from slidingwindow import chunked, moving_average, windows


def test_docstring_step_example():
    assert list(windows(range(7), 3, step=2)) == [(0, 1, 2), (2, 3, 4), (4, 5, 6)]


def test_single_item_window():
    assert list(windows(["only"], 1)) == [("only",)]


def test_every_item_is_a_window_of_one():
    assert list(windows("abc", 1)) == [("a",), ("b",), ("c",)]


def test_moving_average_covers_the_last_window():
    assert moving_average([2, 4, 6, 8], 2) == [3.0, 5.0, 7.0]


def test_moving_average_of_a_full_window():
    assert moving_average([1, 2, 3], 3) == [2.0]


def test_window_longer_than_input_is_empty():
    assert list(windows([1, 2], 3)) == []


def test_chunks_rejoin_to_the_input():
    items = list(range(10))
    assert [x for chunk in chunked(items, 4) for x in chunk] == items
