"""Canonical JSON (RFC 8785, JCS) for the integer-only documents the ledger signs.

Keys sorted by their UTF-16 code units, no insignificant whitespace, strings
escaped minimally. Floats are refused: JCS serialises them via ECMAScript
number formatting, and the ledger stores energy as integer millijoules so
that no two implementations can disagree on a digit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

# Beyond 2**53 an integer cannot round-trip through an IEEE double (I-JSON, RFC 7493).
MAX_SAFE_INTEGER = 2**53 - 1


class CanonicalError(ValueError):
    pass


def _sort_key(key: str) -> list[int]:
    encoded = key.encode("utf-16-be")
    return [int.from_bytes(encoded[i : i + 2], "big") for i in range(0, len(encoded), 2)]


def _encode(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if abs(value) > MAX_SAFE_INTEGER:
            raise CanonicalError(f"integer {value} is outside the I-JSON safe range")
        out.append(str(value))
    elif isinstance(value, float):
        raise CanonicalError(f"float {value!r} in a canonical document; use integers")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, Mapping):
        out.append("{")
        for i, key in enumerate(sorted(value, key=_check_key)):
            if i:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _encode(value[key], out)
        out.append("}")
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise CanonicalError(f"cannot canonicalise {type(value).__name__}")


def _check_key(key: object) -> list[int]:
    if not isinstance(key, str):
        raise CanonicalError(f"object key {key!r} is not a string")
    return _sort_key(key)


def _plain(value: Any) -> bool:
    """Check a document; True when the standard encoder's key order is JCS order.

    Python sorts keys by code point and JCS by UTF-16 code unit; the two agree
    unless a key holds a character above U+D7FF. Raises on what JCS cannot
    represent here, exactly as the slow path would.
    """
    plain = True
    stack = [value]
    while stack:
        v = stack.pop()
        if v is None or isinstance(v, bool | str):
            continue
        if isinstance(v, int):
            if abs(v) > MAX_SAFE_INTEGER:
                raise CanonicalError(f"integer {v} is outside the I-JSON safe range")
        elif isinstance(v, float):
            raise CanonicalError(f"float {v!r} in a canonical document; use integers")
        elif isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str):
                    raise CanonicalError(f"object key {k!r} is not a string")
                if k and max(k) > "\ud7ff":
                    plain = False
                stack.append(item)
        elif isinstance(v, list | tuple):
            stack.extend(v)
        else:
            return False  # other mappings and sequences take the general path
    return plain


def dumps(value: Any) -> str:
    if _plain(value):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    out: list[str] = []
    _encode(value, out)
    return "".join(out)


def dumpb(value: Any) -> bytes:
    """Canonical UTF-8 bytes: what is hashed and signed."""
    return dumps(value).encode("utf-8")
