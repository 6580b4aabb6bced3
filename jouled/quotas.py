"""Places a caller may hold at once: bounded in all and per credential; refused at once.

The daemon's shared means (RPC threads for reads, places in the attempt queue)
are handed out as places here, so one credential cannot take them all: a call
that finds no place is refused with RESOURCE_EXHAUSTED saying whose places are
taken and what to do, and nothing waits for a place.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from jouled.errors import BusyError


class Places:
    """At most `total` places held at once, and `per_holder` by any one named holder.

    A holder of None (an operator, or an in-process caller the daemon trusts)
    counts towards the total only.
    """

    def __init__(self, what: str, *, total: int, per_holder: int, hint: str) -> None:
        self.what = what  # "reads in progress", "attempts queued or running", ...
        self.total = total
        self.per_holder = per_holder
        self._hint = hint
        self._held: Counter[str | None] = Counter()
        self._lock = threading.Lock()

    def take(self, holder: str | None) -> Callable[[], None]:
        """Take a place for `holder`; returns what gives it back (once)."""
        with self._lock:
            mine = self._held[holder]
            if holder is not None and mine >= self.per_holder:
                raise BusyError(
                    f"{holder} already has {mine} {self.what}; the limit is "
                    f"{self.per_holder} per credential",
                    hint=self._hint,
                )
            held = sum(self._held.values())
            if held >= self.total:
                raise BusyError(
                    f"{held} {self.what} on this daemon; the limit is {self.total}",
                    hint=self._hint,
                )
            self._held[holder] += 1
        given: list[bool] = []

        def give_back() -> None:
            with self._lock:
                if given:
                    return
                given.append(True)
                self._held[holder] -= 1
                if not self._held[holder]:
                    del self._held[holder]

        return give_back

    def held(self, holder: str | None = None) -> int:
        """Places held by `holder`, or by everyone when None."""
        with self._lock:
            return self._held[holder] if holder is not None else sum(self._held.values())
