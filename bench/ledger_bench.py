"""Ledger benchmark: durable appends, export verification, proofs and the frontier query.

What is measured, side by side in one run (wall-clock, `time.perf_counter`):

1. Durable append throughput. `Ledger.append` one entry at a time against
   `Ledger.append_many` in batches of 10 and 100, and `Ledger.append` from 16
   threads at once (the daemon's case: it may commit several callers'
   entries in one write), on a fresh data dir. Every call signs its
   entries and a checkpoint, extends the Merkle tree and writes them to the
   ledger's tail with one fdatasync, so one call is one durable unit; every
   512 entries the tail moves into DuckDB (note replaced, one transaction),
   inside the call that fills the batch. Bodies have the shape
   `jouled.pipeline.evaluate` writes; each attempt is entered in the journal
   first (untimed), as the daemon does.
2. Verification of an N-entry export (default 1,000,000). The export is
   generated once with `make_entry` (signing on a process pool) and cached in
   bench/out/, then `verify_export` is timed reading it line by line from the
   page cache: Merkle-only, signatures on all cores, signatures on one core.
3. Proofs at N leaves: `merkle.inclusion_proof` / `consistency_proof` over the
   cached leaf hashes, and `Ledger.inclusion_proof` / `consistency_proof` on
   the ledger of (1) and on the N-entry ledger of (4).
4. The frontier query over the N-entry ledger: `Ledger.result_bodies()` out
   of DuckDB, then `frontier.frontier_rows` over those bodies in memory (a
   full rescan), and the daemon's running totals (`frontier.Frontier`):
   building them, adding one result, and `rows()`, its query. The
   DuckDB file is filled from the cached export with DuckDB's own JSON reader
   (real signed payloads, no re-signing): loading is not what is measured.
   The daemon's start rebuilds the same totals from the ledger's query
   columns (`Ledger.frontier()`), timed beside them and checked equal.

bench/scale_bench.py measures the issue-12 aims (daemon start, the offline
frontier, verification, appends, `jb-client tasks --json`) against an
earlier revision, side by side.

How to read it: every figure is a median over `--repeats` runs unless the
table says "1 run"; "vs aim" is measured / aim, so for throughput >= 1 meets
the aim and for durations <= 1 does. Nothing here asserts: it is a
measurement, not a test. With `--profile`, one extra untimed pass of each
measured operation runs under cProfile (at most 100,000 entries for the
verify and frontier passes) and the hottest functions are listed at the end;
the full listings go to bench/out/profile-*.txt.

Run: .venv/bin/python bench/ledger_bench.py [--quick | --entries N] [--profile]
The Markdown goes to stdout and bench/out/ledger.md; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _ledger_appends import bench_appends, bench_durability_floor
from _ledger_fixtures import (
    CALIBRATION_BODY,
    ONE_CORE_PREFIX,
    ORIGIN,
    OUT,
    PROFILE_CAP,
    Bodies,
    Export,
    bench_signer,
    genesis_body,
    log,
    open_ledger,
    read_leaves,
    warm_page_cache,
)
from _ledger_frontier import bench_frontier, load_ledger_db
from _ledger_proofs import bench_ledger_proofs, bench_merkle_proofs
from _ledger_report import filesystem_of, machine_facts, render
from _ledger_timing import Profiles, seconds, timed
from _ledger_verify import bench_verify
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from jouled.ledger import merkle
from jouled.ledger.checkpoint import Checkpoint, sign_note
from jouled.ledger.entry import Entry, Signature, make_entry
from jouled.ledger.signing import Signer

# What scale_bench.py, and the probes it runs in this tree and in an earlier one, use
# by these names; `lb.OUT = ...` there redirects ensure_export's cache, which is why the
# export is made in this module.
__all__ = [
    "OUT",
    "Bodies",
    "bench_signer",
    "ensure_export",
    "filesystem_of",
    "load_ledger_db",
    "machine_facts",
    "open_ledger",
    "seconds",
    "warm_page_cache",
]

# Bump when the generated export changes shape, so stale caches are rebuilt.
EXPORT_FORMAT = 1


# -- the cached export ------------------------------------------------------------------


_worker_signer: Signer | None = None


def _sign_chunk(private: bytes, chunk: list[tuple[int, bytes, bytes]]) -> list[str]:
    """Export lines for (seq, payload, leaf hash) items, signed in a worker process."""
    global _worker_signer
    if _worker_signer is None:
        _worker_signer = Signer(Ed25519PrivateKey.from_private_bytes(private))
    signer = _worker_signer
    return [
        Entry(seq, payload, (Signature(signer.keyid, signer.sign(payload)),), leaf).export_line()
        + "\n"
        for seq, payload, leaf in chunk
    ]


def _export_items(n: int, signer: Signer) -> Iterator[tuple[int, str, dict[str, Any]]]:
    yield 0, "genesis", genesis_body(signer)
    if n > 1:
        yield 1, "calibration", CALIBRATION_BODY
    bodies = Bodies(seed=2)
    for seq in range(2, n):
        yield seq, "result", bodies()


def generate_export(n: int, signer: Signer, lines: Path, leaves_path: Path) -> list[bytes]:
    # Payloads are built in order with make_entry because each one's `prev` is
    # the previous leaf hash; signing does not depend on the chain, so it runs
    # on the pool (and so does the export line's own canonical encoding).
    private = signer.private.private_bytes_raw()
    workers = max(1, (os.cpu_count() or 1) - 1)
    chunk_size = 2_000
    leaves: list[bytes] = []
    pending: deque[Future[list[str]]] = deque()
    prev = b""
    tmp = lines.with_suffix(".tmp")
    start = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool, tmp.open("w", encoding="utf-8") as fh:
        chunk: list[tuple[int, bytes, bytes]] = []
        for seq, kind, body in _export_items(n, signer):
            entry = make_entry(seq, kind, prev, body, [])
            prev = entry.leaf_hash
            leaves.append(prev)
            chunk.append((seq, entry.payload, prev))
            if len(chunk) == chunk_size or seq == n - 1:
                pending.append(pool.submit(_sign_chunk, private, chunk))
                chunk = []
                while len(pending) > 2 * workers + 1:
                    fh.writelines(pending.popleft().result())
            if seq and seq % 100_000 == 0:
                rate = seq / (time.perf_counter() - start)
                log(f"export: {seq:,}/{n:,} entries ({rate:,.0f}/s)")
        while pending:
            fh.writelines(pending.popleft().result())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, lines)
    leaves_path.write_bytes(b"".join(leaves))
    return leaves


def ensure_export(n: int, signer: Signer) -> Export:
    lines = OUT / f"export-{n}.jsonl"
    leaves_path = OUT / f"export-{n}.leaves"
    meta_path = OUT / f"export-{n}.json"
    want = {"format": EXPORT_FORMAT, "n": n, "keyid": signer.keyid, "origin": ORIGIN}
    if meta_path.exists() and lines.exists() and leaves_path.exists():
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in want} == want:
            log(f"export: using the cached {lines}")
            return Export(
                n,
                lines,
                leaves_path,
                {int(k): v for k, v in meta["notes"].items()},
                float(meta["generated_s"]),
                True,
                lines.stat().st_size,
            )
    log(f"export: generating {n:,} entries into {lines} (cached for later runs)")
    meta_path.unlink(missing_ok=True)
    generated_s, leaves = timed(lambda: generate_export(n, signer, lines, leaves_path))
    notes: dict[int, str] = {}
    for size in sorted({n, min(n, ONE_CORE_PREFIX), min(n, PROFILE_CAP)}):
        cp = Checkpoint(origin=ORIGIN, size=size, root=merkle.root_from_leaves(leaves[:size]))
        notes[size] = sign_note(cp, [(ORIGIN, signer)])
    # The meta file is written last: its presence marks a complete cache.
    meta_path.write_text(
        json.dumps(
            {**want, "notes": {str(k): v for k, v in notes.items()}, "generated_s": generated_s}
        )
    )
    log(f"export: generated in {generated_s:.0f} s")
    return Export(n, lines, leaves_path, notes, generated_s, False, lines.stat().st_size)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--entries", type=int, default=1_000_000, help="export / ledger size")
    size.add_argument("--quick", action="store_true", help="100,000 entries")
    parser.add_argument("--repeats", type=int, default=3, help="runs behind each median")
    parser.add_argument("--profile", action="store_true", help="add cProfile passes")
    parser.add_argument(
        "--tmp-dir", type=Path, default=None, help="where the temporary data dirs go"
    )
    args = parser.parse_args(argv)
    n = 100_000 if args.quick else args.entries
    if n < 2:
        parser.error("--entries must be at least 2")
    OUT.mkdir(parents=True, exist_ok=True)
    signer = bench_signer()
    profiles = Profiles(args.profile)

    with tempfile.TemporaryDirectory(prefix="ledger-bench-", dir=args.tmp_dir) as tmp_name:
        tmp = Path(tmp_name)
        facts = machine_facts(tmp)
        log("appends")
        appends, small = bench_appends(tmp / "appends", signer, args.repeats, profiles)
        floor = bench_durability_floor(tmp / "appends", small.checkpoint_note(), args.repeats)
        proofs = bench_ledger_proofs(
            small, 5 * args.repeats, f"append ledger, {small.size:,} entries"
        )
        small.close()

        export = ensure_export(n, signer)
        verify = bench_verify(export, signer, args.repeats, profiles)

        log("proofs")
        leaves = read_leaves(export)
        proofs = bench_merkle_proofs(leaves, args.repeats) + proofs
        del leaves
        gc.collect()

        front, big_proofs = bench_frontier(export, signer, tmp, args.repeats, profiles)
        proofs += big_proofs

    text = render(n, args.repeats, facts, appends, floor, export, verify, proofs, front, profiles)
    (OUT / "ledger.md").write_text(text, encoding="utf-8")
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
