"""2. Verification of the N-entry export: Merkle-only and with signatures, on all
cores and on one."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass

from _ledger_fixtures import ONE_CORE_PREFIX, PROFILE_CAP, Export, log, warm_page_cache
from _ledger_timing import Profiles, Timing, repeat, seconds

from jouled.ledger.signing import Signer
from jouled.ledger.verify import verify_export, verify_file

# One-core signature verification beyond this is extrapolated from a prefix (ONE_CORE_PREFIX).
ONE_CORE_LIMIT_S = 120.0


@dataclass
class VerifyRow:
    label: str
    entries: int
    timing: Timing
    note: str = ""

    @property
    def rate(self) -> float:
        return self.entries / self.timing.median


def verify_once(export: Export, size: int, signer: Signer, signatures: bool, workers: int) -> None:
    if size == export.n:
        # The whole file: what `jb-client verify` runs, ranges parsed on `workers` processes.
        report = verify_file(
            export.lines,
            [signer.public],
            [export.notes[size]],
            signatures=signatures,
            workers=workers,
        )
    else:
        with export.lines.open(encoding="utf-8") as fh:
            report = verify_export(
                itertools.islice(fh, size),
                [signer.public],
                [export.notes[size]],
                signatures=signatures,
            )
    if report.entries != size:
        raise RuntimeError(f"verified {report.entries} entries, expected {size}")


def bench_verify(
    export: Export, signer: Signer, repeats: int, profiles: Profiles
) -> list[VerifyRow]:
    n = export.n
    cores = os.cpu_count() or 1
    warm_page_cache(export.lines)
    rows: list[VerifyRow] = []

    def once(size: int, sigs: bool, workers: int) -> Callable[[], None]:
        return lambda: verify_once(export, size, signer, sigs, workers)

    log(f"verify: Merkle-only, {n:,} entries x {repeats}")
    rows.append(
        VerifyRow(
            f"Merkle-only (`signatures=False`), `workers={cores}` (all cores)",
            n,
            repeat(once(n, False, cores), repeats),
        )
    )
    rows.append(
        VerifyRow(
            "Merkle-only (`signatures=False`), `workers=1`", n, repeat(once(n, False, 1), repeats)
        )
    )
    log(f"verify: signatures on {cores} workers")
    rows.append(
        VerifyRow(f"signatures, `workers={cores}` (all cores)", n, repeat(once(n, True, cores), 1))
    )
    prefix = min(n, ONE_CORE_PREFIX)
    log(f"verify: signatures on one core, first {prefix:,} entries")
    small = repeat(once(prefix, True, 1), 1)
    estimate = small.median * n / prefix
    if prefix == n:
        rows.append(VerifyRow("signatures, `workers=1`", n, small))
    elif estimate <= ONE_CORE_LIMIT_S:
        log(f"verify: signatures on one core, all {n:,} entries")
        rows.append(VerifyRow("signatures, `workers=1`", n, repeat(once(n, True, 1), 1)))
    else:
        rows.append(
            VerifyRow(
                "signatures, `workers=1`",
                n,
                Timing([estimate]),
                f"extrapolated ×{n / prefix:g} from {seconds(small.median)} measured on the "
                f"first {prefix:,} entries",
            )
        )
    cap = min(n, PROFILE_CAP)
    profiles.run("verify-merkle", once(cap, False, 1))
    profiles.run("verify-signatures-1core", once(cap, True, 1))
    return rows
