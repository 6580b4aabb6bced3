"""Parts several wire documents share: grade counts, energy windows, signatures, proofs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict


class GradeCounts(TypedDict):
    """How many expected test ids passed, failed or were missing."""

    expected: int
    passed: int
    failed: int
    missing: int


class EnergyWindow(TypedDict, total=False):
    """One metered window (docs/ledger.md, `result`: `energy`); every key is optional."""

    gross_mj: int | None
    idle_mj: int | None
    marginal_mj: int | None
    wall_ms: int
    wall_us: int
    edge_us: int
    domains: dict[str, int | None]  # every one null in an invalid window
    source: str
    attribution: str
    valid: bool
    reliable: bool
    reasons: list[str]


def _joules(mj: int | None) -> float | None:
    return None if mj is None else mj / 1000


@dataclass(frozen=True)
class Energy:
    """One metered window in joules and seconds, as floats: an `EnergyWindow` read.

    A figure the window does not have (an invalid window's, one an older daemon
    did not write) is None. `to_dict()` is the window as signed, in millijoules.
    """

    gross_j: float | None
    idle_j: float | None
    marginal_j: float | None
    wall_s: float | None
    domains_j: dict[str, float | None]  # per-domain gross
    source: str
    attribution: str
    valid: bool
    reliable: bool
    reasons: list[str]
    window: EnergyWindow = field(repr=False, compare=False)

    @classmethod
    def of(cls, window: EnergyWindow) -> Energy:
        if "wall_us" in window:
            wall_s: float | None = window["wall_us"] / 1_000_000
        elif "wall_ms" in window:
            wall_s = window["wall_ms"] / 1000
        else:
            wall_s = None
        return cls(
            gross_j=_joules(window.get("gross_mj")),
            idle_j=_joules(window.get("idle_mj")),
            marginal_j=_joules(window.get("marginal_mj")),
            wall_s=wall_s,
            domains_j={k: _joules(v) for k, v in window.get("domains", {}).items()},
            source=window.get("source", ""),
            attribution=window.get("attribution", ""),
            valid=window.get("valid", True),
            reliable=window.get("reliable", False),
            reasons=list(window.get("reasons", [])),
            window=window,
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.window)


class Signature(TypedDict):
    keyid: str
    sig: str


class InclusionProof(TypedDict):
    seq: int
    leaf_hash: str
    tree_size: int
    root: str
    hashes: list[str]
