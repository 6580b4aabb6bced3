"""One error hierarchy for the library, translated at the boundaries.

Every error carries a `kind` that the gRPC servicer maps onto a status code and
the CLI maps onto an exit code, and `diagnostics()`: what went wrong and what a
person can do about it. Library code raises these; OS, DuckDB and NVML errors
are wrapped where they first appear (`raise ... from err`).
"""

from __future__ import annotations

import errno
from enum import StrEnum

# The errnos of a file system with no room left (for anyone, or for this user).
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class Kind(StrEnum):
    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    FAILED_PRECONDITION = "failed_precondition"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


class JouledError(Exception):
    """Root of every error the library raises on purpose."""

    kind: Kind = Kind.INTERNAL
    # A machine-readable reason where callers sort errors by it ("broken-environment");
    # the gRPC servicer sends it as the `jouled-code` trailing metadata.
    code: str = ""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def diagnostics(self) -> str:
        """The message and, where there is one, the fix."""
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class UsageError(JouledError):
    """The caller asked for something malformed."""

    kind = Kind.INVALID_ARGUMENT


class ConfigError(UsageError):
    """A flag, environment variable or config value is wrong."""


class NotFoundError(JouledError):
    kind = Kind.NOT_FOUND


class PreconditionError(JouledError):
    """The request is well formed but the system is in the wrong state for it."""

    kind = Kind.FAILED_PRECONDITION


class BrokenEnvironmentError(PreconditionError):
    """A task's environment cannot run its tests: its baseline shows it; nothing is graded.

    `evidence` is the baseline output's excerpt that shows why.
    """

    code = "broken-environment"

    def __init__(self, message: str, *, evidence: str = "", hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.evidence = evidence


class BusyError(JouledError):
    kind = Kind.RESOURCE_EXHAUSTED


class DiskFullError(BusyError):
    """The data dir's file system is (nearly) full: no new attempt is accepted."""


class CancelledError(JouledError):
    """The caller went away (cancelled, or its deadline passed) before the attempt ended."""

    kind = Kind.UNAVAILABLE


# -- who may do what ---------------------------------------------------------------------


class UnauthenticatedError(JouledError):
    """The caller presented no credential, or one the daemon does not know."""

    kind = Kind.UNAUTHENTICATED


class DeniedError(JouledError):
    """The caller is known but its roles do not allow the request."""

    kind = Kind.PERMISSION_DENIED


# -- tasks and contracts ---------------------------------------------------------------


class TaskError(ConfigError):
    """A task directory or SWE-bench record is malformed."""


class UnknownTaskError(NotFoundError):
    pass


# -- patches -----------------------------------------------------------------------------


class PatchError(UsageError):
    """A submitted patch was rejected before anything ran; `path` names the file."""

    def __init__(self, message: str, *, path: str = "", hint: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message, hint=hint)
        self.path = path


# -- running -----------------------------------------------------------------------------


class SandboxError(JouledError):
    """The sandbox could not start or supervise a test command (an infrastructure fault)."""


# -- energy ------------------------------------------------------------------------------


class MeterError(JouledError):
    """A meter could not be opened or read."""

    kind = Kind.UNAVAILABLE


class MeterUnavailableError(MeterError):
    """The requested energy source does not exist on this host."""


class MeterPermissionError(MeterError):
    kind = Kind.PERMISSION_DENIED


# -- ledger ------------------------------------------------------------------------------


class LedgerError(JouledError):
    pass


class LedgerFullError(LedgerError):
    """The data dir has no room for the ledger's next write; nothing recorded is lost."""

    kind = Kind.RESOURCE_EXHAUSTED


class LedgerIntegrityError(LedgerError):
    """The stored ledger disagrees with itself or with its checkpoint: refuse to extend it."""

    kind = Kind.FAILED_PRECONDITION


class KeyFileError(LedgerError):
    kind = Kind.PERMISSION_DENIED


class VerificationError(LedgerError):
    """An export or receipt failed offline verification; `seq` names the first bad entry."""

    kind = Kind.FAILED_PRECONDITION

    def __init__(self, message: str, *, seq: int | None = None, hint: str = "") -> None:
        super().__init__(f"entry {seq}: {message}" if seq is not None else message, hint=hint)
        self.seq = seq


# -- wire documents ----------------------------------------------------------------------


class DocumentError(UsageError):
    """A wire document (a ledger body, a receipt, a frontier row) is malformed.

    `field` is the dotted path of the bad field, `document` what was being read.
    """

    def __init__(self, message: str, *, document: str, field: str = "", hint: str = "") -> None:
        where = f"{document} field {field!r}" if field else document
        super().__init__(f"{where}: {message}", hint=hint)
        self.document = document
        self.field = field
