"""An agent CLI's own usage report: the `claimed` figures (dollars, tokens) it prints.

The run itself is `jouled.pipeline.solve`; this reads what the agent said it
spent, from the last JSON object of its output, by the paths its solver names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def _last_json(output: str) -> Any:
    """The last JSON object in `output`: the whole of it, or the last line that is one."""
    text = output.strip()
    candidates = [text, *reversed(text.splitlines())]
    for candidate in candidates:
        candidate = candidate.strip()
        if candidate.startswith("{") and candidate.endswith("}"):
            try:
                return json.loads(candidate)
            except ValueError:
                continue
    return None


def _lookup(document: Any, path: str) -> float | None:
    """The number at dotted `path`; `*` sums over every key of an object."""
    values: list[Any] = [document]
    for part in path.split("."):
        found: list[Any] = []
        for value in values:
            if not isinstance(value, dict):
                continue
            if part == "*":
                found.extend(value.values())
            elif part in value:
                found.append(value[part])
        values = found
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not numbers or not all(math.isfinite(v) and v >= 0 for v in numbers):
        return None
    return float(sum(numbers))


def claimed_usage(output: str, usage: Mapping[str, str]) -> dict[str, int]:
    """`claimed` figures from the agent's report: dollars as micro-dollars, token counts."""
    if not usage:
        return {}
    document = _last_json(output)
    if document is None:
        return {}
    claimed: dict[str, int] = {}
    for key, path in usage.items():
        value = _lookup(document, path)
        if value is None:
            continue
        if key == "usd":
            claimed["usd_micros"] = round(value * 1_000_000)
        else:
            claimed[key] = round(value)
    # The ledger holds integers a JSON reader anywhere reads exactly.
    return {k: v for k, v in claimed.items() if 0 <= v < 2**53}
