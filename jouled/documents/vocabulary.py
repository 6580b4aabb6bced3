"""The vocabulary of the wire documents: statuses, test outcomes, integrity levels, entry kinds.

Every layer spells these the same way because they are declared once, here,
below the contracts and the pipeline. Members are `str` enums: they compare
equal to, and serialise as, the plain strings the ledger and the API carry.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """An attempt's verdict, as signed in a `result` body."""

    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    TIMEOUT = "timeout"
    ERROR = "error"  # the harness could not grade the attempt (not the solver's fault)
    INVALID = "invalid"  # the task cannot be graded as given (its baseline says why)
    TAMPERED = "tampered"  # the run forged or interfered with its own grading


STATUSES = frozenset(s.value for s in Status)

# How far a run's outcomes can be trusted against the code under test, weakest first
# (a result's `integrity.level`): "none", read from output the code writes; "reduced",
# the runner's authenticated report with checks made from inside the process (Python
# < 3.8); "monitor", the report kept and checked by an audit-hook integrity monitor
# (docs/threat-model.md).
INTEGRITY_LEVELS = ("none", "reduced", "monitor")


class Outcome(StrEnum):
    """One test id's outcome in one run."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"


# When one id is reported more than once (a failing call plus an erroring
# teardown), the worst outcome wins.
SEVERITY = {Outcome.PASSED: 0, Outcome.SKIPPED: 1, Outcome.FAILED: 2, Outcome.ERROR: 3}


class EntryKind(StrEnum):
    """The kind of a ledger entry; its body's schema follows from it."""

    GENESIS = "genesis"
    CALIBRATION = "calibration"
    BASELINE = "baseline"
    RESULT = "result"
    ABORT = "abort"
    KEY_ROTATION = "key_rotation"
    OP = "op"


ENTRY_KINDS = tuple(k.value for k in EntryKind)
