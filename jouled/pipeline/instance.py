"""What sets one daemon's sandbox runs apart from another's on the same host.

Several daemons may share a host (one per data dir). Their runs must never
share a uid or a cgroup: a shared uid lets one run signal or trace another's
processes and count against its process limit, and a shared cgroup lets one
daemon sign another's memory as its own run's peak. Each daemon therefore
gets an instance:

- a `name`, the first 10 hex digits of the sha256 of its data dir's real
  path, which names its runs' cgroups (`jouled-<name>-run-<slot>`);
- a block of UID_POOL uids for its runs when it runs as root, chosen from the
  same hash and claimed with a lock file in LOCK_DIR that it holds while it
  lives: a daemon whose block another daemon holds takes the next free one,
  so two live daemons never share a uid, whatever their hashes.

Code that runs the sandbox without a daemon (`jouled tasks check`, the
library's own tests, a script) gets an instance of its own process, named
and claimed the same way from its pid (`for_process`): two such processes
on one host, or one beside a daemon, never share a uid or a cgroup either.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

# Unprivileged uids for runs when the daemon is root: far from human and
# system accounts (and from 65534), one per concurrent run of one daemon.
UID_BASE = 1_600_000_000
UID_POOL = 4096
UID_BLOCKS = (2**32 - 2 - UID_BASE) // UID_POOL  # below 2**32 - 1, which means "no uid"
LOCK_DIR = Path("/run/jouled-sandbox")
_PROBES = 256  # blocks tried past the hashed one before giving up


@dataclass(frozen=True)
class Instance:
    name: str
    uid_base: int  # the first uid of its block
    uid_lock: str = ""  # the lock file it holds on its block ("" when none could be taken)

    @property
    def uid_range(self) -> tuple[int, int]:
        return self.uid_base, self.uid_base + UID_POOL - 1

    def cgroup_name(self, slot: int) -> str:
        return f"jouled-{self.name}-run-{slot}"

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "uids": list(self.uid_range)}


_held: list[int] = []  # lock descriptors kept open for the life of the process
_claimed: dict[str, Instance] = {}  # by data dir: a second daemon object in one process reuses it


def name_of(data_dir: Path) -> str:
    return _name(os.path.realpath(data_dir))


def _name(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:10]


def for_data_dir(data_dir: Path, *, root: bool, lock_dir: Path = LOCK_DIR) -> Instance:
    """The instance of the daemon serving `data_dir`; as root, with a uid block claimed.

    Where no lock can be taken (no writable LOCK_DIR) the block is the hashed
    one, unclaimed. Raises OSError only where every probed block is held (256
    daemons whose hashes crowd one place), which a caller reports as a fault.
    """
    return _claim(os.path.realpath(data_dir), root=root, lock_dir=lock_dir)


def for_process(*, root: bool, lock_dir: Path = LOCK_DIR) -> Instance:
    """The instance of this process, for sandbox runs made without a daemon: named by
    its pid (and the time it started, so a reused pid names another), claimed as a
    daemon's is."""
    return _claim(f"process {os.getpid()} {_started()}", root=root, lock_dir=lock_dir)


def _started() -> str:
    """When this process started, in clock ticks since boot ("" where it cannot be read)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def _claim(key: str, *, root: bool, lock_dir: Path) -> Instance:
    name = _name(key)
    start = int(name, 16) % UID_BLOCKS
    if not root:  # no pooled uids: the runs are in user namespaces of their own
        return Instance(name, UID_BASE + start * UID_POOL)
    if key in _claimed:
        return _claimed[key]
    try:
        lock_dir.mkdir(mode=0o755, exist_ok=True)
    except OSError:
        return Instance(name, UID_BASE + start * UID_POOL)  # nowhere to claim: hash alone
    for step in range(_PROBES):
        block = (start + step) % UID_BLOCKS
        path = lock_dir / f"uids-{block}.lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:  # a read-only /run (a hardened unit): nowhere to claim, hash alone
            return Instance(name, UID_BASE + start * UID_POOL)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except OSError:
            os.close(fd)
            return Instance(name, UID_BASE + start * UID_POOL)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {key}\n".encode())
        _held.append(fd)
        _claimed[key] = Instance(name, UID_BASE + block * UID_POOL, str(path))
        return _claimed[key]
    raise OSError(f"every uid block near {start} in {lock_dir} is held by another daemon")
