"""The next free rollout index of a (task, solver, model, run), for a submit that names none.

The frontier and best-of-k count a solver's rollouts per model: two models submitted
under one solver and run each start at rollout 0, so "within k" means the same for both."""

from __future__ import annotations

import threading
from collections.abc import Callable

from jouled import limits
from jouled.errors import UsageError
from jouled.ledger.store import Ledger

Key = tuple[str, str, str, str]  # (task id, solver, model, run id)


class NextRollout:
    """Hands out rollout indices one above the highest a (task, solver, model, run) has used.

    "Used" is what the ledger holds (results and aborts) and what attempts still in
    flight were handed, so that two attempts in flight at once never get the same
    index. Only in-flight indices are held in memory, each until its attempt ends
    (signed, or refused and so not recorded): what is held is bounded by the
    attempt queue, whatever names callers send.
    """

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._lock = threading.Lock()
        self._held: dict[Key, set[int]] = {}

    def take(
        self, task_id: str, solver: str, run_id: str, model: str = ""
    ) -> tuple[int, Callable[[], None]]:
        """The index, and the call that gives it back once its attempt has ended."""
        key = (task_id, solver, model, run_id)
        with self._lock:
            ((recorded,),) = self._ledger.fetch(
                "SELECT max(rollout) FROM entries WHERE kind IN ('result', 'abort') "
                "AND task_id = ? AND solver = ? AND coalesce(model, '') = ? "
                "AND coalesce(run_id, '') = ?",
                key,
            )
            held = self._held.get(key, set())
            index = max(-1 if recorded is None else int(recorded), *held, -1) + 1
            if index > limits.ROLLOUT_MAX:
                raise UsageError(
                    f"{task_id} by {solver}{f' ({model})' if model else ''} in run {run_id!r} "
                    "has used rollout "
                    f"{limits.ROLLOUT_MAX:,}, the last index: there is no next one",
                    hint="start a new run (--run-id), or name the rollout (--rollout N)",
                )
            self._held.setdefault(key, set()).add(index)
        return index, lambda: self._release(key, index)

    def _release(self, key: Key, index: int) -> None:
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                held.discard(index)
                if not held:
                    del self._held[key]

    def held(self) -> int:
        """How many indices attempts in flight hold."""
        with self._lock:
            return sum(len(s) for s in self._held.values())
