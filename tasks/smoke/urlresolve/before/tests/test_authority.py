"""Bases and references that carry ports, user information or empty paths."""

import pytest
from urlresolve import resolve


@pytest.mark.parametrize(
    ("base", "ref", "expected"),
    [
        ("http://a:8080/b/c", "d", "http://a:8080/b/d"),
        ("http://a:8080/b/c", "//h:81/x", "http://h:81/x"),
        ("http://a:8080/b/c", "//h:81", "http://h:81"),
        ("https://user@a/b/c", "../d", "https://user@a/d"),
        ("http://a", "g", "http://a/g"),
        ("http://a", "?y", "http://a?y"),
        ("http://a?q", "#f", "http://a?q#f"),
        ("http://a:8080/b/c/d", "..", "http://a:8080/b/"),
        ("http://a/b/c/d", "g/..", "http://a/b/c/"),
        (
            "http://[::1]:8000/api/v1/items",
            "../v2/items?id=3",
            "http://[::1]:8000/api/v2/items?id=3",
        ),
        ("ftp://host/pub/file#frag", "", "ftp://host/pub/file"),
    ],
    ids=[
        "port-relative-path",
        "network-path-with-port",
        "network-path-no-path",
        "userinfo-parent",
        "empty-base-path",
        "empty-base-path-query",
        "base-query-fragment-only",
        "port-trailing-dotdot",
        "trailing-dotdot-segment",
        "ipv6-literal",
        "base-fragment-dropped",
    ],
)
def test_authority_cases(base, ref, expected):
    assert resolve(base, ref) == expected


def test_base_must_be_absolute():
    with pytest.raises(ValueError):
        resolve("/relative/base", "g")
