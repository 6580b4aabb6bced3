"""The daemon's library core: tasks, meter, evaluator and ledger behind one object.

`api/server.py` (gRPC) and the tests drive this class; it knows nothing of gRPC.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any

from jouled import __version__, frontier, limits, metrics, pages, receipts, startup, visibility
from jouled.attempt_logs import AttemptLogs
from jouled.attempt_queue import AttemptQueue, Job, Ticket
from jouled.auth import OPERATOR, Identity
from jouled.best_of_k import best_of_k
from jouled.config import Config
from jouled.contracts import Contract, TaskRegistry, swebench
from jouled.contracts.contract import iter_tree
from jouled.documents.answers import MeterStatus, PublicKey, PublicKeys
from jouled.documents.bodies import AbortBody
from jouled.documents.sent import OpReceipt, Receipt
from jouled.errors import (
    BusyError,
    CancelledError,
    JouledError,
    NotFoundError,
    PreconditionError,
    UsageError,
)
from jouled.freespace import FreeSpace
from jouled.ledger.entry import Entry
from jouled.ledger.signing import public_pem
from jouled.logstore import LogStore
from jouled.meter import calibration as calibration_mod
from jouled.meter.auto import open_meter
from jouled.meter.base import Calibration, Meter
from jouled.meter.metering import Metering
from jouled.opwindows import OpWindow, OpWindows, WindowRequest
from jouled.pipeline import scratch
from jouled.pipeline.evaluate import Attempt, Evaluator, Progress
from jouled.pipeline.sandbox import Sandbox, sandbox_instance
from jouled.pipeline.verdicts import Expected
from jouled.quotas import Places
from jouled.registrations import Registrations
from jouled.rollouts import NextRollout
from jouled.solvers import load_solvers
from jouled.submission import Submission, attempt_of, check_same

log = logging.getLogger("jouled")

# The least free space in the data dir an accepted attempt needs for its journal row and
# its result (below --min-free-mb, which may be 0, attempts are refused anyway).
JOURNAL_ROOM = 1 << 20


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
        images = startup.container_images(config.swebench_container)  # refuses a missing engine
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
            self.ledger = startup.open_ledger(config)
        except BaseException:
            self.meter.close()
            raise
        # What the metrics endpoint serves; solvers it does not know share one label.
        self.counts = metrics.Counts(solvers=(*self.solvers.names, *config.metrics_solvers))
        self.space = FreeSpace(config.data_dir, config.min_free_mb)
        self.logs = AttemptLogs(LogStore(config.data_dir / "logs"), config.data_dir)
        startup.abort_unfinished(self.ledger, self.counts, config.journal_refused_path)
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
            memory_modules=config.memory_modules,
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
        self._inflight: dict[tuple[str, str], Future[Receipt]] = {}
        self._inflight_lock = threading.Lock()
        self.registrations = Registrations(
            self.registry,
            config.registrations_path,
            config.checkout_root,
            environments=config.swebench_envs,
            trees=swebench.TreeDigests(config.tree_digests_path),
            images=images,
        )
        self.registrations.load()
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
        """Compile SWE-bench records into tasks (see `jouled.registrations`)."""
        return self.registrations.register(records, suite)

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
    ) -> Receipt:
        """Validate, queue, evaluate, sign; the receipt. Idempotent on `idempotency_key`."""
        return self.start(sub, progress).future.result()

    def start(self, sub: Submission, progress: Progress | None = None) -> Ticket:
        """Accept a submission into the attempt queue; refuses at once when it is full.

        The receipt, and the progress messages on the way, are what the caller may
        see (`jouled.visibility`). An idempotency key belongs to the credential that
        used it (the result's agent): only its holder gets a replay.
        """
        attempt = attempt_of(
            sub, self.registry, self.solvers, max_patch_bytes=self.config.max_patch_bytes
        )
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

    def _shown_receipt(self, receipt: Receipt, caller: Identity | None) -> Receipt:
        """A receipt as `caller` may see it (from the signed body the receipt carries)."""
        if visibility.sees_all(caller):
            return receipt
        entry = receipt.entry
        body = entry.parsed_payload().body if entry else self.ledger.get(receipt.seq).body
        visibility.check_owner(caller, body, receipt.seq)
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
                mine: Future[Receipt] = Future()
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
                check_same(previous, attempt)
                progress("replay", f"idempotency key seen before: entry {previous.seq}")
                self._settle(key, mine, replay, None)
                return Ticket(mine, self, None)
            job = self._enqueue(attempt, progress, caller, next_rollout=next_rollout)
        except BaseException as err:
            self._settle(key, mine, None, err)
            raise

        def done(f: Future[Receipt]) -> None:
            err = f.exception()
            self._settle(key, mine, None if err else f.result(), err)

        job.future.add_done_callback(done)
        return Ticket(mine, self, job)

    def _settle(
        self,
        key: tuple[str, str],
        mine: Future[Receipt],
        receipt: Receipt | None,
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

    def _replay_of(self, running: Future[Receipt], attempt: Attempt) -> Future[Receipt]:
        out: Future[Receipt] = Future()

        def done(f: Future[Receipt]) -> None:
            try:
                receipt = f.result()
                check_same(self.ledger.get(receipt.seq), attempt)
                out.set_result(dataclasses.replace(receipt, replayed=True))
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
    ) -> Job:
        self.space.check()
        # Each credential's attempts waiting or running are bounded, so no one agent fills
        # the queue; operators' (and in-process callers') count towards the queue only.
        give_back = self.per_agent.take(_holder(caller, attempt))
        job = Job(attempt, progress)
        release = None
        try:
            if next_rollout:  # held until the attempt ends: by then its result is signed
                attempt.rollout, release = self.rollouts.take(
                    attempt.contract.task_id, attempt.solver, attempt.run_id, attempt.model
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

    @property
    def running(self) -> int:
        with self._running_lock:
            return self._running

    def busy(self) -> BusyError:
        """Why a call waiting on an attempt is refused now: the queue's depth and bound."""
        return self.queue.full(self.running)

    def cancel(self, job: Job) -> None:
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
                job.future.set_exception(self.space.full(err) or err)
            else:
                job.future.set_result(receipt)
            finally:
                with self._running_lock:
                    self._running -= 1

    def _run(self, job: Job) -> Receipt:
        attempt, progress = job.attempt, job.progress
        # A patch that does not apply is rejected here, before the journal sees it.
        with self.evaluator.prepared(attempt, progress) as tree:
            # The attempt's files may be on a tmpfs of their own: preparing them says nothing
            # of the data dir, which the journal and the result are written to.
            free = self.space.free_bytes()
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
        self.logs.keep(attempt, body)
        entry = self.ledger.append("result", body)
        self._frontier.add(entry.body)
        self.counts.result(entry.body)
        progress("signed", f"ledger entry {entry.seq}")
        return self.receipt(entry)

    def get_logs(self, seq: int, caller: Identity | None = None) -> dict[str, Any]:
        """A result's captured runs and its full failing and missing test ids.

        Every text is checked against the sha256 its result signs: one absent or
        changed on disk is reported `missing` and never served. The answer carries
        at most LOGS_RESPONSE_BYTES of text; a longer text keeps its tail. An agent
        reads only its own results, and of those what hidden tests leave it
        (`jouled.visibility`).
        """
        entry = receipts.result_entry(self.ledger, seq)
        body = entry.body
        visibility.check_owner(caller, body, seq)
        document = self.logs.document(entry)
        if visibility.sees_all(caller):
            return document
        return visibility.logs(document, self._secrecy(body))

    def receipt(self, entry: Entry, *, replayed: bool = False) -> Receipt:
        """Everything needed to check one result alone: entry, proof, checkpoint."""
        tail = self.logs.output_tail(entry.body)
        return receipts.result_receipt(self.ledger, entry, tail, replayed=replayed)

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

    def close_window(self, window_id: str, *, caller: Identity | None) -> OpReceipt:
        """Close an open window of the caller (an operator may close anyone's)."""
        limits.name("window id", window_id)
        owner = None if caller is None or OPERATOR in caller.roles else caller.name
        return self.ops.close(window_id, owner)

    def close_windows(self) -> None:
        """Sign every open window as abandoned: the daemon is stopping."""
        self.ops.close_all()

    def _sign_op(self, body: dict[str, Any]) -> OpReceipt:
        entry = self.ledger.append("op", body)
        self._frontier.add_op(entry.body)
        self.counts.op(entry.body)
        return receipts.op_receipt(self.ledger, entry)

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
        self._known_suite(suite, rows)
        return pages.page(rows, page_size, page_token, version)

    def best_of_k(
        self, suite: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> dict[str, Any]:
        """A page of the best-of-k rows, computed once per change of the ledger."""
        limits.name("suite", suite, empty=True)
        version, rows = self._rows.rows(
            ("best_of_k", suite),
            self._frontier.results,  # op windows do not change best-of-k
            lambda: best_of_k(self.ledger.result_bodies(suite), suite=suite or None),
        )
        self._known_suite(suite, rows)
        return pages.page(rows, page_size, page_token, version)

    def _known_suite(self, suite: str, rows: list[Any]) -> None:
        """A suite neither registered nor in the ledger is NotFoundError, as for ListTasks
        (a suite whose tasks were since removed still has its rows)."""
        if suite and not rows:
            self.registry.list(suite)

    def export(self) -> tuple[Iterator[str], Callable[[], list[str]]]:
        """The export lines and the checkpoint history of one tree: the ledger as it is now.

        Appends made while the lines stream are left out of both, so the history
        never commits to entries the export lacks.
        """
        size = self.ledger.size
        lines = (entry.export_line() for entry in self.ledger.iter_export(size))
        return lines, lambda: self.ledger.checkpoint_history(size)

    def meter_status(self) -> MeterStatus:
        return self.metering.status()

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
            calibration_age_s=None if cal is None or not cal.time else cal.age_s(),
        )

    def get_receipt(
        self, idempotency_key: str = "", seq: int | None = None, caller: Identity | None = None
    ) -> Receipt:
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
            entry = receipts.result_entry(self.ledger, seq)
        else:
            raise UsageError("give an idempotency key or a seq")
        visibility.check_owner(caller, entry.body, entry.seq)
        return self._shown_receipt(self.receipt(entry), caller)

    def public_keys(self) -> PublicKeys:
        """The signing key and, during a rotation's overlap, the retired one."""
        keys_ = [("current", self.ledger.signer)]
        if self.ledger.retired is not None:
            keys_.append(("retired", self.ledger.retired))
        return PublicKeys(
            origin=self.ledger.origin,
            keys=[
                PublicKey(keyid=s.keyid, status=status, pem=public_pem(s.public).decode("ascii"))
                for status, s in keys_
            ],
        )

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
