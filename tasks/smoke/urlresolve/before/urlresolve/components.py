"""Splitting a URI reference into its five components and joining them back."""

from __future__ import annotations

import re
from typing import NamedTuple

# The generic parsing expression from RFC 3986, Appendix B.
_URI_RE = re.compile(r"^(?:([^:/?#]+):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?$", re.S)


class URIReference(NamedTuple):
    """The components of a URI reference.

    ``None`` means the component is absent, which is not the same thing as
    present but empty: ``"http://a/?"`` has an empty query, ``"http://a/"``
    has none. The path is always a string, possibly empty.
    """

    scheme: str | None
    authority: str | None
    path: str
    query: str | None
    fragment: str | None


def split(uri: str) -> URIReference:
    """Split ``uri`` into scheme, authority, path, query and fragment."""
    match = _URI_RE.match(uri)
    if match is None:  # pragma: no cover - the expression matches any string
        raise ValueError(f"cannot parse URI reference {uri!r}")
    scheme, authority, path, query, fragment = match.groups()
    return URIReference(scheme, authority, path, query, fragment)


def unsplit(parts: URIReference) -> str:
    """Recompose a URI reference from its components (RFC 3986, section 5.3)."""
    out = []
    if parts.scheme is not None:
        out.append(parts.scheme + ":")
    if parts.authority is not None:
        out.append("//" + parts.authority)
    out.append(parts.path)
    if parts.query is not None:
        out.append("?" + parts.query)
    if parts.fragment is not None:
        out.append("#" + parts.fragment)
    return "".join(out)
