"""A request's arguments, checked before anything is sent: a bad one is a ClientError naming it."""

from __future__ import annotations

from collections.abc import Mapping

from jb_client.errors import ClientError

from jouled.errors import Kind

# The `claimed` figures a submission may carry (`jouled.v1.Claimed`), each 0 to 2^53-1.
CLAIMS = ("tokens_in", "tokens_out", "usd_micros", "joules_mj")
MAX_SAFE_INTEGER = 2**53 - 1


def check_count(name: str, value: object, top: int = MAX_SAFE_INTEGER) -> int:
    """`value` as a whole number from 0 to `top`, else a ClientError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClientError(
            f"{name} must be a whole number, not {type(value).__name__} {value!r}",
            Kind.INVALID_ARGUMENT,
            hint=f"give {name} as an int from 0 to {top:,}",
        )
    if not 0 <= value <= top:
        raise ClientError(
            f"{name} {value} is out of range: it runs from 0 to {top:,}",
            Kind.INVALID_ARGUMENT,
            hint=f"give {name} from 0 to {top:,}",
        )
    return value


def check_claimed(claimed: Mapping[str, int] | None) -> dict[str, int]:
    """The `claimed` figures checked: known names, whole numbers in range."""
    if claimed is None:
        return {}
    if not isinstance(claimed, Mapping):
        raise ClientError(
            f"claimed must be a mapping, not {type(claimed).__name__}",
            Kind.INVALID_ARGUMENT,
            hint=f"e.g. claimed={{'usd_micros': 1200}}; the names are {', '.join(CLAIMS)}",
        )
    out = {}
    for name, value in claimed.items():
        if name not in CLAIMS:
            hint = f"claimed figures are {', '.join(CLAIMS)}"
            if name in ("usd", "dollars"):
                hint += "; dollars go as whole micro-dollars: usd_micros=round(usd * 1e6)"
            elif name in ("joules", "j", "mj"):
                hint += "; joules go as whole millijoules: joules_mj=round(joules * 1000)"
            raise ClientError(f"unknown claimed figure {name!r}", Kind.INVALID_ARGUMENT, hint=hint)
        out[name] = check_count(f"claimed {name}", value)
    return out


def fresh_key() -> str:
    """An idempotency key no other attempt has: a fresh UUID (hex)."""
    import uuid

    return uuid.uuid4().hex


def check_text(name: str, value: object) -> str:
    """A string field of a request; anything else is a ClientError naming it."""
    if not isinstance(value, str):
        raise ClientError(
            f"{name} must be a str, not {type(value).__name__}",
            Kind.INVALID_ARGUMENT,
            hint=f"pass {name} as text",
        )
    return value
