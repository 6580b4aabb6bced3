"""Each attempt's writable space: bounded, so no attempt can fill the data dir's disk.

An attempt's files (its seeded trees, the runner's files, and everything its
runs write into `/testbed`) live in one scratch directory under the data dir's
`work/`. Where the daemon may mount (root with CAP_SYS_ADMIN), that directory
is a tmpfs of its own, `size` bytes: the kernel refuses a write past it
(ENOSPC) and nothing of it touches the data dir's file system. Elsewhere it is
a plain directory, and the sandbox watches the file system it is on: a run
that takes it below the daemon's free-space floor is killed.

A daemon that crashed leaves its attempts' spaces behind (mounted, where they
were tmpfs): the next start on the same data dir unmounts and removes them
(`reclaim`). Either way the sandbox reads the space's state while a run lasts
and after it, and a run that reached the bound is signed with `resource: disk`
(jouled.pipeline.sandbox). `space_of(path)` tells it which bound a workdir
has.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TMPFS, FLOOR = "tmpfs", "free-space floor"
_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2
_INODE_BYTES = 4096  # a tmpfs gets one inode per this many bytes of its size (at least 4096)
_MARGIN = 1 << 20  # a tmpfs with less than this free (or 1/16 of it) has reached its bound


@dataclass(frozen=True)
class Space:
    root: Path
    kind: str  # TMPFS or FLOOR
    bytes: int  # TMPFS: its size; FLOOR: the free space its file system must keep

    def free(self) -> int | None:
        try:
            st = os.statvfs(self.root)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def exhausted(self) -> bool:
        """Whether the bound is reached: the tmpfs is (all but) full, or below the floor."""
        free = self.free()
        if free is None:
            return False
        if self.kind == TMPFS:
            return free < min(_MARGIN, self.bytes // 16)
        return free < self.bytes

    def describe(self) -> dict[str, Any]:
        return {"bound": self.kind, "bytes": self.bytes}


_lock = threading.Lock()
_spaces: dict[str, Space] = {}


def space_of(path: Path) -> Space | None:
    """The bounded space `path` lies in; None for a path outside every attempt's space."""
    real = os.path.realpath(path)
    with _lock:
        for root, space in _spaces.items():
            if real == root or real.startswith(root + "/"):
                return space
    return None


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(path: str, size: int) -> bool:
    """Mount a tmpfs of `size` bytes on `path`; False where this process may not mount."""
    if os.geteuid() != 0:
        return False
    inodes = max(size // _INODE_BYTES, 4096)
    options = f"size={size},nr_inodes={inodes},mode=0711".encode()
    libc = _libc()
    if libc.mount(b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
        err = ctypes.get_errno()
        if err in (errno.EPERM, errno.EACCES, errno.ENODEV):
            return False
        raise OSError(err, f"cannot mount a tmpfs on {path}: {os.strerror(err)}")
    return True


def _unmount(path: str) -> None:
    _libc().umount2(path.encode(), _MNT_DETACH)


def reclaim(parent: Path) -> list[str]:
    """Unmount and remove what attempts left under `parent` (a daemon that crashed).

    Called at start, before any attempt runs: every entry there is a leftover.
    Returns the names removed.
    """
    try:
        names = sorted(os.listdir(parent))
    except FileNotFoundError:
        return []
    for name in names:
        path = os.path.join(parent, name)
        if os.path.ismount(path):
            _unmount(path)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
    return names


@contextlib.contextmanager
def attempt_space(parent: Path, prefix: str, *, size: int, floor: int) -> Iterator[Path]:
    """A fresh scratch directory under `parent`, bounded; removed (and unmounted) at exit.

    `size` > 0 asks for a tmpfs of that many bytes; where none can be mounted,
    or with `size` 0, the directory is bounded by `floor`, the free space its
    file system must keep. The directory is 0711: the sandbox's unprivileged
    user can enter it, not list it.
    """
    parent.mkdir(parents=True, exist_ok=True)
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.chmod(path, 0o711)
    mounted = False
    try:
        mounted = size > 0 and _mount_tmpfs(path, size)
        space = Space(Path(path), TMPFS, size) if mounted else Space(Path(path), FLOOR, floor)
        with _lock:
            _spaces[os.path.realpath(path)] = space
        yield Path(path)
    finally:
        with _lock:
            _spaces.pop(os.path.realpath(path), None)
        if mounted:
            _unmount(path)
        shutil.rmtree(path, ignore_errors=True)
