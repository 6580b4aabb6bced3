"""Path operations used by reference resolution (RFC 3986, sections 5.2.3 and 5.2.4)."""

from __future__ import annotations

from urlresolve.components import URIReference


def merge(base: URIReference, ref_path: str) -> str:
    """Merge a relative-path reference with the path of ``base``.

    If the base has an authority and an empty path the result is ``"/"``
    followed by the reference path; otherwise the reference path replaces
    everything after the last ``"/"`` of the base path (a base path without
    any ``"/"`` is replaced entirely).
    """
    if base.authority is not None and base.path == "":
        return "/" + ref_path
    cut = base.path.rfind("/")
    return base.path[: cut + 1] + ref_path


def remove_dot_segments(path: str) -> str:
    """Interpret and remove the ``"."`` and ``".."`` segments of ``path``.

    Follows the input-buffer / output-buffer algorithm of RFC 3986,
    section 5.2.4. Leading ``".."`` segments that would climb above the root
    are dropped, so ``"/../g"`` becomes ``"/g"``.
    """
    out: list[str] = []
    rest = path
    while rest:
        if rest.startswith("../"):
            rest = rest[3:]
        elif rest.startswith("./") or rest.startswith("/./"):
            rest = rest[2:]
        elif rest == "/.":
            rest = "/"
        elif rest.startswith("/../"):
            rest = rest[3:]
            if out:
                out.pop()
        elif rest == "/..":
            rest = "/"
            if out:
                out.pop()
        elif rest in (".", ".."):
            rest = ""
        else:
            end = rest.find("/", 1)
            if end == -1:
                end = len(rest)
            out.append(rest[:end])
            rest = rest[end:]
    return "".join(out)
