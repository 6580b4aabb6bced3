"""The ledger benchmark's fixtures: its signing key, `result` bodies shaped like the
daemon's, the ledger it opens on a data dir, and the record of the cached export."""

from __future__ import annotations

import base64
import hashlib
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from jouled import __version__
from jouled.ledger import merkle
from jouled.ledger.signing import Signer, raw_public
from jouled.ledger.store import Ledger

OUT = Path(__file__).resolve().parent / "out"
ORIGIN = "jouled/bench/ledger"

# The prefixes verified on their own: one-core signature verification's (see
# ONE_CORE_LIMIT_S) and the profiled passes'. The export carries a note for each.
ONE_CORE_PREFIX = 100_000
PROFILE_CAP = 100_000

SUITES = ("swe-lite", "polyglot", "smoke")
TASKS_PER_SUITE = 300
SOLVERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reference", ("",)),
    ("noop", ("",)),
    ("claude-code", ("claude-sonnet-4", "claude-opus-4")),
    ("aider", ("gpt-5", "qwen3-coder")),
    ("openhands", ("gpt-5", "claude-sonnet-4")),
    ("swe-agent", ("llama-4", "qwen3-coder")),
)
DAEMON_SOLVERS = frozenset({"reference", "noop"})
STATUSES = ("resolved", "unresolved", "timeout", "error", "invalid")
STATUS_WEIGHTS = (34, 46, 8, 5, 7)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def bench_signer() -> Signer:
    # A fixed key, so a cached export verifies against the key of a later run.
    return Signer(Ed25519PrivateKey.from_private_bytes(hashlib.sha256(ORIGIN.encode()).digest()))


# -- realistic bodies --------------------------------------------------------------------


class Bodies:
    """`result` bodies shaped like `Evaluator._body`, drawn from a seeded RNG."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.digests = {
            f"{suite}/task-{k:04d}": hashlib.sha256(f"{suite}/{k}".encode()).hexdigest()
            for suite in SUITES
            for k in range(TASKS_PER_SUITE)
        }
        self.n = 0

    def _window(self, phase: str) -> dict[str, Any]:
        rng = self.rng
        wall_ms = rng.randint(150, 600_000) if phase != "grade" else rng.randint(150, 90_000)
        if rng.random() < 0.01:
            # A failed read: the figures are null, never zero (meter/window.py).
            return {
                "gross_mj": None,
                "idle_mj": None,
                "marginal_mj": None,
                "source": "rapl+nvml",
                "reliable": False,
                "attribution": "exclusive",
                "wall_ms": wall_ms,
                "valid": False,
                "domains": {},
                "reasons": ["package-0: read failed"],
                "calibration_seq": 1,
            }
        idle_mj = 9_000 * wall_ms // 1000
        marginal_mj = rng.randint(0, 40_000) * wall_ms // 1000
        gross_mj = idle_mj + marginal_mj
        gpu = gross_mj // rng.randint(3, 6)
        window: dict[str, Any] = {
            "gross_mj": gross_mj,
            "idle_mj": idle_mj,
            "marginal_mj": marginal_mj,
            "source": "rapl+nvml",
            "reliable": wall_ms >= 100 and rng.random() > 0.1,
            "attribution": "exclusive",
            "wall_ms": wall_ms,
            "valid": True,
            "domains": {"package-0": gross_mj - gpu, "nvml:0": gpu},
            "calibration_seq": 1,
        }
        if not window["reliable"]:
            window["reasons"] = ["marginal energy within idle noise"]
        return window

    def __call__(self) -> dict[str, Any]:
        rng = self.rng
        i = self.n
        self.n += 1
        task_id = f"{rng.choice(SUITES)}/task-{rng.randrange(TASKS_PER_SUITE):04d}"
        suite = task_id.split("/", 1)[0]
        solver, models = rng.choice(SOLVERS)
        status = rng.choices(STATUSES, STATUS_WEIGHTS)[0]
        expected = rng.randint(1, 40)
        failed = 0 if status == "resolved" else rng.randint(0, expected)
        missing = 0 if status == "resolved" else rng.randint(0, expected - failed)
        energy: dict[str, Any] = {}
        if rng.random() < 0.03:
            energy["baseline"] = self._window("baseline")
        if solver in DAEMON_SOLVERS:
            energy["solve"] = self._window("solve")
        if status != "error" or rng.random() < 0.5:
            energy["grade"] = self._window("grade")
        claimed: dict[str, int] = {}
        if solver not in DAEMON_SOLVERS:
            claimed = {
                "tokens_in": rng.randint(2_000, 2_000_000),
                "tokens_out": rng.randint(200, 200_000),
                "usd_micros": rng.randint(1_000, 20_000_000),
            }
            if rng.random() < 0.2:
                claimed["joules_mj"] = rng.randint(10_000, 50_000_000)
        run_id = f"run-{i // 1000:05d}"
        rollout = rng.randrange(5)
        attempt_id = f"{rng.getrandbits(128):032x}"
        body: dict[str, Any] = {
            "task_id": task_id,
            "suite": suite,
            "task_digest": self.digests[task_id],
            "patch_sha256": f"{rng.getrandbits(256):064x}",
            "status": status,
            "resolved": status == "resolved",
            "tests": {
                "expected": expected,
                "passed": expected - failed - missing,
                "failed": failed,
                "missing": missing,
            },
            "solver": solver,
            "model": rng.choice(models),
            "agent": "" if solver in DAEMON_SOLVERS else f"{solver}/1.{rng.randrange(9)}",
            "run_id": run_id,
            "rollout": rollout,
            "energy": energy,
            "claimed": claimed,
            "sandbox": "process+netns+uid",
            "restored": ["tests/conftest.py"] if rng.random() < 0.05 else [],
            "idempotency_key": f"{run_id}:{task_id}:{rollout}:{attempt_id[:8]}",
            "attempt_id": attempt_id,
            "version": __version__,
        }
        if failed or missing:
            names = [
                f"tests/test_{task_id[-4:]}.py::test_case_{k}" for k in range(failed + missing)
            ]
            body["tests_failed"] = names[:failed][:50]
            body["tests_missing"] = names[failed:][:50]
        if status == "error":
            body["error"] = "sandbox: the check exited 137 (killed: out of memory)"
        return body


def genesis_body(signer: Signer) -> dict[str, Any]:
    return {
        "version": __version__,
        "host": platform.node(),
        "public_key": base64.b64encode(raw_public(signer.public)).decode("ascii"),
        "keyid": signer.keyid,
        "origin": ORIGIN,
    }


CALIBRATION_BODY: dict[str, Any] = {
    "source": "rapl+nvml",
    "seconds": 30,
    "domains": {
        "nvml:0": {"idle_mw": 3_000, "stddev_mw": 120},
        "package-0": {"idle_mw": 6_000, "stddev_mw": 340},
    },
}


def open_ledger(data: Path, signer: Signer) -> Ledger:
    return Ledger(
        data / "ledger.duckdb",
        signer,
        origin=ORIGIN,
        checkpoint_path=data / "checkpoint.note",
        genesis={"version": __version__, "host": platform.node()},
    )


# -- the cached export ------------------------------------------------------------------


@dataclass
class Export:
    n: int
    lines: Path
    leaves: Path
    notes: dict[int, str]  # checkpoint notes by tree size
    generated_s: float
    cached: bool  # read from bench/out/ rather than generated by this run
    bytes: int


def read_leaves(export: Export) -> list[bytes]:
    raw = export.leaves.read_bytes()
    return [raw[i : i + merkle.HASH_SIZE] for i in range(0, len(raw), merkle.HASH_SIZE)]


def warm_page_cache(path: Path) -> None:
    # The first timed pass would otherwise also measure the disk.
    with path.open("rb") as fh:
        while fh.read(1 << 24):
            pass
