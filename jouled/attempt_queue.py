"""The attempt queue: accepted attempts waiting for a worker, and the tickets callers hold."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from jouled.documents.sent import Receipt
from jouled.errors import BusyError, PreconditionError
from jouled.pipeline.evaluate import Attempt, Progress


class Job:
    """An accepted attempt waiting for, or holding, a worker."""

    def __init__(self, attempt: Attempt, progress: Progress) -> None:
        self.attempt = attempt
        self.progress = progress
        self.future: Future[Receipt] = Future()
        self.cancelled = threading.Event()
        self.started = threading.Event()


class AttemptQueue:
    """Attempts waiting for a worker, bounded; a full queue refuses at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self._closed = False

    def put(self, job: Job, running: int) -> None:
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

    def take(self) -> Job | None:
        with self._cond:
            while not self._jobs and not self._closed:
                self._cond.wait()
            return self._jobs.popleft() if self._jobs else None

    def remove(self, job: Job) -> bool:
        with self._cond:
            try:
                self._jobs.remove(job)
            except ValueError:
                return False
            return True

    def position(self, job: Job) -> int | None:
        """1 for the next attempt to start; None once it left the queue."""
        with self._cond:
            try:
                return self._jobs.index(job) + 1
            except ValueError:
                return None

    def __len__(self) -> int:
        with self._cond:
            return len(self._jobs)

    def close(self) -> list[Job]:
        with self._cond:
            self._closed = True
            left = list(self._jobs)
            self._jobs.clear()
            self._cond.notify_all()
            return left


class Admission(Protocol):
    """What a ticket asks of the daemon that accepted it."""

    queue: AttemptQueue

    def cancel(self, job: Job) -> None: ...


class Ticket:
    """A submission the daemon accepted: its receipt to come, its place in the queue."""

    def __init__(self, future: Future[Receipt], daemon: Admission, job: Job | None) -> None:
        self.future = future
        self._daemon = daemon
        self._job = job

    def position(self) -> int | None:
        return None if self._job is None else self._daemon.queue.position(self._job)

    def cancel(self) -> None:
        """The caller went away: drop the attempt if it has not started, else record an abort."""
        if self._job is not None:
            self._daemon.cancel(self._job)

    def through(self, view: Callable[[Receipt], Receipt]) -> Ticket:
        """The same attempt, its receipt passed through `view` once it comes."""
        shown: Future[Receipt] = Future()

        def done(f: Future[Receipt]) -> None:
            try:
                shown.set_result(view(f.result()))
            except BaseException as err:
                shown.set_exception(err)

        self.future.add_done_callback(done)
        return Ticket(shown, self._daemon, self._job)
