"""The daemon's library core: tasks, meter, evaluator and ledger behind one object.

`api/server.py` (gRPC) and the tests drive this class; it knows nothing of gRPC.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jouled import __version__, frontier
from jouled.config import Config
from jouled.contracts import Contract, TaskRegistry, swebench
from jouled.contracts.contract import iter_tree
from jouled.errors import BusyError, JouledError, UsageError
from jouled.ledger import keys
from jouled.ledger.checkpoint import parse_note
from jouled.ledger.entry import Entry
from jouled.ledger.keys import KeyPaths
from jouled.ledger.store import Ledger, current_keyid
from jouled.meter import calibration as calibration_mod
from jouled.meter.auto import open_meter
from jouled.meter.base import Calibration, Meter
from jouled.meter.metering import Metering
from jouled.patch import parse_patch
from jouled.pipeline.evaluate import DAEMON_SOLVERS, Attempt, Evaluator, Expected, Progress
from jouled.pipeline.sandbox import Sandbox

log = logging.getLogger("jouled")

# How much of a graded run's output a receipt carries (the tail; the sandbox keeps 1 MiB).
OUTPUT_TAIL_CHARS = 64 << 10
CLAIMED_KEYS = ("tokens_in", "tokens_out", "usd_micros", "joules_mj")


@dataclass(frozen=True)
class Submission:
    """What a client asks the daemon to grade."""

    task_id: str
    patch: bytes | None  # None: run a daemon-hosted solver
    solver: str
    model: str = ""
    agent: str = ""
    run_id: str = ""
    rollout: int = 0
    claimed: Mapping[str, int] = field(default_factory=dict)
    idempotency_key: str = ""


def _age_s(rfc3339: str) -> int | None:
    try:
        then = datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int((datetime.now(UTC) - then).total_seconds())


def open_ledger(config: Config) -> Ledger:
    """The data dir's ledger with its keys, finishing a rotation a crash interrupted."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(config.data_dir, 0o700)
    paths = KeyPaths(config.key_path, config.pub_path)
    keys.settle(paths, current_keyid(config.ledger_path))
    signer, retired, created = keys.load_keys(paths)
    if created:
        log.info("created signing key %s (key id %s)", config.key_path, signer.keyid[:16])
    return Ledger(
        config.ledger_path,
        signer,
        origin=config.origin or f"jouled/{config.hostname}/{signer.keyid[:8]}",
        checkpoint_path=config.checkpoint_path,
        genesis={"version": __version__, "host": config.hostname},
        retired=retired,
    )


def rotate_key(config: Config, overlap_entries: int) -> Entry:
    """Introduce a new signing key (the daemon must be stopped: one DuckDB writer)."""
    ledger = open_ledger(config)
    paths = KeyPaths(config.key_path, config.pub_path)
    try:
        entry = ledger.rotate(keys.prepare_next(paths), overlap_entries)
        keys.finish_rotation(paths)
        return entry
    finally:
        ledger.close()


class Daemon:
    def __init__(self, config: Config, *, meter: Meter | None = None) -> None:
        self.config = config
        self.registry = TaskRegistry.from_dirs(config.task_dirs)
        # Refuses to start below the minimum isolation, saying what the host lacks.
        self.sandbox = Sandbox(
            min_level=config.min_isolation, secret=[config.data_dir, *config.task_dirs]
        )
        self.isolation = self.sandbox.check_host()
        self.meter = meter or open_meter(
            config.energy,
            powercap_root=config.powercap_root,
            gpus=config.gpus,
            dram=config.dram,
            active_watts=config.active_watts,
            watts_per_core=config.watts_per_core,
            estimator_mode=config.estimator_mode,
        )
        try:
            self.ledger = open_ledger(config)
        except BaseException:
            self.meter.close()
            raise
        self._abort_unfinished()
        self.metering = Metering(self.meter, self._initial_calibration(), config.attribution)
        self.evaluator = Evaluator(self.metering, self, config.work_root, sandbox=self.sandbox)
        # Kept current as results are signed, so serving it never rescans the ledger.
        self._frontier = frontier.Frontier(self.ledger.result_bodies())
        self._inflight: dict[str, Future[dict[str, Any]]] = {}
        self._inflight_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(config.queue_limit)

    # -- start-up ---------------------------------------------------------------------------

    def _abort_unfinished(self) -> None:
        """Close every attempt a crash cut off, so the log says what happened to it."""
        pending = self.ledger.journal_pending()
        for p in pending:
            log.warning("attempt %s on %s never finished: recording abort", p.attempt_id, p.task_id)
        if pending:
            self.ledger.append_many(
                [
                    (
                        "abort",
                        {
                            "attempt_id": p.attempt_id,
                            "idempotency_key": p.idempotency_key or "",
                            "task_id": p.task_id,
                            "suite": p.task_id.partition("/")[0],
                            "solver": str(p.request.get("solver", "")),
                            "reason": "the daemon stopped before the attempt finished",
                            "version": __version__,
                        },
                    )
                    for p in pending
                ]
            )

    def _initial_calibration(self) -> Calibration | None:
        if self.config.calibrate_seconds > 0:
            return self.calibrate(self.config.calibrate_seconds)
        entry = self.ledger.latest("calibration")
        if entry is not None and entry.body.get("source") == self.meter.source:
            return Calibration.from_body(entry.body, seq=entry.seq, time=entry.time)
        return None

    def calibrate(self, seconds: float) -> Calibration:
        """Measure idle power now and record it as a signed calibration entry."""
        if seconds <= 0:
            raise UsageError("calibration needs a positive number of seconds")
        log.info("calibrating idle power for %.0f s (%s)", seconds, self.meter.source)
        cal = calibration_mod.calibrate(self.meter, seconds)
        entry = self.ledger.append("calibration", cal.body())
        cal = Calibration.from_body(entry.body, seq=entry.seq, time=entry.time)
        if hasattr(self, "metering"):
            self.metering.calibration = cal
        return cal

    # -- tasks ------------------------------------------------------------------------------

    def tasks(self, suite: str = "") -> list[Contract]:
        return self.registry.list(suite)

    def task(self, task_id: str) -> Contract:
        return self.registry.get(task_id)

    def task_files(self, task_id: str) -> Iterator[tuple[str, bytes, int]]:
        """(path, bytes, mode) of each file of the pristine tree a remote agent works on."""
        contract = self.task(task_id)
        for rel, path in iter_tree(contract.pristine):
            if path.is_symlink() or contract.is_hidden(rel):  # hidden tests stay here
                continue
            yield rel, path.read_bytes(), path.stat().st_mode & 0o777

    def register_swebench(
        self, records: list[dict[str, Any]], checkout_root: str, suite: str = ""
    ) -> dict[str, Any]:
        """Compile SWE-bench records against checkouts on this host into tasks."""
        root = Path(checkout_root).expanduser()
        if not root.is_dir():
            raise UsageError(
                f"checkout root {root} is not a directory on the daemon's host",
                hint="clone each instance's repository at its base_commit into "
                "CHECKOUT_ROOT/<instance_id> on the metered host",
            )
        registered, skipped = [], []
        for i, raw in enumerate(records):
            record = swebench.SweBenchRecord.from_dict(raw, f"record {i}")
            reason = swebench.unsupported_reason(record)
            if reason:
                skipped.append({"instance_id": record.instance_id, "reason": reason})
                continue
            contract = swebench.to_contract(record, root, suite=suite or swebench.DEFAULT_SUITE)
            self.registry.register(contract)
            registered.append(contract.task_id)
        return {"registered": registered, "skipped": skipped}

    # -- baselines (the evaluator's BaselineStore) -----------------------------------------

    def load_baseline(self, contract: Contract) -> Expected | None:
        entry = self.ledger.baseline_for(contract.digest)
        if entry is None:
            return None
        b = entry.body
        return Expected(
            tuple(b["fail_to_pass"]),
            tuple(b["pass_to_pass"]),
            bool(b["valid"]),
            str(b.get("reason", "")),
            entry.seq,
        )

    def record_baseline(self, contract: Contract, body: dict[str, Any]) -> int:
        return self.ledger.append("baseline", body).seq

    # -- attempts ---------------------------------------------------------------------------

    def submit(self, sub: Submission, progress: Progress | None = None) -> dict[str, Any]:
        """Validate, journal, evaluate, sign; the receipt. Idempotent on `idempotency_key`."""
        progress = progress or (lambda phase, message: None)
        attempt = self._attempt(sub)
        key = sub.idempotency_key
        if key:
            with self._inflight_lock:
                running = self._inflight.get(key)
                if running is None:
                    mine: Future[dict[str, Any]] = Future()
                    self._inflight[key] = mine
            if running is not None:
                progress("replay", "the same submission is being evaluated; waiting for it")
                receipt = running.result()
                self._check_same(self.ledger.get(receipt["seq"]), attempt)
                return {**receipt, "replayed": True}
            # Looked up only once this key's slot is held: a run that finished
            # meanwhile had signed its result before it gave the slot up.
            previous = self.ledger.result_for_key(key)
            if previous is not None:
                try:
                    replay = self.receipt(previous, replayed=True)
                except BaseException as err:
                    mine.set_exception(err)
                    raise
                else:
                    # Whoever waits on this key gets the recorded result.
                    mine.set_result(replay)
                finally:
                    with self._inflight_lock:
                        self._inflight.pop(key, None)
                self._check_same(previous, attempt)
                progress("replay", f"idempotency key seen before: entry {previous.seq}")
                return replay
        try:
            receipt = self._run(attempt, progress)
        except BaseException as err:
            if key:
                mine.set_exception(err)
            raise
        finally:
            if key:
                with self._inflight_lock:
                    self._inflight.pop(key, None)
        if key:
            mine.set_result(receipt)
        return receipt

    def _attempt(self, sub: Submission) -> Attempt:
        contract = self.registry.get(sub.task_id)
        if sub.patch is None and sub.solver not in DAEMON_SOLVERS:
            raise UsageError(
                f"solver {sub.solver!r} cannot run in the daemon",
                hint=f"daemon-hosted solvers are {', '.join(DAEMON_SOLVERS)}; "
                "other solvers submit patches",
            )
        claimed = {k: int(v) for k, v in sub.claimed.items() if k in CLAIMED_KEYS and v}
        patch = None
        if sub.patch is not None:
            patch = parse_patch(sub.patch, max_bytes=self.config.max_patch_bytes)
        return Attempt(
            contract=contract,
            patch=patch,
            solver=sub.solver or ("remote" if sub.patch is not None else ""),
            model=sub.model,
            agent=sub.agent,
            run_id=sub.run_id,
            rollout=sub.rollout,
            claimed=claimed,
            idempotency_key=sub.idempotency_key,
            attempt_id=uuid.uuid4().hex,
        )

    @staticmethod
    def _check_same(previous: Entry, attempt: Attempt) -> None:
        body = previous.body
        same_patch = attempt.patch is None or body["patch_sha256"] == attempt.patch.sha256
        if body["task_id"] != attempt.contract.task_id or not same_patch:
            raise UsageError(
                f"idempotency key {attempt.idempotency_key!r} was already used for a different "
                f"submission (entry {previous.seq}, {body['task_id']})",
                hint="use a fresh idempotency key for each distinct submission",
            )

    def _run(self, attempt: Attempt, progress: Progress) -> dict[str, Any]:
        if not self._slots.acquire(blocking=False):
            raise BusyError(
                f"{self.config.queue_limit} attempts are already queued or running",
                hint="retry later with the same idempotency key",
            )
        try:
            # A patch that does not apply is rejected here, before the journal sees it.
            with self.evaluator.prepared(attempt, progress) as tree:
                self.ledger.journal_accept(
                    attempt.attempt_id,
                    attempt.idempotency_key or None,
                    attempt.contract.task_id,
                    {
                        "solver": attempt.solver,
                        "run_id": attempt.run_id,
                        "rollout": attempt.rollout,
                    },
                )
                try:
                    body = self.evaluator.evaluate(attempt, progress, tree)
                except JouledError:
                    self.ledger.journal_drop(attempt.attempt_id)
                    raise
            entry = self.ledger.append("result", body)
            self._save_output(attempt)
            self._frontier.add(entry.body)
            progress("signed", f"ledger entry {entry.seq}")
            return self.receipt(entry)
        finally:
            self._slots.release()

    def _output_path(self, attempt_id: str) -> Path | None:
        if not attempt_id or not attempt_id.isalnum():
            return None
        return self.config.data_dir / "output" / f"{attempt_id}.log"

    def _save_output(self, attempt: Attempt) -> None:
        """Keep the graded run's output tail beside the ledger (its hash is signed)."""
        path = self._output_path(attempt.attempt_id)
        if path is None or not attempt.output:
            return
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            path.write_text(attempt.output[-OUTPUT_TAIL_CHARS:])
        except OSError as err:  # the signed result stands; only the tail is lost
            log.warning("cannot keep the output of attempt %s: %s", attempt.attempt_id, err)

    def output_tail(self, body: Mapping[str, Any]) -> str:
        path = self._output_path(str(body.get("attempt_id", "")))
        if path is None:
            return ""
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""

    def receipt(self, entry: Entry, *, replayed: bool = False) -> dict[str, Any]:
        """Everything needed to check one result alone: entry, proof, checkpoint."""
        note = self.ledger.checkpoint_note()
        size = parse_note(note)[0].size
        body = entry.body
        return {
            "seq": entry.seq,
            "task_id": body["task_id"],
            "patch_sha256": body["patch_sha256"],
            "status": body["status"],
            "resolved": body["resolved"],
            "tests": body["tests"],
            "energy": body["energy"],
            "solver": body["solver"],
            "audit": body.get("audit", []),
            "leaf_hash": entry.leaf_hash.hex(),
            "replayed": replayed,
            # Not signed: the body signs the kept output's sha256 and size.
            "output_tail": self.output_tail(body),
            "entry": entry.export_record(),
            "proof": self.ledger.inclusion_proof(entry.seq, size),
            "checkpoint": note,
        }

    # -- reading the ledger ---------------------------------------------------------------

    def frontier(self, suite: str = "", axis: str = "joules") -> dict[str, Any]:
        return {"rows": self._frontier.rows(suite=suite or None, axis=axis)}

    def best_of_k(self, suite: str = "") -> dict[str, Any]:
        return {"rows": frontier.best_of_k(self.ledger.result_bodies(suite), suite=suite or None)}

    def export(self) -> Iterator[str]:
        for entry in self.ledger.iter_export():
            yield entry.export_line()

    def meter_status(self) -> dict[str, Any]:
        cal = self.metering.calibration
        return {
            **self.meter.describe(),
            "policy": self.metering.policy,
            "calibration": None
            if cal is None
            else {
                **cal.body(),
                "seq": cal.seq,
                "time": cal.time,
                "age_s": _age_s(cal.time),
                "idle_w": {name: d.idle_mw / 1000 for name, d in sorted(cal.domains.items())},
            },
        }

    def close(self) -> None:
        self.meter.close()
        self.ledger.close()
