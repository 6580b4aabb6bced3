"""3. Proofs at N leaves: over the cached leaf hashes, and from a ledger."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from _ledger_timing import Timing, repeat, timed

from jouled.ledger import merkle
from jouled.ledger.store import Ledger


@dataclass
class ProofRow:
    label: str
    size: int
    timing: Timing
    proof_len: int = 0


def bench_merkle_proofs(leaves: list[bytes], repeats: int) -> list[ProofRow]:
    n = len(leaves)
    rows: list[ProofRow] = []
    indices = sorted({0, n // 2, n - 1})
    runs: list[float] = []
    proof: list[bytes] = []
    for _ in range(repeats):
        for index in indices:
            dt, proof = timed(partial(merkle.inclusion_proof, leaves, index, n))
            runs.append(dt)
    rows.append(
        ProofRow(f"`merkle.inclusion_proof` (leaves {indices})", n, Timing(runs), len(proof))
    )
    root = merkle.root_from_leaves(leaves)
    rows.append(
        ProofRow(
            "`merkle.verify_inclusion` of that proof",
            n,
            repeat(lambda: merkle.verify_inclusion(leaves[-1], n - 1, n, proof, root), 5 * repeats),
            len(proof),
        )
    )
    olds = sorted({max(1, n // 3), max(1, n - 1)})
    runs = []
    for _ in range(repeats):
        for old in olds:
            dt, proof = timed(partial(merkle.consistency_proof, leaves, old, n))
            runs.append(dt)
    rows.append(
        ProofRow(f"`merkle.consistency_proof` (from sizes {olds})", n, Timing(runs), len(proof))
    )
    rows.append(
        ProofRow(
            "`merkle.root_from_leaves` (what the stateless proofs above rehash)",
            n,
            repeat(lambda: merkle.root_from_leaves(leaves), repeats),
        )
    )
    return rows


def bench_ledger_proofs(ledger: Ledger, repeats: int, where: str) -> list[ProofRow]:
    n = ledger.size
    rows: list[ProofRow] = []
    runs: list[float] = []
    proof: dict[str, Any] = {}
    for _ in range(repeats):
        for seq in sorted({0, n // 2, n - 1}):
            dt, proof = timed(partial(ledger.inclusion_proof, seq))
            runs.append(dt)
    rows.append(
        ProofRow(f"`Ledger.inclusion_proof` ({where})", n, Timing(runs), len(proof["hashes"]))
    )
    timing = repeat(lambda: ledger.consistency_proof(max(1, n // 3)), repeats)
    rows.append(ProofRow(f"`Ledger.consistency_proof` ({where})", n, timing))
    return rows
