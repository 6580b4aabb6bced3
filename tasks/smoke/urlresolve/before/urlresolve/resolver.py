"""Reference resolution (RFC 3986, section 5.2.2)."""

from __future__ import annotations

from urlresolve.components import URIReference, split, unsplit
from urlresolve.paths import merge, remove_dot_segments


def resolve(base: str, ref: str, *, strict: bool = True) -> str:
    """Resolve the URI reference ``ref`` against the absolute URI ``base``.

    ``base`` must have a scheme; its fragment, if any, is ignored. With
    ``strict=False`` a reference whose scheme equals the base's scheme is
    treated as relative, the backwards-compatible behaviour that RFC 3986
    allows for old parsers (``"http:g"`` against an http base).
    """
    b = split(base)
    if b.scheme is None:
        raise ValueError(f"base URI must be absolute, got {base!r}")
    r = split(ref)

    scheme = r.scheme
    if not strict and scheme is not None and scheme.lower() == b.scheme.lower():
        scheme = None

    if scheme is not None:
        target = URIReference(scheme, r.authority, remove_dot_segments(r.path), r.query, r.fragment)
    elif r.authority is not None:
        target = URIReference(
            b.scheme, r.authority, remove_dot_segments(r.path), r.query, r.fragment
        )
    elif r.path == "":
        query = r.query if r.query is not None else b.query
        target = URIReference(b.scheme, b.authority, b.path, query, r.fragment)
    elif r.path.startswith("/"):
        target = URIReference(
            b.scheme, b.authority, remove_dot_segments(r.path), r.query, r.fragment
        )
    else:
        path = remove_dot_segments(merge(b, r.path))
        target = URIReference(b.scheme, b.authority, path, r.query, r.fragment)
    return unsplit(target)
