"""Running untrusted commands: a bubblewrap sandbox around one workdir.

The code under test is hostile. Each command runs under `bwrap` in fresh user
(or, when the daemon is root, an unprivileged uid of its own), mount, pid,
network, ipc and uts namespaces:

- the filesystem is the system's read-only directories, a few files of /etc,
  the daemon's interpreter installation (read-only) and the workdir, mounted
  read-write at `/testbed`; `/tmp` (and $HOME inside it) is a private,
  size-bounded tmpfs; `/proc` is the sandbox's own and `/dev` a minimal one.
  The data dir, the signing key, the socket, the task trees, other workdirs,
  `/root` and `/home` do not exist inside.
- the command runs as an unprivileged uid with no capabilities and
  `no_new_privs`; when the daemon runs as root, each concurrent run gets a uid
  of its own from a pool, so the process limit counts that run alone.
- when the command exits or times out, the pid namespace goes with it: every
  process it started dies, whatever it did to leave its session.
- the network namespace has loopback only.

Inside, a small launcher (`python -I -S`, nothing of the tree on its path) sets
the rlimits and drops to the run's uid before exec'ing the command: bwrap has
no option for rlimits, and as root its own `--uid` needs a user namespace whose
ids map back to root outside. The launcher reports what it applied on a pipe
that closes when the exec succeeds.

Hosts where bwrap cannot run (no user namespaces and not root) get the
`process` level: the launcher alone, in its own session, under rlimits, with a
scrubbed environment. That is not isolation, and the daemon refuses to grade
at it unless the operator lowers `--min-isolation` explicitly.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import platform
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, Unpack

from jouled.errors import SandboxError
from jouled.pipeline.bwrap import Bwrap, bwrap
from jouled.pipeline.cgroup import Group
from jouled.pipeline.cgroup import groups as cgroups
from jouled.pipeline.instance import UID_BASE as UID_BASE
from jouled.pipeline.instance import UID_POOL, Instance, for_process
from jouled.pipeline.instance import for_data_dir as instance_for
from jouled.pipeline.launcher import run_started
from jouled.pipeline.limits import Limits, RunResult, rlimits
from jouled.pipeline.mounts import (
    SANDBOX_RO,
    SANDBOX_TMP,
    SANDBOX_WORKDIR,
    bwrap_argv,
)
from jouled.pipeline.scratch import space_of
from jouled.pipeline.seccomp import graded_run_filter, no_new_userns

BWRAP, PROCESS = "bwrap", "process"
LEVELS = (PROCESS, BWRAP)  # weakest first


class RunOptions(TypedDict, total=False):
    """What a run may be given besides its argv, workdir and limits (`Sandbox.run`)."""

    env: Mapping[str, str] | None
    ro_dir: Path | None
    overlays: Mapping[str, Path] | None
    channel_in: bytes | None
    channel_out: bool
    network: bool
    read_only: Sequence[Path]


@dataclass(frozen=True)
class Layout:
    """Where a command sees its workdir and its read-only files."""

    workdir: str
    ro: str


# -- environment --------------------------------------------------------------------------

_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def scrubbed_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a sandboxed command, plus `extra` (trusted, from the daemon).

    Nothing of the daemon's own environment is inherited: no PYTHONPATH,
    PYTEST_ADDOPTS, proxies or credentials. The daemon interpreter's directory
    comes first on PATH so `python` and `pytest` there are the daemon's.
    """
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{_SYSTEM_PATH}",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONNOUSERSITE": "1",
        # The run's uid has no passwd entry: name it for getpass and friends.
        "USER": "sandbox",
        "LOGNAME": "sandbox",
    }
    env.update(extra or {})
    return env


# -- the host -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Host:
    """What isolation this host gives, probed once with a real sandbox."""

    level: str
    bwrap: Bwrap | None
    root: bool  # the daemon is root: bwrap runs without a user namespace, the launcher drops uid
    lacking: str = ""  # why the level is below bwrap, and how to fix it

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"level": self.level, "root": self.root}
        if self.bwrap is not None:
            out["bwrap"] = self.bwrap.describe()
        if self.lacking:
            out["lacking"] = self.lacking
        groups = cgroups()
        out["cgroup"] = groups.kind or f"none: {groups.why_not or 'no memory/pids cgroup'}"
        out["uid"] = "a pooled uid per run" if self.root else "65534 in a user namespace"
        out["nested_userns"] = _nested_userns(self)
        return out


_USERNS_HINT = (
    "run jouled as root (it drops every run to an unprivileged uid), or enable "
    "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 on Debian "
    "and Ubuntu, user.max_user_namespaces > 0, or an AppArmor profile allowing bwrap "
    "userns on Ubuntu 24.04+); in a container, allow the unshare/mount syscalls "
    "(e.g. a seccomp profile permitting them) or run jouled on the host"
)

_probe_lock = threading.Lock()
_host: Host | None = None


def host() -> Host:
    """Probe, once per process, the strongest isolation this host gives."""
    global _host
    with _probe_lock:
        if _host is None:
            _host = _probe_host()
        return _host


def _probe_host() -> Host:
    root = os.geteuid() == 0
    try:
        found = bwrap()
    except SandboxError as err:
        return Host(PROCESS, None, root, f"{err.diagnostics()}")
    box = Sandbox(min_level=PROCESS)
    probe = Host(BWRAP, found, root)
    with tempfile.TemporaryDirectory(prefix="jouled-probe-") as tmp:
        os.chmod(tmp, 0o755)
        try:
            box._run_with(probe, [sys.executable], Path(tmp), Limits(timeout_s=60), {}, probe=True)
        except SandboxError as err:
            return Host(PROCESS, found, root, f"{found.path} cannot start a sandbox here: {err}")
    return probe


# -- the sandbox --------------------------------------------------------------------------


def _nested_userns(where: Host) -> str:
    """How a run is kept from making user namespaces of its own, as `isolation` records it.

    "disable-userns": bwrap's own option, where bwrap makes the run's user
    namespace; "seccomp": a filter refusing them (jouled.pipeline.seccomp), where
    it does not (a root daemon) or its bwrap is older than 0.8; "allowed: WHY"
    where neither applies.
    """
    if where.level != BWRAP or where.bwrap is None:
        return "allowed: no sandbox at the process level"
    if not where.root and where.bwrap.disable_userns:
        return "disable-userns"
    if no_new_userns() is not None:
        return "seccomp"
    return f"allowed: no seccomp filter for this machine ({platform.machine()})"


class _SlotPool:
    """Slots handed to concurrent runs, one each: a run's uid and cgroup go by its slot."""

    def __init__(self, size: int) -> None:
        self._free = list(range(size - 1, -1, -1))
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def lease(self) -> Iterator[int]:
        with self._lock:
            if not self._free:
                raise SandboxError("every sandbox slot is in use", hint="lower the worker count")
            slot = self._free.pop()
        try:
            yield slot
        finally:
            with self._lock:
                self._free.append(slot)


_slots = _SlotPool(UID_POOL)


class Sandbox:
    """Runs commands at this host's isolation, refusing anything below `min_level`.

    `secret` paths (the data dir, the task trees) must never be visible inside:
    a read-only bind that would contain one is refused.
    """

    def __init__(
        self,
        *,
        min_level: str = BWRAP,
        secret: Sequence[Path] = (),
        instance: Instance | None = None,
    ) -> None:
        if min_level not in LEVELS:
            raise SandboxError(f"unknown isolation level {min_level!r}: one of {', '.join(LEVELS)}")
        self.min_level = min_level
        self.secret = [os.path.realpath(p) for p in secret]
        # Whose uids and cgroups its runs get: one daemon's own, else this process's.
        self.instance = instance if instance is not None else process_instance()

    def close(self) -> None:
        """Remove the cgroups this sandbox's runs used (each empty once its run ended)."""
        cgroups().remove(self.instance.cgroup_name(slot) for slot in range(UID_POOL))

    def check_host(self) -> Host:
        """This host's isolation; SandboxError when it is below `min_level`."""
        found = host()
        if LEVELS.index(found.level) < LEVELS.index(self.min_level):
            raise SandboxError(
                f"this host gives only the {found.level!r} isolation level, below the "
                f"minimum {self.min_level!r}: {found.lacking}",
                hint=f"{_USERNS_HINT}; or accept weaker isolation explicitly with "
                f"--min-isolation {found.level} (every result then records it)",
            )
        return found

    def layout(self, workdir: Path, ro_dir: Path | None = None) -> Layout:
        """Where a command run on `workdir` sees it and `ro_dir` (for building its argv)."""
        if host().level == BWRAP:
            return Layout(SANDBOX_WORKDIR, SANDBOX_RO)
        return Layout(str(workdir), str(ro_dir or workdir))

    def run(
        self, argv: Sequence[str], workdir: Path, *, limits: Limits, **options: Unpack[RunOptions]
    ) -> RunResult:
        """Run `argv` with `workdir` as its only writable tree and collect its outcome.

        `ro_dir` is shown read-only at `layout().ro`; each `overlays` entry
        (a path relative to the workdir -> a host file) is shown read-only over
        that path, so the command cannot change it while it runs. With
        `channel_in`, the command finds those bytes on fd 3 (`CHANNEL_IN_FD`);
        with `channel_out`, what it writes to fd 4 (`CHANNEL_OUT_FD`) comes back
        as `RunResult.channel`, apart from its output. `network` shares the
        host's network (an agent calling its model's API; tests never get it);
        `read_only` adds paths shown read-only where they are (an agent CLI's
        installation). Raises SandboxError when the command cannot be started
        or the host is below the minimum level; a nonzero exit is a result.
        """
        return self._run_with(self.check_host(), argv, workdir, limits, options)

    # -- building one run ------------------------------------------------------------------

    def _run_with(
        self,
        where: Host,
        argv: Sequence[str],
        workdir: Path,
        limits: Limits,
        options: RunOptions,
        *,
        probe: bool = False,
    ) -> RunResult:
        env = options.get("env")
        network = options.get("network", False)
        if not argv:
            raise SandboxError("cannot start an empty command")
        if not workdir.is_dir():
            raise SandboxError(
                f"cannot start {argv[0]!r}: working directory {workdir} does not exist"
            )
        workdir = workdir.resolve()
        with contextlib.ExitStack() as stack:
            slot = stack.enter_context(_slots.lease())
            uid = self.instance.uid_base + slot if where.root else None
            if uid is not None:
                _chown_tree(workdir, uid)
            group = None
            if where.level == BWRAP:
                name = self.instance.cgroup_name(slot)
                group = stack.enter_context(cgroups().slot(slot, name))
                if group is not None:
                    group.limit(limits.total_memory_bytes, limits.processes)
            if where.level == BWRAP:
                home = f"{SANDBOX_TMP}/home"
                full_env = {
                    **scrubbed_env(),
                    "HOME": home,
                    "TMPDIR": SANDBOX_TMP,
                    **(env or {}),
                }
                exe = _resolve(argv[0], full_env["PATH"], workdir, SANDBOX_WORKDIR)
                assert where.bwrap is not None
                prefix = bwrap_argv(
                    where.bwrap.path,
                    root=where.root,
                    blocked=_nested_userns(where),
                    secret=self.secret,
                    workdir=workdir,
                    tmp_bytes=limits.tmp_bytes,
                    ro_dir=options.get("ro_dir"),
                    overlays=options.get("overlays") or {},
                    network=network,
                    read_only=options.get("read_only", ()),
                )
                cwd = SANDBOX_WORKDIR
            else:
                private = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jouled-")))
                home = str(private / "home")
                if uid is not None:
                    os.chown(private, uid, uid)
                full_env = {
                    **scrubbed_env(),
                    "HOME": home,
                    "TMPDIR": str(private),
                    **(env or {}),
                }
                exe = _resolve(argv[0], full_env["PATH"], workdir, str(workdir))
                prefix = []
                cwd = str(workdir)
            cfg = {
                "workdir": str(workdir),
                "parent": 0 if where.level == BWRAP else os.getpid(),
                "ids": (uid, uid) if uid is not None else None,
                "cwd": cwd,
                "home": home,
                "exe": exe,
                "probe": probe,
                "prctl": where.level != BWRAP,
                # a graded run (the monitor's channel): its memory closed to every process
                "seal": (graded_run_filter() or b"") if options.get("channel_out") else None,
                "rlimits": rlimits(limits, per_uid=uid is not None),
            }
            isolation = self._isolation(where, uid, limits, group)
            space = space_of(workdir)
            isolation["disk"] = space.describe() if space is not None else None
            isolation["network"] = "host" if network or where.level != BWRAP else "loopback"
            return run_started(
                argv,
                prefix,
                cfg,
                full_env,
                limits,
                where.level,
                isolation,
                options.get("channel_in"),
                options.get("channel_out", False),
                group,
            )
        raise AssertionError("unreachable")  # pragma: no cover (ExitStack swallows nothing)

    def _isolation(
        self, where: Host, uid: int | None, limits: Limits, group: Group | None
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"level": where.level}
        if where.level == BWRAP and where.bwrap is not None:
            out["bwrap"] = where.bwrap.describe()
            out["namespaces"] = ["ipc", "mount", "net", "pid", "uts"] + (
                [] if where.root else ["user"]
            )
        out["uid"] = "pooled" if uid is not None else ("mapped" if where.level == BWRAP else "own")
        out["cgroup"] = group.kind if group is not None else None
        # One daemon's own: its name (from its data dir), the uid block its runs draw from
        # and the cgroup this run was accounted in; no other daemon's runs use them.
        out["instance"] = self.instance.name
        if uid is not None:
            out["uids"] = list(self.instance.uid_range)
        if group is not None:
            out["cgroup_name"] = group.dirs[0].name
        out["nested_userns"] = _nested_userns(where)
        counted = group is not None or uid is not None
        out["limits"] = {
            "cpu_s": limits.cpu_s,
            "memory_bytes_per_process": limits.memory_bytes,
            "memory_bytes_total": limits.total_memory_bytes if group is not None else None,
            "processes": limits.processes if counted else None,
            "file_bytes": limits.file_bytes,
            "open_files": limits.open_files,
            "tmp_bytes": limits.tmp_bytes if where.level == BWRAP else None,
            "output_bytes": limits.output_bytes,
            "timeout_s": limits.timeout_s,
        }
        return out


def run(
    argv: Sequence[str],
    workdir: Path,
    *,
    limits: Limits,
    min_level: str = BWRAP,
    **options: Unpack[RunOptions],
) -> RunResult:
    """`Sandbox(min_level=min_level).run(...)`."""
    return Sandbox(min_level=min_level).run(argv, workdir, limits=limits, **options)


def sandbox_instance(data_dir: Path) -> Instance:
    """The instance of the daemon serving `data_dir`: its uid block and cgroup names."""
    try:
        return instance_for(data_dir, root=os.geteuid() == 0)
    except OSError as err:
        raise SandboxError(
            f"cannot claim a block of sandbox uids for {data_dir}: {err}",
            hint="stop daemons this host no longer needs, or check that /run is writable",
        ) from err


_own: dict[int, Instance] = {}  # by pid: a forked child claims its own


def process_instance() -> Instance:
    """This process's instance (`instance.for_process`), claimed once; the cgroups its
    runs used are removed as it exits."""
    pid = os.getpid()
    if pid not in _own:
        try:
            _own[pid] = for_process(root=os.geteuid() == 0)
        except OSError as err:
            raise SandboxError(
                f"cannot claim a block of sandbox uids for this process: {err}",
                hint="stop daemons this host no longer needs, or check that /run is writable",
            ) from err
        atexit.register(_remove_own_groups, pid)
    return _own[pid]


def _remove_own_groups(pid: int) -> None:
    if os.getpid() == pid:  # not in a forked child that inherited the handler
        cgroups().remove(_own[pid].cgroup_name(slot) for slot in range(UID_POOL))


def sandbox_level() -> str:
    """The strongest isolation this host gives ("bwrap" or "process"), probed once."""
    return host().level


# -- helpers ------------------------------------------------------------------------------


def _resolve(program: str, path_var: str, workdir: Path, visible_workdir: str) -> str:
    """The executable's path as the command sees it (inside or outside the sandbox)."""
    if "/" in program:
        if program.startswith("/"):
            host_path, seen = Path(program), program
        else:
            host_path, seen = workdir / program, f"{visible_workdir}/{program}"
    else:
        found = shutil.which(program, path=path_var)
        if found is None:
            raise SandboxError(
                f"cannot start {program!r}: executable not found",
                hint=f"the sandbox PATH is {path_var}",
            )
        host_path, seen = Path(found), found
    if not (host_path.is_file() and os.access(host_path, os.X_OK)):
        raise SandboxError(f"cannot start {program!r}: {host_path} is not an executable file")
    return seen


def _chown_tree(root: Path, uid: int) -> None:
    """Give `uid` the tree at `root`, never following a symlink.

    Files with more than one hard link keep their owner: they may share an
    inode with something outside the tree.
    """
    os.chown(root, uid, uid, follow_symlinks=False)
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in (*dirs, *files):
            path = os.path.join(top, name)
            info = os.lstat(path)
            if not os.path.isdir(path) and info.st_nlink > 1:
                continue
            os.chown(path, uid, uid, follow_symlinks=False)
