"""Whether an example document has the shape of one the daemon really wrote.

Same keys at every level and the same JSON type for every value, except:
objects keyed by data (energy ops, meter domains, claimed figures) are maps,
whose example values must each have the shape of the real value under the
same key, or of any real value when the key is absent there; keys that only
some documents carry are optional; null stands for any type (a figure that
can be missing), and an empty list says nothing about its items.
"""

from __future__ import annotations

from typing import Any

# Paths (dotted, `*` for any key) of objects keyed by data rather than by field name.
MAPS = (
    "body.energy",
    "body.energy.*.domains",
    "body.energy_total.domains",
    "body.claimed",
    "body.logs",
    "body.domains",
    "energy",
    "energy.*.domains",
)
# Keys a document carries only in some cases: an unreliable window's `reasons`.
OPTIONAL = frozenset({"reasons"})


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _is_map(path: str) -> bool:
    parts = path.split(".")
    for pattern in MAPS:
        want = pattern.split(".")
        if len(want) == len(parts) and all(w in ("*", p) for w, p in zip(want, parts, strict=True)):
            return True
    return False


def differences(example: Any, real: Any, path: str = "") -> list[str]:
    """Where `example` departs from the shape of `real`; empty when it has that shape."""
    where = path or "(top)"
    te, tr = _type(example), _type(real)
    if "null" in (te, tr):
        return []
    if te != tr:
        return [f"{where}: the example has a {te}, the daemon writes a {tr}"]
    if te == "array":
        if not example or not real:
            return []
        return [d for item in example for d in differences(item, real[0], f"{path}[]")]
    if te != "object":
        return []
    out: list[str] = []
    if _is_map(path):
        for key, value in example.items():
            candidates = [real[key]] if key in real else list(real.values())
            if candidates and all(differences(value, c, f"{path}.{key}") for c in candidates):
                out += differences(value, candidates[0], f"{path}.{key}")
        return out
    for key in sorted(set(example) - set(real) - OPTIONAL):
        out.append(f"{where}: the example has {key!r}, which the daemon does not write")
    for key in sorted(set(real) - set(example) - OPTIONAL):
        out.append(f"{where}: the daemon writes {key!r}, which the example lacks")
    for key in sorted(set(example) & set(real)):
        out += differences(example[key], real[key], f"{path}.{key}" if path else key)
    return out
