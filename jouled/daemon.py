"""The daemon's library core: tasks, meter, evaluator and ledger behind one object.

`api/server.py` (gRPC) and the tests drive this class; it knows nothing of gRPC.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from jouled import __version__, frontier, limits, metrics, pages, visibility
from jouled.auth import OPERATOR, Identity
from jouled.config import Config
from jouled.contracts import Contract, TaskRegistry, swebench
from jouled.contracts.contract import iter_tree
from jouled.documents import (
    AbortBody,
    ExportRecord,
    InclusionProof,
    OpBody,
    OpReceipt,
    Receipt,
    ResultBody,
)
from jouled.errors import (
    NO_SPACE,
    BusyError,
    CancelledError,
    DeniedError,
    DiskFullError,
    JouledError,
    NotFoundError,
    PreconditionError,
    UsageError,
)
from jouled.ledger import keys
from jouled.ledger.checkpoint import parse_note
from jouled.ledger.entry import Entry
from jouled.ledger.journal import RefusedRow
from jouled.ledger.keys import KeyPaths
from jouled.ledger.signing import public_pem
from jouled.ledger.store import Ledger, current_keyid
from jouled.logstore import LogStore
from jouled.meter import calibration as calibration_mod
from jouled.meter.auto import open_meter
from jouled.meter.base import Calibration, Meter
from jouled.meter.metering import Metering
from jouled.opwindows import OpWindow, OpWindows, WindowRequest
from jouled.patch import Patch, parse_patch, patch_sha256
from jouled.pipeline import container, scratch
from jouled.pipeline.evaluate import Attempt, Evaluator, Expected, Progress
from jouled.pipeline.sandbox import Sandbox, sandbox_instance
from jouled.quotas import Places
from jouled.rollouts import NextRollout
from jouled.solvers import load_solvers

log = logging.getLogger("jouled")

# The least free space in the data dir an accepted attempt needs for its journal row and
# its result (below --min-free-mb, which may be 0, attempts are refused anyway).
JOURNAL_ROOM = 1 << 20

# How much of a graded run's output a receipt carries (the tail; the sandbox keeps 1 MiB).
OUTPUT_TAIL_CHARS = 64 << 10
# How many bytes of stored text (run output and id lists together) one GetLogs answer
# carries: under gRPC's default 4 MiB message limit. Longer texts keep their tails.
LOGS_RESPONSE_BYTES = 3 << 20
# The order runs are served in, so that the bound clips the least useful first.
_LOG_PHASES = ("grade", "solve", "baseline", "reference")
CLAIMED_KEYS = ("tokens_in", "tokens_out", "usd_micros", "joules_mj")
# Refused journal rows named one by one in the log at start; the rest are counted there.
JOURNAL_REFUSALS_LOGGED = 20


@dataclass(frozen=True)
class Submission:
    """What a client asks the daemon to grade."""

    task_id: str
    patch: bytes | None  # None: run a daemon-hosted solver
    solver: str
    model: str = ""
    agent: str = ""
    run_id: str = ""
    rollout: int | None = 0  # None: the next free index of (task, solver, run) (rollouts.py)
    claimed: Mapping[str, int] = field(default_factory=dict)
    idempotency_key: str = ""
    # Who asks: names its results and bounds what it may sign. None: an in-process
    # caller the daemon trusts (tests, tools), whose names are taken as given.
    caller: Identity | None = None


class _Job:
    """An accepted attempt waiting for, or holding, a worker."""

    def __init__(self, attempt: Attempt, progress: Progress) -> None:
        self.attempt = attempt
        self.progress = progress
        self.future: Future[dict[str, Any]] = Future()
        self.cancelled = threading.Event()
        self.started = threading.Event()


class AttemptQueue:
    """Attempts waiting for a worker, bounded; a full queue refuses at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._closed = False

    def put(self, job: _Job, running: int) -> None:
        with self._cond:
            if self._closed:
                raise PreconditionError("the daemon is stopping", hint="retry once it is back")
            if len(self._jobs) >= self.limit:
                raise self.full(running)
            self._jobs.append(job)
            self._cond.notify()

    def full(self, running: int) -> BusyError:
        """The refusal a caller gets while no attempt can join the queue."""
        return BusyError(
            f"the attempt queue is full: {len(self)} of {self.limit} attempts waiting, "
            f"{running} running",
            hint="retry later with the same idempotency key",
        )

    def take(self) -> _Job | None:
        with self._cond:
            while not self._jobs and not self._closed:
                self._cond.wait()
            return self._jobs.popleft() if self._jobs else None

    def remove(self, job: _Job) -> bool:
        with self._cond:
            try:
                self._jobs.remove(job)
            except ValueError:
                return False
            return True

    def position(self, job: _Job) -> int | None:
        """1 for the next attempt to start; None once it left the queue."""
        with self._cond:
            try:
                return self._jobs.index(job) + 1
            except ValueError:
                return None

    def __len__(self) -> int:
        with self._cond:
            return len(self._jobs)

    def close(self) -> list[_Job]:
        with self._cond:
            self._closed = True
            left = list(self._jobs)
            self._jobs.clear()
            self._cond.notify_all()
            return left


class Ticket:
    """A submission the daemon accepted: its receipt to come, its place in the queue."""

    def __init__(self, future: Future[dict[str, Any]], daemon: Daemon, job: _Job | None) -> None:
        self.future = future
        self._daemon = daemon
        self._job = job

    def position(self) -> int | None:
        return None if self._job is None else self._daemon.queue.position(self._job)

    def cancel(self) -> None:
        """The caller went away: drop the attempt if it has not started, else record an abort."""
        if self._job is not None:
            self._daemon.cancel(self._job)

    def through(self, view: Callable[[dict[str, Any]], dict[str, Any]]) -> Ticket:
        """The same attempt, its receipt passed through `view` once it comes."""
        shown: Future[dict[str, Any]] = Future()

        def done(f: Future[dict[str, Any]]) -> None:
            try:
                shown.set_result(view(f.result()))
            except BaseException as err:
                shown.set_exception(err)

        self.future.add_done_callback(done)
        return Ticket(shown, self._daemon, self._job)


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
        self.solvers = load_solvers(config.solvers_file)
        pristine = [*config.task_dirs, *([config.checkout_root] if config.checkout_root else [])]
        self.sandbox = Sandbox(
            min_level=config.min_isolation,
            secret=[config.data_dir, *pristine],
            instance=sandbox_instance(config.data_dir),
        )
        self.isolation = self.sandbox.check_host()
        self._images = container_images(config.swebench_container)  # refuses a missing engine
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
        # What the metrics endpoint serves; solvers it does not know share one label.
        self.counts = metrics.Counts(solvers=(*self.solvers.names, *config.metrics_solvers))
        self.logs = LogStore(config.data_dir / "logs")
        self._abort_unfinished()
        left = scratch.reclaim(config.work_root)  # a crash's workdirs (and their tmpfs mounts)
        if left:
            log.warning("removed %d workdirs left in %s", len(left), config.work_root)
        self.metering = Metering(self.meter, self._initial_calibration(), config.attribution)
        self.evaluator = Evaluator(
            self.metering,
            self,
            config.work_root,
            sandbox=self.sandbox,
            solvers=self.solvers,
            min_integrity=config.min_integrity,
            disk_bytes=config.attempt_disk_mb << 20,
            disk_floor_bytes=config.min_free_mb << 20,
            solver_diff_bytes=config.max_patch_bytes,
        )
        # Kept current as results are signed, so serving it never rescans the ledger;
        # built from the ledger's query columns, which opening it checked against the payloads.
        self._frontier = self.ledger.frontier(ops=(e.body for e in self.ledger.entries("op")))
        self._rows = pages.RowCache()  # frontier and best-of-k rows, served a page at a time
        self.rollouts = NextRollout(self.ledger)
        self.ops = OpWindows(
            self.metering,
            self._sign_op,
            max_open=config.op_windows_max,
            max_per_agent=config.op_windows_per_agent,
            max_s=config.op_window_max_s,
            grading=lambda: len(self.queue) > 0 or self.running > 0,
        )
        # Attempts running, by (agent, idempotency key).
        self._inflight: dict[tuple[str, str], Future[dict[str, Any]]] = {}
        self._inflight_lock = threading.Lock()
        self._trees = swebench.TreeDigests(config.tree_digests_path)
        self._load_registrations()
        self.queue = AttemptQueue(config.queue_limit)
        self.per_agent = Places(
            "attempts queued or running",
            total=self.max_callers,
            per_holder=config.attempts_per_agent,
            hint="retry with the same idempotency key once one of your attempts has ended",
        )
        self._running = 0
        self._running_lock = threading.Lock()
        # Calls waiting on an attempt (queued, running or replaying) hold an RPC thread
        # each; bounding them keeps threads free for every other call.
        self.callers = threading.BoundedSemaphore(self.max_callers)
        self._workers = [
            threading.Thread(target=self._work, name=f"attempt-{i}", daemon=True)
            for i in range(config.workers)
        ]
        for t in self._workers:
            t.start()

    @property
    def max_callers(self) -> int:
        return self.config.queue_limit + self.config.workers

    # -- start-up ---------------------------------------------------------------------------

    def _abort_unfinished(self) -> None:
        """Close every attempt a crash cut off, so the log says what happened to it.

        Only journal rows this daemon wrote, within a request's bounds, are signed
        from; the others are reported and removed (`jouled.ledger.journal`).
        """
        review = self.ledger.journal_review()
        if review.refused:
            self._refuse_journal_rows(review.refused)
        pending = review.pending
        for p in pending:
            log.warning("attempt %s on %s never finished: recording abort", p.attempt_id, p.task_id)
        if pending:
            entries = self.ledger.append_many(
                [
                    (
                        "abort",
                        AbortBody(
                            attempt_id=p.attempt_id,
                            idempotency_key=p.idempotency_key or "",
                            task_id=p.task_id,
                            suite=p.task_id.partition("/")[0],
                            solver=str(p.request.get("solver", "")),
                            reason="the daemon stopped before the attempt finished",
                            version=__version__,
                        ).to_dict(),
                    )
                    for p in pending
                ]
            )
            for entry in entries:
                self.counts.abort(entry.body)

    def _refuse_journal_rows(self, refused: list[RefusedRow]) -> None:
        """Report journal rows nothing is signed from, then remove them from the journal."""
        path = self.config.journal_refused_path
        for r in refused[:JOURNAL_REFUSALS_LOGGED]:
            log.warning(
                "journal row for attempt %s on %s refused, nothing signed from it: %s",
                r.attempt_id,
                r.task_id,
                r.reason,
            )
        log.warning(
            "%d journal row(s) refused at start (not written by this daemon, or out of "
            "bounds); they are listed in %s",
            len(refused),
            path,
        )
        self.counts.journal_refused(len(refused))
        now = datetime.now(UTC).isoformat()
        try:
            with path.open("a", encoding="utf-8") as fh:
                for r in refused:
                    record = {"refused": now, "attempt_id": r.attempt_id, "task_id": r.task_id}
                    fh.write(json.dumps({**record, "reason": r.reason}) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as err:  # kept in the journal, to be refused and reported next start
            log.error("cannot list refused journal rows in %s: %s", path, err)
            return
        self.ledger.journal_discard(refused)

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

    def register_swebench(self, records: list[dict[str, Any]], suite: str = "") -> dict[str, Any]:
        """Compile SWE-bench records against the checkouts under --checkout-root into tasks.

        A record names an instance, never a path: its tree is CHECKOUT_ROOT/<instance_id>,
        and must resolve inside the root. Registrations are kept in the data dir and
        replayed at start.
        """
        root = self._checkout_root()
        suite = limits.name("suite", suite or swebench.DEFAULT_SUITE)
        if len(records) > limits.SWEBENCH_RECORDS_MAX:
            raise UsageError(
                f"{len(records)} records in one request; the limit is "
                f"{limits.SWEBENCH_RECORDS_MAX}",
                hint="register them in batches",
            )
        registered, skipped, new = [], [], []
        for i, raw in enumerate(records):
            record = swebench.SweBenchRecord.from_dict(raw, f"record {i}")
            iid = record.instance_id
            try:
                limits.name("instance_id", iid)
                if "/" in iid:
                    raise UsageError(f"instance_id {iid!r} holds '/'")
                self._inside(root, iid)
                contract = swebench.to_contract(
                    record,
                    root,
                    suite=suite,
                    environments=self.config.swebench_envs,
                    trees=self._trees,
                    images=self._images,
                )
                if self.registry.register(contract):
                    new.append({"suite": suite, "record": raw})
            except JouledError as err:
                code = err.code if isinstance(err, swebench.Unsupported) else "refused"
                skipped.append(
                    {"instance_id": iid[: limits.NAME_MAX], "reason": err.message, "code": code}
                )
                continue
            registered.append(contract.task_id)
        if new:
            self._save_registrations(new)
        return {"registered": registered, "skipped": skipped}

    def _checkout_root(self) -> Path:
        root = self.config.checkout_root
        if root is None:
            raise PreconditionError(
                "this daemon has no checkout root, so it cannot register SWE-bench records",
                hint="start jouled with --checkout-root DIR holding one checkout per "
                "instance id (DIR/<instance_id>)",
            )
        if not root.is_dir():
            raise PreconditionError(
                f"the checkout root {root} is not a directory on the daemon's host",
                hint="clone each instance's repository at its base_commit into "
                "CHECKOUT_ROOT/<instance_id> on the metered host",
            )
        return root

    @staticmethod
    def _inside(root: Path, instance_id: str) -> None:
        tree = (root / instance_id).resolve()
        if not tree.is_relative_to(root.resolve()):
            raise UsageError(
                f"the checkout of {instance_id} resolves to {tree}, outside the checkout root",
                hint="a checkout must be a directory under the checkout root, not a link out",
            )

    def _save_registrations(self, items: list[dict[str, Any]]) -> None:
        with self.config.registrations_path.open("a", encoding="utf-8") as fh:
            for item in items:
                fh.write(json.dumps(item, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _load_registrations(self) -> None:
        path = self.config.registrations_path
        if not path.is_file():
            return
        root = self.config.checkout_root
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                if root is None:
                    raise PreconditionError("no --checkout-root")
                record = swebench.SweBenchRecord.from_dict(item["record"], f"{path}:{n}")
                self._inside(root, record.instance_id)
                self.registry.register(
                    swebench.to_contract(
                        record,
                        root,
                        suite=item["suite"],
                        environments=self.config.swebench_envs,
                        trees=self._trees,
                        images=self._images,
                    )
                )
            except (ValueError, KeyError, TypeError, JouledError) as err:
                message = err.message if isinstance(err, JouledError) else repr(err)
                log.warning("%s:%d: SWE-bench registration not restored: %s", path, n, message)

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
            str(b.get("code") or ""),
            str(b.get("evidence") or ""),
            None if b.get("skipped_before") is None else tuple(b["skipped_before"]),
        )

    def record_baseline(self, contract: Contract, body: dict[str, Any]) -> int:
        return self.ledger.append("baseline", body).seq

    # -- attempts ---------------------------------------------------------------------------

    def submit(
        self,
        sub: Submission,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Validate, queue, evaluate, sign; the receipt. Idempotent on `idempotency_key`."""
        return self.start(sub, progress).future.result()

    def start(self, sub: Submission, progress: Progress | None = None) -> Ticket:
        """Accept a submission into the attempt queue; refuses at once when it is full.

        The receipt, and the progress messages on the way, are what the caller may
        see (`jouled.visibility`). An idempotency key belongs to the credential that
        used it (the result's agent): only its holder gets a replay.
        """
        attempt = self._attempt(sub)
        progress = self._shown_progress(sub.caller, attempt.contract, progress)
        ticket = self._start(attempt, progress, sub.caller, next_rollout=sub.rollout is None)
        if visibility.sees_all(sub.caller):
            return ticket
        return ticket.through(lambda receipt: self._shown_receipt(receipt, sub.caller))

    def _shown_progress(
        self, caller: Identity | None, contract: Contract, progress: Progress | None
    ) -> Progress:
        """The caller's progress callback, passed only what it may see of this task's runs."""
        send = progress or (lambda phase, message: None)
        if visibility.sees_all(caller) or not contract.hidden:
            return send
        return lambda phase, message: send(
            phase, visibility.progress_message(phase, message, hidden=True)
        )

    def _shown_receipt(self, receipt: dict[str, Any], caller: Identity | None) -> dict[str, Any]:
        """A receipt as `caller` may see it (from the signed body the receipt carries)."""
        if visibility.sees_all(caller):
            return receipt
        record = ExportRecord.parse(receipt["entry"])
        body = record.parsed_payload().body
        visibility.check_owner(caller, body, record.seq)
        return visibility.receipt(receipt, self._secrecy(body))

    def _secrecy(self, body: Mapping[str, Any]) -> visibility.Secrecy:
        try:
            contract: Contract | None = self.registry.get(str(body.get("task_id", "")))
        except JouledError:
            contract = None
        return visibility.Secrecy.of(contract, body)

    def _start(
        self,
        attempt: Attempt,
        progress: Progress,
        caller: Identity | None = None,
        *,
        next_rollout: bool = False,
    ) -> Ticket:
        held = self.ops.holds_host(attempt.agent) if attempt.agent else None
        if held is not None:
            # Its grading phases would wait for that very window: refuse rather than hang.
            raise PreconditionError(
                f"{attempt.agent} holds op window {held.id} ({held.request.label}), which holds "
                "the metered host: a graded phase cannot run until it closes",
                hint="close the op window before submitting",
            )
        if not attempt.idempotency_key:
            job = self._enqueue(attempt, progress, caller, next_rollout=next_rollout)
            return Ticket(job.future, self, job)
        # A key is its holder's: another credential's use of the same key is its own.
        key = (attempt.agent, attempt.idempotency_key)
        with self._inflight_lock:
            running = self._inflight.get(key)
            if running is None:
                mine: Future[dict[str, Any]] = Future()
                self._inflight[key] = mine
        if running is not None:
            # A call waiting on an attempt holds a place, whoever's attempt it is.
            give_back = self.per_agent.take(_holder(caller, attempt))
            progress("replay", "the same submission is being evaluated; waiting for it")
            waiting = self._replay_of(running, attempt)
            waiting.add_done_callback(lambda f: give_back())
            return Ticket(waiting, self, None)
        # Looked up only once this key's slot is held: a run that finished
        # meanwhile had signed its result before it gave the slot up.
        try:
            previous = self.ledger.result_for_key(attempt.idempotency_key, agent=attempt.agent)
            if previous is not None:
                replay = self.receipt(previous, replayed=True)
                self._check_same(previous, attempt)
                progress("replay", f"idempotency key seen before: entry {previous.seq}")
                self._settle(key, mine, replay, None)
                return Ticket(mine, self, None)
            job = self._enqueue(attempt, progress, caller, next_rollout=next_rollout)
        except BaseException as err:
            self._settle(key, mine, None, err)
            raise

        def done(f: Future[dict[str, Any]]) -> None:
            err = f.exception()
            self._settle(key, mine, None if err else f.result(), err)

        job.future.add_done_callback(done)
        return Ticket(mine, self, job)

    def _settle(
        self,
        key: tuple[str, str],
        mine: Future[dict[str, Any]],
        receipt: dict[str, Any] | None,
        err: BaseException | None,
    ) -> None:
        # The slot is given up first: whoever comes next finds the signed result.
        with self._inflight_lock:
            self._inflight.pop(key, None)
        if err is not None:
            mine.set_exception(err)
        else:
            assert receipt is not None
            mine.set_result(receipt)

    def _replay_of(
        self, running: Future[dict[str, Any]], attempt: Attempt
    ) -> Future[dict[str, Any]]:
        out: Future[dict[str, Any]] = Future()

        def done(f: Future[dict[str, Any]]) -> None:
            try:
                receipt = f.result()
                self._check_same(self.ledger.get(receipt["seq"]), attempt)
                out.set_result({**receipt, "replayed": True})
            except BaseException as err:
                out.set_exception(err)

        running.add_done_callback(done)
        return out

    def _enqueue(
        self,
        attempt: Attempt,
        progress: Progress,
        caller: Identity | None,
        *,
        next_rollout: bool = False,
    ) -> _Job:
        self.check_free_space()
        # Each credential's attempts waiting or running are bounded, so no one agent fills
        # the queue; operators' (and in-process callers') count towards the queue only.
        give_back = self.per_agent.take(_holder(caller, attempt))
        job = _Job(attempt, progress)
        release = None
        try:
            if next_rollout:  # held until the attempt ends: by then its result is signed
                attempt.rollout, release = self.rollouts.take(
                    attempt.contract.task_id, attempt.solver, attempt.run_id
                )
            self.queue.put(job, self.running)
        except BaseException:
            give_back()
            if release is not None:
                release()
            raise
        job.future.add_done_callback(lambda f: give_back())
        if release is not None:
            job.future.add_done_callback(lambda f: release())
        return job

    def check_free_space(self) -> None:
        """Refuse new attempts while the data dir is below its free-space floor."""
        floor = self.config.min_free_mb << 20
        free = self._free_bytes()
        if free is not None and free < floor:
            raise DiskFullError(
                f"only {free >> 20} MiB free in the data dir {self.config.data_dir}; new "
                f"attempts are refused below {self.config.min_free_mb} MiB so the ledger "
                "cannot run out of space",
                hint="free space on that file system, or move the data dir",
            )

    def _free_bytes(self) -> int | None:
        try:
            return shutil.disk_usage(self.config.data_dir).free
        except OSError:
            return None

    def _disk_full(self, err: BaseException) -> DiskFullError | None:
        """A full file system, however the copy reported it, as one clear error."""
        full = isinstance(err, OSError) and err.errno in NO_SPACE
        if isinstance(err, shutil.Error):
            full = "No space left" in str(err) or "quota exceeded" in str(err).lower()
        if not full:
            return None
        free = self._free_bytes()
        return DiskFullError(
            f"the data dir {self.config.data_dir} ran out of space while preparing the "
            f"attempt ({'unknown' if free is None else free >> 20} MiB left)",
            hint="free space on that file system, or raise --min-free-mb so attempts are "
            "refused before it fills",
        )

    @property
    def running(self) -> int:
        with self._running_lock:
            return self._running

    def busy(self) -> BusyError:
        """Why a call waiting on an attempt is refused now: the queue's depth and bound."""
        return self.queue.full(self.running)

    def cancel(self, job: _Job) -> None:
        if job.future.done():
            return  # the call ended because its receipt was sent
        job.cancelled.set()
        attempt = job.attempt
        if self.queue.remove(job):
            log.info(
                "attempt %s (key %s) dropped: its call ended before it started",
                attempt.attempt_id,
                attempt.idempotency_key or "-",
            )
            job.future.set_exception(
                CancelledError("the call ended before its attempt started: nothing was run")
            )
        elif job.started.is_set():
            log.info(
                "attempt %s (key %s): its call ended while it ran; it will be recorded as an abort",
                attempt.attempt_id,
                attempt.idempotency_key or "-",
            )

    def _work(self) -> None:
        while True:
            job = self.queue.take()
            if job is None:
                return
            if job.cancelled.is_set():  # cancelled between leaving the queue and here
                job.future.set_exception(
                    CancelledError("the call ended before its attempt started")
                )
                continue
            job.started.set()
            with self._running_lock:
                self._running += 1
            try:
                receipt = self._run(job)
            except BaseException as err:
                job.future.set_exception(self._disk_full(err) or err)
            else:
                job.future.set_result(receipt)
            finally:
                with self._running_lock:
                    self._running -= 1

    def _attempt(self, sub: Submission) -> Attempt:
        limits.task_id(sub.task_id)
        contract = self.registry.get(sub.task_id)
        caller = sub.caller
        if sub.patch is None and not self.solvers.is_hosted(sub.solver):
            raise UsageError(
                f"solver {sub.solver!r} cannot run in the daemon",
                hint=f"daemon-hosted solvers are {', '.join(self.solvers.names)}; "
                "other solvers submit patches (operators declare agent CLIs with --solvers)",
            )
        if sub.patch is not None and self.solvers.is_hosted(sub.solver):
            raise DeniedError(
                f"solver {sub.solver!r} is reserved: the daemon runs it itself, so a "
                "submitted patch cannot be signed under its name",
                hint="submit under your own solver name",
            )
        solver = sub.solver or ("remote" if sub.patch is not None else "")
        agent = sub.agent
        if caller is not None:
            if sub.patch is not None:
                solver = caller.solver_for(sub.solver)
            if sub.agent and sub.agent != caller.name:
                raise UsageError(
                    f"agent {sub.agent[:40]!r} is not the caller: results name the "
                    f"credential's holder ({caller.name}) as their agent",
                    hint="leave the agent out",
                )
            agent = caller.name
        limits.attempt_request(
            sub.task_id,
            solver,
            model=sub.model,
            agent=agent,
            run_id=sub.run_id,
            rollout=sub.rollout or 0,
            idempotency_key=sub.idempotency_key,
        )
        claimed = {}
        for k, v in sub.claimed.items():
            if k not in CLAIMED_KEYS:
                raise UsageError(f"unknown claimed figure {k!r}", hint=", ".join(CLAIMED_KEYS))
            if v:
                claimed[k] = limits.integer(f"claimed {k}", int(v))
        patch = None
        if sub.patch is not None:
            if not sub.patch.strip():
                # An empty prediction is an answer: the pristine tree is graded, unresolved.
                patch = Patch((), patch_sha256(b""))
            else:
                patch = parse_patch(sub.patch, max_bytes=self.config.max_patch_bytes)
        return Attempt(
            contract=contract,
            patch=patch,
            solver=solver,
            model=sub.model,
            agent=agent,
            run_id=sub.run_id,
            rollout=sub.rollout or 0,  # a next free index is taken only once it is queued
            claimed=claimed,
            idempotency_key=sub.idempotency_key,
            attempt_id=uuid.uuid4().hex,
        )

    @staticmethod
    def _check_same(previous: Entry, attempt: Attempt) -> None:
        body = ResultBody.parse(previous.body, where=f"entry {previous.seq}: result body")
        same_patch = attempt.patch is None or body.patch_sha256 == attempt.patch.sha256
        if body.task_id != attempt.contract.task_id or not same_patch:
            raise UsageError(
                f"idempotency key {attempt.idempotency_key!r} was already used for a different "
                f"submission (entry {previous.seq}, {body.task_id})",
                hint="use a fresh idempotency key for each distinct submission",
            )

    def _run(self, job: _Job) -> dict[str, Any]:
        attempt, progress = job.attempt, job.progress
        # A patch that does not apply is rejected here, before the journal sees it.
        with self.evaluator.prepared(attempt, progress) as tree:
            # The attempt's files may be on a tmpfs of their own: preparing them says nothing
            # of the data dir, which the journal and the result are written to.
            free = self._free_bytes()
            if free is not None and free < JOURNAL_ROOM:
                raise OSError(errno.ENOSPC, f"{free} bytes left in {self.config.data_dir}")
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
        if job.cancelled.is_set():
            # Nobody waits for this result: it is closed as an abort, which no frontier counts.
            entry = self.ledger.append(
                "abort",
                AbortBody(
                    attempt_id=attempt.attempt_id,
                    idempotency_key=attempt.idempotency_key,
                    task_id=attempt.contract.task_id,
                    suite=attempt.contract.suite,
                    solver=attempt.solver,
                    reason="the caller cancelled (or its deadline passed) while it ran",
                    version=__version__,
                ).to_dict(),
            )
            self.counts.abort(entry.body)
            log.info("attempt %s cancelled while running: abort %d", attempt.attempt_id, entry.seq)
            raise CancelledError(
                f"the call ended while its attempt ran; recorded as abort {entry.seq}"
            )
        self._store_logs(attempt, body)
        entry = self.ledger.append("result", body)
        self._frontier.add(entry.body)
        self.counts.result(entry.body)
        progress("signed", f"ledger entry {entry.seq}")
        return self.receipt(entry)

    def _store_logs(self, attempt: Attempt, body: dict[str, Any]) -> None:
        """Keep the texts the body will sign; one that cannot be kept is signed `missing`."""
        lost: set[str] = set()
        for digest, data in attempt.blobs.items():
            try:
                self.logs.put(data)
            except OSError as err:  # the result stands; only this text is lost
                log.warning("cannot keep a log of attempt %s: %s", attempt.attempt_id, err)
                lost.add(digest)
        for run in body.get("logs", {}).values():
            if run["sha256"] in lost:
                run["status"] = "missing"

    def _legacy_output(self, attempt_id: str, digest: str) -> bytes | None:
        """A graded run's tail as results signed before the log store kept it, if unchanged."""
        if not attempt_id.isalnum():
            return None
        try:
            data = (self.config.data_dir / "output" / f"{attempt_id}.log").read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == digest else None

    def _signed_text(self, body: Mapping[str, Any], digest: str) -> bytes | None:
        """The stored text whose sha256 is `digest`; None when absent or changed."""
        data = self.logs.get(digest)
        if data is None:
            data = self._legacy_output(str(body.get("attempt_id", "")), digest)
        return data

    @staticmethod
    def _runs(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """The captured runs a result signs (older results signed only the graded one)."""
        if "logs" in body:
            return {phase: dict(run) for phase, run in body["logs"].items()}
        if "output" in body:
            out = body["output"]
            status = "truncated" if out.get("dropped_bytes") else "complete"
            return {"grade": {**out, "status": status}}
        return {}

    def output_tail(self, body: Mapping[str, Any]) -> str:
        run = self._runs(body).get("grade")
        data = None if run is None else self._signed_text(body, str(run["sha256"]))
        if data is None:
            return ""
        return data.decode(errors="replace")[-OUTPUT_TAIL_CHARS:]

    def get_logs(self, seq: int, caller: Identity | None = None) -> dict[str, Any]:
        """A result's captured runs and its full failing and missing test ids.

        Every text is checked against the sha256 its result signs: one absent or
        changed on disk is reported `missing` and never served. The answer carries
        at most LOGS_RESPONSE_BYTES of text; a longer text keeps its tail. An agent
        reads only its own results, and of those what hidden tests leave it
        (`jouled.visibility`).
        """
        entry = self._result_entry(seq)
        body = entry.body
        visibility.check_owner(caller, body, seq)
        document = self._logs(entry)
        if visibility.sees_all(caller):
            return document
        return visibility.logs(document, self._secrecy(body))

    def _logs(self, entry: Entry) -> dict[str, Any]:
        body = entry.body
        budget = LOGS_RESPONSE_BYTES
        ids: dict[str, Any] = {}
        for key in ("tests_failed", "tests_missing"):
            listed = [str(i) for i in body.get(key, [])]
            signed = body.get(f"{key}_all")
            item: dict[str, Any] = {"count": len(listed), "sha256": None, "status": "complete"}
            if signed is not None:
                item |= {"count": signed["count"], "sha256": signed["sha256"]}
                data = self._signed_text(body, str(signed["sha256"]))
                if data is None:
                    item["status"] = "missing"
                else:
                    listed = data.decode(errors="replace").splitlines()
            kept: list[str] = []
            for test_id in listed:
                cost = len(test_id.encode()) + 1
                if cost > budget:
                    break
                budget -= cost
                kept.append(test_id)
            item["ids"] = kept
            item["clipped"] = len(kept) < len(listed)
            ids[key] = item
        runs: dict[str, dict[str, Any]] = {}
        signed_runs = self._runs(body)
        for phase in sorted(signed_runs, key=lambda p: (*_LOG_PHASES, p).index(p)):
            run = signed_runs[phase]
            data = self._signed_text(body, str(run["sha256"]))
            run["signed_status"] = run["status"]
            if data is None:
                run |= {"status": "missing", "text": "", "clipped_bytes": 0}
            else:
                tail = data[len(data) - min(len(data), budget) :]
                budget -= len(tail)
                run |= {
                    "text": tail.decode(errors="replace"),
                    "clipped_bytes": len(data) - len(tail),
                }
            runs[phase] = run
        return {
            "seq": entry.seq,
            "task_id": body["task_id"],
            "attempt_id": body.get("attempt_id", ""),
            "status": body["status"],
            "runs": runs,
            **ids,
            "max_bytes": LOGS_RESPONSE_BYTES,
        }

    def receipt(self, entry: Entry, *, replayed: bool = False) -> dict[str, Any]:
        """Everything needed to check one result alone: entry, proof, checkpoint."""
        note = self.ledger.checkpoint_note()
        size = parse_note(note)[0].size
        body = ResultBody.parse(entry.body, where=f"entry {entry.seq}: result body")
        return Receipt.of(
            body,
            seq=entry.seq,
            leaf_hash=entry.leaf_hash.hex(),
            entry=ExportRecord.parse(entry.export_record()),
            proof=cast(InclusionProof, self.ledger.inclusion_proof(entry.seq, size)),
            checkpoint=note,
            output_tail=self.output_tail(entry.body),
            replayed=replayed,
        ).to_dict()

    # -- op windows -------------------------------------------------------------------------

    def open_window(
        self,
        label: str,
        *,
        caller: Identity | None,
        agent: str = "",
        task_id: str = "",
        run_id: str = "",
        rollout: int = 0,
        pid: int = 0,
        peer_pid: int | None = None,
        peer_uid: int | None = None,
    ) -> OpWindow:
        """Open a metered window over one of the caller's own operations.

        The agent is the credential's holder; `peer_pid`/`peer_uid` are the kernel's
        view of a Unix-socket caller (None over TCP). See `jouled.opwindows`.
        """
        if caller is not None:
            agent = caller.name
        if task_id:
            limits.task_id(task_id)
            self.registry.get(task_id)
        request = WindowRequest(label, agent, task_id, run_id, rollout, pid)
        return self.ops.open(request, peer_pid=peer_pid, peer_uid=peer_uid)

    def close_window(self, window_id: str, *, caller: Identity | None) -> dict[str, Any]:
        """Close an open window of the caller (an operator may close anyone's)."""
        limits.name("window id", window_id)
        owner = None if caller is None or OPERATOR in caller.roles else caller.name
        return self.ops.close(window_id, owner)

    def close_windows(self) -> None:
        """Sign every open window as abandoned: the daemon is stopping."""
        self.ops.close_all()

    def _sign_op(self, body: dict[str, Any]) -> dict[str, Any]:
        entry = self.ledger.append("op", body)
        self._frontier.add_op(entry.body)
        self.counts.op(entry.body)
        return self.op_receipt(entry)

    def op_receipt(self, entry: Entry) -> dict[str, Any]:
        """An op entry with what checks it alone: proof and checkpoint."""
        note = self.ledger.checkpoint_note()
        size = parse_note(note)[0].size
        return OpReceipt.of(
            OpBody.parse(entry.body, where=f"entry {entry.seq}: op body"),
            seq=entry.seq,
            leaf_hash=entry.leaf_hash.hex(),
            entry=ExportRecord.parse(entry.export_record()),
            proof=cast(InclusionProof, self.ledger.inclusion_proof(entry.seq, size)),
            checkpoint=note,
        ).to_dict()

    # -- reading the ledger ---------------------------------------------------------------

    def frontier(
        self,
        suite: str = "",
        axis: str = "joules",
        *,
        merge_digests: bool = False,
        page_size: int = 0,
        page_token: str = "",
    ) -> dict[str, Any]:
        """A page of the frontier's rows (see `jouled.pages`)."""
        limits.name("suite", suite, empty=True)
        if axis not in frontier.AXES:
            raise UsageError(
                f"unknown frontier axis {axis!r}", hint=f"use one of {sorted(frontier.AXES)}"
            )
        version, rows = self._rows.rows(
            ("frontier", suite, axis, merge_digests),
            self._frontier.version,
            lambda: self._frontier.rows(
                suite=suite or None, axis=axis, merge_digests=merge_digests
            ),
        )
        return pages.page(rows, page_size, page_token, version)

    def best_of_k(
        self, suite: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> dict[str, Any]:
        """A page of the best-of-k rows, computed once per change of the ledger."""
        limits.name("suite", suite, empty=True)
        version, rows = self._rows.rows(
            ("best_of_k", suite),
            self._frontier.results,  # op windows do not change best-of-k
            lambda: frontier.best_of_k(self.ledger.result_bodies(suite), suite=suite or None),
        )
        return pages.page(rows, page_size, page_token, version)

    def export(self) -> tuple[Iterator[str], Callable[[], list[str]]]:
        """The export lines and the checkpoint history of one tree: the ledger as it is now.

        Appends made while the lines stream are left out of both, so the history
        never commits to entries the export lacks.
        """
        size = self.ledger.size
        lines = (entry.export_line() for entry in self.ledger.iter_export(size))
        return lines, lambda: self.ledger.checkpoint_history(size)

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

    def gauges(self) -> metrics.Gauges:
        """The state the metrics endpoint reports, read now (see `jouled.metrics`)."""
        try:
            faults: int | None = self.meter.snapshot().faults
        except (JouledError, OSError):
            faults = None  # a closed or failing meter: left out, not reported as zero
        cal = self.metering.calibration
        return metrics.Gauges(
            queue_depth=len(self.queue),
            queue_limit=self.queue.limit,
            running=self.running,
            workers=self.config.workers,
            op_windows_open=len(self.ops),
            ledger_entries=self.ledger.size,
            checkpoint_age_s=self.ledger.checkpoint_age_s(),
            sampler_faults=faults,
            energy_source=self.meter.source,
            calibration_age_s=None if cal is None or not cal.time else _age_s(cal.time),
        )

    def get_receipt(
        self, idempotency_key: str = "", seq: int | None = None, caller: Identity | None = None
    ) -> dict[str, Any]:
        """A result's receipt again, by its idempotency key or its seq, with a fresh proof.

        A key finds the caller's own result (keys belong to the credential that used
        them; an in-process caller finds anyone's); an agent reads only its own
        results, and of those what hidden tests leave it (`jouled.visibility`).
        """
        if idempotency_key:
            limits.name("idempotency key", idempotency_key, max_len=limits.KEY_MAX)
            entry = self.ledger.result_for_key(
                idempotency_key, agent=None if caller is None else caller.name
            )
            if entry is None:
                raise NotFoundError(
                    f"no result of yours has the idempotency key {idempotency_key!r}",
                    hint="keys belong to the credential that used them; an attempt still "
                    "running has no receipt yet, and one that was refused or cancelled never "
                    "will",
                )
        elif seq is not None:
            entry = self._result_entry(seq)
        else:
            raise UsageError("give an idempotency key or a seq")
        visibility.check_owner(caller, entry.body, entry.seq)
        return self._shown_receipt(self.receipt(entry), caller)

    def _result_entry(self, seq: int) -> Entry:
        limits.integer("seq", seq)
        if seq >= self.ledger.size:
            raise NotFoundError(f"entry {seq} does not exist: the ledger has {self.ledger.size}")
        entry = self.ledger.get(seq)
        if entry.kind != "result":
            raise NotFoundError(f"entry {seq} is a {entry.kind} entry, not a result")
        return entry

    def public_keys(self) -> dict[str, Any]:
        """The signing key and, during a rotation's overlap, the retired one."""
        keys_ = [("current", self.ledger.signer)]
        if self.ledger.retired is not None:
            keys_.append(("retired", self.ledger.retired))
        return {
            "origin": self.ledger.origin,
            "keys": [
                {"keyid": s.keyid, "status": status, "pem": public_pem(s.public).decode("ascii")}
                for status, s in keys_
            ],
        }

    def close(self) -> None:
        self.ops.close_all()
        for job in self.queue.close():
            job.future.set_exception(
                CancelledError("the daemon stopped before the attempt started")
            )
        for t in self._workers:
            # A worker still grading finds the ledger closed; its journal entry becomes an
            # abort at the next start.
            t.join(timeout=1)
        self.meter.close()
        self.ledger.close()
        self.sandbox.close()


def _holder(caller: Identity | None, attempt: Attempt) -> str | None:
    """Whose place an attempt takes: its agent's, or nobody's for operators and
    in-process callers (they count towards the queue only)."""
    return None if caller is None or OPERATOR in caller.roles else attempt.agent


def container_images(name: str) -> swebench.Images | None:
    """The opt-in container runtime: None without one; refuses an engine the host lacks."""
    if not name:
        return None
    engine = container.find_engine(name)
    return swebench.Images(engine.name, lambda iid: container.find_image(engine, iid))
