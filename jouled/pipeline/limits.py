"""What one run is held to (`Limits`, and the rlimits the launcher sets from them) and
what it gives back (`RunResult`), whether it ran in the sandbox or a container."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    cpu_s: int | None = None  # RLIMIT_CPU
    memory_bytes: int | None = 4 << 30  # RLIMIT_AS, per process
    total_memory_bytes: int | None = 4 << 30  # the whole run (cgroup, where the host has one)
    file_bytes: int | None = 256 << 20  # RLIMIT_FSIZE
    open_files: int | None = 1024  # RLIMIT_NOFILE
    processes: int | None = 256  # the run's processes (cgroup pids; else RLIMIT_NPROC as root)
    tmp_bytes: int = 512 << 20  # the private /tmp (and $HOME) tmpfs
    output_bytes: int = 1 << 20  # keep at most this much of stdout+stderr (tail)

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.output_bytes < 0:
            raise ValueError(f"output_bytes must not be negative, got {self.output_bytes}")


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]
    exit_code: int | None  # None when the command did not exit by itself (timeout, signal)
    signal: int | None  # the terminating signal, if any
    timed_out: bool
    wall_ns: int
    cpu_ns: int  # user+sys CPU of the command and everything it started (launcher included)
    output: str  # merged stdout+stderr tail, decoded with errors="replace"
    level: str  # "bwrap" or "process"
    output_dropped: int = 0  # bytes of output dropped from the front to keep the tail
    isolation: Mapping[str, Any] = field(default_factory=dict)  # what applied, in detail
    channel: bytes | None = None  # what the command wrote to CHANNEL_OUT_FD, when asked for
    channel_dropped: int = 0  # bytes of the channel dropped from the front (over the bound)


def rlimits(limits: Limits, *, per_uid: bool) -> list[tuple[str, int, int]]:
    # Core files of a crashing test would land in the workdir: never write them.
    wanted: list[tuple[str, int, int]] = [("RLIMIT_CORE", 0, 0)]
    if limits.cpu_s is not None:
        # One second between SIGXCPU and SIGKILL lets the command report it.
        wanted.append(("RLIMIT_CPU", limits.cpu_s, limits.cpu_s + 1))
    pairs: list[tuple[str, int | None]] = [
        ("RLIMIT_AS", limits.memory_bytes),
        ("RLIMIT_FSIZE", limits.file_bytes),
        ("RLIMIT_NOFILE", limits.open_files),
    ]
    if per_uid:  # RLIMIT_NPROC counts every process of the uid: only for a uid of the run's own
        pairs.append(("RLIMIT_NPROC", limits.processes))
    wanted += [(name, value, value) for name, value in pairs if value is not None]
    return wanted
