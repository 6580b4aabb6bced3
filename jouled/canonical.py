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


def dumps(value: Any) -> str:
    out: list[str] = []
    _encode(value, out)
    return "".join(out)


def dumpb(value: Any) -> bytes:
    """Canonical UTF-8 bytes: what is hashed and signed."""
    return dumps(value).encode("utf-8")
