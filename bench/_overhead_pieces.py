"""Where an attempt's time goes: the library pieces it passes through, timed in
process, the sandbox's launch, the RPC round trips and the CLI's start-up."""

from __future__ import annotations

import importlib.util
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import grpc
from _overhead_fixtures import (
    TASK_ID,
    Scratch,
    Series,
    _bytecode_env,
    _cli,
    _run_quiet,
    measure,
    measure_with_setup,
    timed,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from jb_client.api import Client

import jouled
from jouled.contracts.contract import Contract
from jouled.ledger import merkle
from jouled.ledger.signing import load_or_create_key
from jouled.ledger.store import Ledger
from jouled.patch import parse_patch
from jouled.patch_apply import apply_patch
from jouled.pipeline.graded_tree import restore_protected, seed
from jouled.pipeline.limits import Limits
from jouled.pipeline.sandbox import run as sandbox_run

# Synthetic ledger sizes for the inclusion proof: the store keeps no interior
# nodes, so a receipt's proof costs about one hash per entry in the ledger.
PROOF_SIZES = (1_000, 100_000)
PROOF_REPEATS = 5


# -- the breakdown ------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    series: Series
    per_attempt: int  # how many times one attempt pays for it
    note: str = ""

    @property
    def total_ms(self) -> float:
        return self.series.median_ms * self.per_attempt


def _realistic_body(template: dict[str, Any]) -> dict[str, Any]:
    # Fresh keys per entry, as real attempts have: the journal's primary key and
    # the idempotency lookup then see distinct values, not one repeated row.
    return {
        **template,
        "attempt_id": secrets.token_hex(16),
        "idempotency_key": secrets.token_hex(16),
    }


def _receipt_proof(ledger: Ledger, seq: int) -> dict[str, Any]:
    # What `Daemon.receipt` does: read the published note, prove against its size.
    note = ledger.checkpoint_note()
    return ledger.inclusion_proof(seq, int(note.split("\n")[1]))


def ledger_pieces(scratch: Scratch, template: dict[str, Any], repeats: int) -> list[Piece]:
    """The per-attempt ledger work of `Daemon.submit`, on a temp DuckDB of its own."""
    home = scratch.fresh("ledger")
    home.mkdir()
    signer, _ = load_or_create_key(home / "jouled.key", home / "jouled.pub")
    ledger = Ledger(
        home / "ledger.duckdb",
        signer,
        origin="bench/overhead",
        checkpoint_path=home / "checkpoint.note",
        genesis={"version": "bench"},
    )
    try:
        # A handful of earlier results so the first append is not a special case.
        for _ in range(5):
            ledger.append("result", _realistic_body(template))
        lookup = Series("idempotency lookup")
        journal = Series("journal accept")
        append = Series("ledger append")
        receipt = Series("receipt proof")
        for _ in range(repeats):
            body = _realistic_body(template)
            key, attempt_id = body["idempotency_key"], body["attempt_id"]
            lookup.add(timed(partial(ledger.result_for_key, key))[0])
            accept = partial(ledger.journal_accept, attempt_id, key, TASK_ID, {"solver": "remote"})
            journal.add(timed(accept)[0])
            ns, entry = timed(partial(ledger.append, "result", body))
            append.add(ns)
            receipt.add(timed(partial(_receipt_proof, ledger, entry.seq))[0])
        size = ledger.size
    finally:
        ledger.close()
    return [
        Piece(lookup, 1, "`result_for_key`: the client always sends a key"),
        Piece(journal, 1, "`journal_accept`: one DuckDB commit before the run"),
        Piece(append, 1, "sign (Ed25519), commit, checkpoint note with fsync"),
        Piece(receipt, 1, f"checkpoint read + inclusion proof, ledger of ~{size}"),
    ]


def proof_scaling() -> list[tuple[int, Series]]:
    """Inclusion-proof cost at ledger sizes a long-lived daemon reaches (its cached tree)."""
    rows = []
    for size in PROOF_SIZES:
        tree = merkle.MerkleTree()
        for i in range(size):
            tree.append(merkle.leaf_hash(i.to_bytes(8, "big")))
        rows.append(
            (
                size,
                measure(
                    f"proof@{size}",
                    PROOF_REPEATS,
                    partial(tree.inclusion_proof, size - 1, size),
                ),
            )
        )
    return rows


def tree_pieces(contract: Contract, patch: bytes, scratch: Scratch, repeats: int) -> list[Piece]:
    parsed = parse_patch(patch)
    seeding = measure("seed", repeats, lambda: seed(contract, scratch.fresh("seed")))
    parsing = measure("parse", repeats, lambda: parse_patch(patch))
    applying = measure_with_setup(
        "apply",
        repeats,
        lambda: seed(contract, scratch.fresh("apply")),
        lambda t: apply_patch(parsed, t),
    )

    def patched() -> Path:
        tree = seed(contract, scratch.fresh("restore"))
        apply_patch(parsed, tree)
        return tree

    restoring = measure_with_setup(
        "restore", repeats, patched, lambda t: restore_protected(contract, t)
    )
    return [
        Piece(seeding, 1, "`seed`: the attempt's workdir, in `prepared`"),
        Piece(parsing, 1, "`parse_patch` of the submitted diff"),
        Piece(applying, 1, "`apply_patch` into that workdir"),
        Piece(restoring, 1, "`restore_protected`: reads and compares every file"),
    ]


@dataclass
class Launch:
    sandbox: Series
    plain: Series
    level: str

    @property
    def overhead_ms(self) -> float:
        return self.sandbox.median_ms - self.plain.median_ms


def launch_overhead(contract: Contract, scratch: Scratch, repeats: int) -> Launch:
    """`sandbox.run` of a no-op interpreter against a bare `subprocess.run` of it."""
    work = scratch.fresh("launch")
    work.mkdir()
    os.chmod(work, 0o711)
    tree = seed(contract, work / "tree")
    noop = [sys.executable, "-c", "pass"]
    limits = Limits(timeout_s=contract.timeout_s)
    level = sandbox_run(noop, tree, limits=limits).level
    sandboxed, plain = Series("sandbox"), Series("plain")
    for _ in range(repeats):
        sandboxed.add(timed(lambda: sandbox_run(noop, tree, limits=limits))[0])
        plain.add(timed(lambda: subprocess.run(noop, cwd=tree, check=True))[0])
    return Launch(sandboxed, plain, level)


def rpc_round_trips(target: str, repeats: int) -> tuple[Series, Series]:
    with Client(target, timeout_s=30) as client, grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        # Connect both channels first: the warm round trip is what an attempt pays.
        client.tasks()
        stub.Check(request, timeout=5)
        health = measure("RPC round trip", repeats, lambda: stub.Check(request, timeout=5))
        tasks = measure("tasks", repeats, client.tasks)
    return health, tasks


@dataclass
class CliStartup:
    bare: Series  # `python -c pass`
    imported: Series  # `python -c "import jb_client.cli"`, in this environment
    cached: Series  # the same with every module's bytecode cached
    tasks_cli: Series  # `jb-client tasks --json`: a whole CLI run around a trivial RPC
    project_cached: bool  # whether this environment has bytecode for jouled's own sources
    heaviest: list[tuple[str, float]]  # (module, cumulative ms) of that CLI run


@dataclass
class _Import:
    name: str
    cumulative_ms: float
    children: list[_Import] = field(default_factory=list)


def _import_tree(stderr: str) -> list[_Import]:
    """The roots of `-X importtime` output, which lists children before their parent."""
    pending: dict[int, list[_Import]] = {}
    for line in stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3 or not fields[1].strip().isdigit():
            continue  # the header, or the program's own output
        raw = fields[2].rstrip()
        depth = (len(raw) - len(raw.lstrip(" ")) - 1) // 2
        node = _Import(raw.strip(), int(fields[1]) / 1000, pending.pop(depth + 1, []))
        pending.setdefault(depth, []).append(node)
    return pending.get(0, [])


def _outside_jb_client(nodes: list[_Import]) -> Iterator[_Import]:
    """The first module on each import path that is not the client's own, so none overlap."""
    for node in nodes:
        if node.name.partition(".")[0] == "jb_client":
            yield from _outside_jb_client(node.children)
        else:
            yield node


def cli_startup(scratch: Scratch, target: str, repeats: int, top: int = 8) -> CliStartup:
    """What a `jb-client` process pays around the request it sends."""
    bare_argv = [sys.executable, "-c", "pass"]
    import_argv = [sys.executable, "-c", "import jb_client.cli"]
    tasks_args = ["--target", target, "tasks", "--json"]
    # An editable install ships no bytecode for the project's own modules; a
    # private cache prefix shows what compiling them costs without writing
    # __pycache__ into the source tree.
    cached_env = _bytecode_env(write=True, pycache=scratch.fresh("pycache"))
    subprocess.run(import_argv, env=cached_env, check=True)
    bare, imported, cached = Series("bare"), Series("import"), Series("cached")
    tasks_cli = Series("jb-client tasks")
    for _ in range(repeats):
        bare.add(timed(partial(_run_quiet, bare_argv))[0])
        imported.add(timed(partial(_run_quiet, import_argv))[0])
        cached.add(timed(partial(_run_quiet, import_argv, cached_env))[0])
        tasks_cli.add(timed(partial(_run_quiet, [*_cli(), *tasks_args]))[0])
    project_cached = Path(importlib.util.cache_from_source(jouled.__file__)).exists()
    done = subprocess.run(
        [*_cli("-X", "importtime"), *tasks_args],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = sorted(
        _outside_jb_client(_import_tree(done.stderr)),
        key=lambda node: node.cumulative_ms,
        reverse=True,
    )
    heaviest = [(m.name, m.cumulative_ms) for m in modules[:top]]
    return CliStartup(bare, imported, cached, tasks_cli, project_cached, heaviest)
