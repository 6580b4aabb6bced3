"""Resolve relative URI references against a base URI (RFC 3986, section 5).

>>> resolve("http://a/b/c/d;p?q", "../g")
'http://a/b/g'
"""

from urlresolve.components import URIReference, split, unsplit
from urlresolve.paths import merge, remove_dot_segments
from urlresolve.resolver import resolve

__all__ = [
    "URIReference",
    "merge",
    "remove_dot_segments",
    "resolve",
    "split",
    "unsplit",
]
