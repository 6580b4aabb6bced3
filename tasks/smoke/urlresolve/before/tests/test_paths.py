import pytest
from urlresolve import merge, remove_dot_segments, split, unsplit


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/a/b/c/./../../g", "/a/g"),
        ("mid/content=5/../6", "mid/6"),
        ("/a/b/..", "/a/"),
        ("/..", "/"),
        ("/a/./b/.", "/a/b/"),
        ("", ""),
    ],
)
def test_remove_dot_segments(path, expected):
    assert remove_dot_segments(path) == expected


def test_merge_replaces_last_segment():
    assert merge(split("http://a/b/c/d;p?q"), "g") == "/b/c/g"


def test_merge_with_empty_base_path():
    assert merge(split("http://a"), "g") == "/g"


@pytest.mark.parametrize(
    "uri",
    ["http://a/b?q#f", "http://a/?", "mailto:someone@example.org", "//a", "#", "?", "a/b"],
)
def test_split_unsplit_round_trip(uri):
    assert unsplit(split(uri)) == uri


def test_split_distinguishes_absent_from_empty():
    assert split("http://a/?").query == ""
    assert split("http://a/").query is None
