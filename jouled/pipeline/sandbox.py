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

import contextlib
import json
import marshal
import os
import platform
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jouled.errors import SandboxError
from jouled.pipeline.bwrap import Bwrap, bwrap
from jouled.pipeline.cgroup import Group
from jouled.pipeline.cgroup import groups as cgroups
from jouled.pipeline.instance import UID_BASE as UID_BASE
from jouled.pipeline.instance import UID_POOL, UNNAMED, Instance
from jouled.pipeline.instance import for_data_dir as instance_for
from jouled.pipeline.scratch import FLOOR, Space, space_of
from jouled.pipeline.seccomp import no_new_userns

# Where a run sees its workdir and the read-only files the daemon gives it.
SANDBOX_WORKDIR = "/testbed"
SANDBOX_RO = "/run/jouled"
SANDBOX_TMP = "/tmp"

# The side channels a command may be given, at fixed descriptor numbers.
CHANNEL_IN_FD, CHANNEL_OUT_FD = 3, 4
CHANNEL_MAX_BYTES = 64 << 20

BWRAP, PROCESS = "bwrap", "process"
LEVELS = (PROCESS, BWRAP)  # weakest first


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


# -- the launcher -------------------------------------------------------------------------

# Runs as `python -I -S -B -c`: no site-packages, no environment variables, no
# working directory on sys.path, so nothing the command can write affects it.
_LAUNCHER = r"""
import fcntl, marshal, os, resource, signal, sys

cfg = marshal.loads(bytes.fromhex(sys.argv[1]))
# bwrap sets no_new_privs and kills the command with its parent itself; only the
# process level needs prctl, and importing ctypes costs a third of a start-up.
libc = None
if cfg["prctl"]:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
# Out of the way of the fixed channel numbers, then the channels into place.
status = fcntl.fcntl(cfg["status_fd"], fcntl.F_DUPFD_CLOEXEC, 10)
moved = [(fcntl.fcntl(src, fcntl.F_DUPFD_CLOEXEC, 10), dst) for src, dst in cfg["moves"]]
for fd in {cfg["status_fd"], *(src for src, _ in cfg["moves"])}:
    os.close(fd)
for src, dst in moved:
    os.dup2(src, dst, inheritable=True)
    os.close(src)


def say(**message):
    os.write(status, marshal.dumps(message).hex().encode() + b"\n")


def fail(stage, err):
    say(error=stage, message=str(err))
    os._exit(127)


for name, soft, hard in cfg["rlimits"]:
    which = getattr(resource, name)
    ceiling = resource.getrlimit(which)[1]
    if os.geteuid() != 0 and ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    try:
        resource.setrlimit(which, (soft, hard))
    except (OSError, ValueError) as err:
        fail("setrlimit " + name, err)
if cfg["ids"]:
    uid, gid = cfg["ids"]
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as err:
        fail("drop privileges", err)
if libc is not None:
    libc.prctl(38, 1, 0, 0, 0)
try:
    os.makedirs(cfg["home"], 0o700, exist_ok=True)
    os.chdir(cfg["cwd"])
except OSError as err:
    fail("enter the working directory", err)
for sig in (signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(sig, signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_SETMASK, ())
if libc is not None:
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)
if cfg["parent"] and os.getppid() != cfg["parent"]:
    os._exit(137)
caps = [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff:")]
say(uid=os.getuid(), caps=caps[0] if caps else "")
if cfg["probe"]:
    os._exit(0)
try:
    os.execv(cfg["exe"], sys.argv[2:])
except OSError as err:
    fail("exec", err)
"""
# The launcher's magic numbers: prctl 38 PR_SET_NO_NEW_PRIVS (setuid binaries
# cannot regain privileges) and prctl 1 PR_SET_PDEATHSIG (set after the uid
# change, which clears it: in the process level, the command dies with the daemon).


def _rlimits(limits: Limits, *, per_uid: bool) -> list[tuple[str, int, int]]:
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
            box._run_with(probe, [sys.executable], Path(tmp), Limits(timeout_s=60), probe=True)
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


def _interpreter_paths() -> list[str]:
    """What a command needs to run the daemon's interpreter and its packages."""
    paths = {
        os.path.realpath(sys.executable),
        os.path.dirname(os.path.abspath(sys.executable)),
        sys.prefix,
        sys.base_prefix,
    }
    paths.update(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib"))
    paths.update(sysconfig.get_paths()[key] for key in ("platlib",))
    # Only the outermost: nested binds of the same files are redundant.
    ordered = sorted({os.path.normpath(p) for p in paths if p and os.path.exists(p)})
    kept: list[str] = []
    for path in ordered:
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs need of /etc; the rest of it (shadow, credentials, service
# configuration) stays out.
_ETC_FILES = (
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "alternatives",
    "mime.types",
    "ssl/certs",
    "ca-certificates",
    "os-release",
)


def _system_binds() -> list[str]:
    args: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in _ETC_FILES:
        path = f"/etc/{name}"
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def _parents(path: str, made: set[str], bound: set[str]) -> list[str]:
    """Create `path`'s missing ancestors world-searchable (bwrap would make them 0700).

    Skips ancestors made already or lying inside a directory bound before.
    """
    args: list[str] = []
    for parent in reversed(Path(path).parents):
        name = str(parent)
        if name in made or any(_within(name, b) for b in bound):
            continue
        args += ["--perms", "0755", "--dir", name]
        made.add(name)
    return args


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


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
        instance: Instance = UNNAMED,
    ) -> None:
        if min_level not in LEVELS:
            raise SandboxError(f"unknown isolation level {min_level!r}: one of {', '.join(LEVELS)}")
        self.min_level = min_level
        self.secret = [os.path.realpath(p) for p in secret]
        self.instance = instance  # whose uids and cgroups its runs get (one daemon's own)

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
        self,
        argv: Sequence[str],
        workdir: Path,
        *,
        limits: Limits,
        env: Mapping[str, str] | None = None,
        ro_dir: Path | None = None,
        overlays: Mapping[str, Path] | None = None,
        channel_in: bytes | None = None,
        channel_out: bool = False,
        network: bool = False,
        read_only: Sequence[Path] = (),
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
        return self._run_with(
            self.check_host(),
            argv,
            workdir,
            limits,
            env=env,
            ro_dir=ro_dir,
            overlays=overlays or {},
            channel_in=channel_in,
            channel_out=channel_out,
            network=network,
            read_only=read_only,
        )

    # -- building one run ------------------------------------------------------------------

    def _run_with(
        self,
        where: Host,
        argv: Sequence[str],
        workdir: Path,
        limits: Limits,
        *,
        env: Mapping[str, str] | None = None,
        ro_dir: Path | None = None,
        overlays: Mapping[str, Path] | None = None,
        channel_in: bytes | None = None,
        channel_out: bool = False,
        network: bool = False,
        read_only: Sequence[Path] = (),
        probe: bool = False,
    ) -> RunResult:
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
                prefix = self._bwrap_argv(
                    where, workdir, limits, ro_dir, overlays or {}, network, read_only
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
                "rlimits": _rlimits(limits, per_uid=uid is not None),
            }
            isolation = self._isolation(where, uid, limits, group)
            space = space_of(workdir)
            isolation["disk"] = space.describe() if space is not None else None
            isolation["network"] = "host" if network or where.level != BWRAP else "loopback"
            return _run_started(
                argv,
                prefix,
                cfg,
                full_env,
                limits,
                where.level,
                isolation,
                channel_in,
                channel_out,
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

    def _bwrap_argv(
        self,
        where: Host,
        workdir: Path,
        limits: Limits,
        ro_dir: Path | None,
        overlays: Mapping[str, Path],
        network: bool = False,
        read_only: Sequence[Path] = (),
    ) -> list[str]:
        assert where.bwrap is not None
        args = [where.bwrap.path, "--die-with-parent", "--new-session"]
        if where.root:
            # No user namespace: its ids would map back to root outside. The
            # launcher drops to the run's uid, which clears these two as well.
            args += ["--unshare-ipc", "--unshare-pid", "--unshare-uts"]
            args += [] if network else ["--unshare-net"]
            args += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            args += ["--unshare-all", "--unshare-user"]
            args += ["--share-net"] if network else []
            args += ["--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"]
        blocked = _nested_userns(where)
        if blocked == "disable-userns":
            args += ["--disable-userns"]
        elif blocked == "seccomp":
            args += ["--seccomp", "{seccomp}"]
        args += ["--hostname", "jouled-sandbox", "--info-fd", "{info}", "--block-fd", "{block}"]
        args += _system_binds()
        bound: set[str] = {*_SYSTEM_DIRS, "/etc"}
        made: set[str] = {"/"}
        if network:
            for name in ("resolv.conf", "gai.conf"):
                real = os.path.realpath(f"/etc/{name}")
                if os.path.isfile(real):
                    args += ["--ro-bind", real, f"/etc/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", SANDBOX_TMP]
        args += ["--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/dev/shm"]
        made.update({SANDBOX_TMP, "/dev/shm"})
        # After the tmpfs mounts, so that an installation under /tmp is not hidden by them.
        extra = [os.path.normpath(str(p)) for p in read_only if os.path.exists(p)]
        for path in [*_interpreter_paths(), *extra]:
            args += self._bind_read_only(path, made, bound)
        args += ["--bind", str(workdir), SANDBOX_WORKDIR]
        if ro_dir is not None:
            args += _parents(SANDBOX_RO, made, bound)
            args += ["--ro-bind", str(ro_dir), SANDBOX_RO]
        for rel, source in sorted(overlays.items()):
            if rel.startswith("/") or ".." in rel.split("/"):
                raise SandboxError(f"overlay path {rel!r} is not relative to the workdir")
            args += ["--ro-bind", str(source), f"{SANDBOX_WORKDIR}/{rel}"]
        # The launcher enters the workdir once it runs as the run's uid (the owner).
        args += ["--chdir", "/", "--"]
        return args

    def _bind_read_only(self, path: str, made: set[str], bound: set[str]) -> list[str]:
        self._refuse_secret(path)
        if any(_within(path, b) for b in bound):
            return []
        bound.add(path)
        return [*_parents(path, made, bound), "--ro-bind", path, path]

    def _refuse_secret(self, path: str) -> None:
        real = os.path.realpath(path)
        for secret in self.secret:
            if _within(secret, real):
                raise SandboxError(
                    f"the sandbox would show {secret} read-only inside {path}",
                    hint="keep the data dir and task dirs outside the interpreter's installation",
                )


def run(
    argv: Sequence[str],
    workdir: Path,
    *,
    limits: Limits,
    env: Mapping[str, str] | None = None,
    ro_dir: Path | None = None,
    overlays: Mapping[str, Path] | None = None,
    channel_in: bytes | None = None,
    channel_out: bool = False,
    min_level: str = BWRAP,
) -> RunResult:
    """`Sandbox(min_level=min_level).run(...)`."""
    return Sandbox(min_level=min_level).run(
        argv,
        workdir,
        limits=limits,
        env=env,
        ro_dir=ro_dir,
        overlays=overlays,
        channel_in=channel_in,
        channel_out=channel_out,
    )


def sandbox_instance(data_dir: Path) -> Instance:
    """The instance of the daemon serving `data_dir`: its uid block and cgroup names."""
    try:
        return instance_for(data_dir, root=os.geteuid() == 0)
    except OSError as err:
        raise SandboxError(
            f"cannot claim a block of sandbox uids for {data_dir}: {err}",
            hint="stop daemons this host no longer needs, or check that /run is writable",
        ) from err


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


# -- supervising a running command --------------------------------------------------------

_DRAIN_GRACE_S = 2.0  # how long output may keep arriving after everything was killed


class _Tail:
    """The last `limit` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.limit:  # trim in batches, not on every chunk
            self._trim()

    def _trim(self) -> None:
        excess = len(self.data) - self.limit
        if excess > 0:
            del self.data[:excess]
            self.dropped += excess

    def text(self) -> str:
        self._trim()
        return self.data.decode(errors="replace")


def _read_line(fd: int) -> bytes:
    """One line from `fd` (without the newline), or what came before end of file.

    Other holders of the pipe's write end (bwrap, the sandbox's pid 1) keep it
    open while the command runs, so a reader must not wait for end of file.
    """
    data = bytearray()
    while b"\n" not in data:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return bytes(data.split(b"\n", 1)[0])


def _read_info(fd: int) -> bytes:
    """bwrap's --info-fd JSON document, read up to its closing brace."""
    data = bytearray()
    while b"}" not in data:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _exited(pid: int) -> bool:
    """Whether `pid` has exited, without reaping it (its pid stays reserved)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


class _Streams:
    """Reads several pipes into bounded tails until each reaches end of file."""

    def __init__(self, streams: Mapping[int, _Tail]) -> None:
        self.sel = selectors.DefaultSelector()
        self.tails = dict(streams)
        for fd in self.tails:
            self.sel.register(fd, selectors.EVENT_READ)

    def close(self) -> None:
        self.sel.close()

    @property
    def open(self) -> bool:
        return bool(self.sel.get_map())

    def pump(self, timeout: float | None, extra: int | None = None) -> bool:
        """Read what is ready within `timeout`; True when `extra` became readable."""
        if extra is not None:
            self.sel.register(extra, selectors.EVENT_READ)
        try:
            ready = self.sel.select(timeout)
        finally:
            if extra is not None:
                self.sel.unregister(extra)
        hit = False
        for key, _ in ready:
            if key.fd == extra:
                hit = True
                continue
            chunk = os.read(key.fd, 65536)
            if chunk:
                self.tails[key.fd].feed(chunk)
            else:
                self.sel.unregister(key.fd)
        return hit


_DISK_POLL_S = 0.2  # how often a run's writable space is read while it runs


class _Disk:
    """A run's writable space, read while it runs: whether it reached its bound."""

    def __init__(self, space: Space | None) -> None:
        self.space = space
        self.hit = False

    def check(self) -> bool:
        """Read the space; True when the run must be killed (it took the host's floor)."""
        if self.space is None or not self.space.exhausted():
            return False
        self.hit = True
        return self.space.kind == FLOOR


def _watch(pid: int, streams: _Streams, deadline: float, disk: _Disk) -> bool:
    """Collect output until `pid` exits, the deadline passes or `disk` says kill.

    True on timeout.
    """
    pidfd = os.pidfd_open(pid)
    try:
        while not _exited(pid):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            if disk.space is not None:
                remaining = min(remaining, _DISK_POLL_S)
            streams.pump(remaining, extra=pidfd)
            if disk.check():
                return False
    finally:
        os.close(pidfd)
    return False


def _drain(streams: _Streams) -> None:
    """Read the rest; give up when nothing that could write is left."""
    deadline = time.monotonic() + _DRAIN_GRACE_S
    while streams.open and (remaining := deadline - time.monotonic()) > 0:
        streams.pump(remaining)


def _wait_gone(pidfd: int | None) -> None:
    """Block until the process behind `pidfd` (the sandbox's pid 1) has exited.

    The kernel lets a pid namespace's init finish exiting only after every
    other process in the namespace is gone, so this waits for all of them.
    """
    if pidfd is None:
        return
    with selectors.DefaultSelector() as sel:
        sel.register(pidfd, selectors.EVENT_READ)
        sel.select()


def _sandbox_init(info: bytes) -> tuple[int | None, int | None]:
    """A pidfd and the pid of the sandbox's pid 1, from bwrap's --info-fd JSON."""
    try:
        child = int(json.loads(info.decode())["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None, None
    try:
        return os.pidfd_open(child), child
    except OSError:
        return None, None


@dataclass
class _Pipes:
    """Every pipe of one run; closes whatever is still open."""

    fds: list[int] = field(default_factory=list)

    def pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self.fds += [r, w]
        return r, w

    def close(self, fd: int) -> None:
        if fd in self.fds:
            self.fds.remove(fd)
            os.close(fd)

    def close_all(self) -> None:
        for fd in list(self.fds):
            self.close(fd)


def _run_started(
    argv: Sequence[str],
    prefix: Sequence[str],
    cfg: dict[str, Any],
    env: Mapping[str, str],
    limits: Limits,
    level: str,
    isolation: dict[str, Any],
    channel_in: bytes | None,
    channel_out: bool,
    group: Group | None = None,
) -> RunResult:
    """Launch, watch, clean up after and account for one command."""
    pipes = _Pipes()
    try:
        return _supervise(
            pipes, argv, prefix, cfg, env, limits, level, isolation, channel_in, channel_out, group
        )
    finally:
        pipes.close_all()


def _supervise(
    pipes: _Pipes,
    argv: Sequence[str],
    prefix: Sequence[str],
    cfg: dict[str, Any],
    env: Mapping[str, str],
    limits: Limits,
    level: str,
    isolation: dict[str, Any],
    channel_in: bytes | None,
    channel_out: bool,
    group: Group | None,
) -> RunResult:
    oom_before = group.oom_kills() if group is not None else 0
    status_r, status_w = pipes.pipe()
    out_r, out_w = pipes.pipe()
    passed = [status_w]
    moves: list[tuple[int, int]] = []
    if channel_in is not None:
        in_r, in_w = pipes.pipe()
        os.write(in_w, channel_in)  # small: fits the pipe's buffer
        pipes.close(in_w)
        passed.append(in_r)
        moves.append((in_r, CHANNEL_IN_FD))
    chan_r = -1
    if channel_out:
        chan_r, chan_w = pipes.pipe()
        passed.append(chan_w)
        moves.append((chan_w, CHANNEL_OUT_FD))
    info_r = info_w = block_r = block_w = -1
    fds: dict[str, str] = {}
    if prefix:
        info_r, info_w = pipes.pipe()
        block_r, block_w = pipes.pipe()
        passed += [info_w, block_r]
        fds = {"{info}": str(info_w), "{block}": str(block_r)}
    if "{seccomp}" in prefix:
        program = no_new_userns()
        assert program is not None
        filter_r, filter_w = pipes.pipe()
        os.write(filter_w, program)  # small: fits the pipe's buffer
        pipes.close(filter_w)
        passed.append(filter_r)
        fds["{seccomp}"] = str(filter_r)
    cfg = {**cfg, "status_fd": status_w, "moves": moves}
    launcher = [sys.executable, "-I", "-S", "-B", "-c", _LAUNCHER, marshal.dumps(cfg).hex()]
    full = [fds.get(a, a) for a in prefix] + [*launcher, *argv]
    begin = time.monotonic_ns()
    try:
        proc = subprocess.Popen(
            full,
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=out_w,
            env=dict(env),
            close_fds=True,
            pass_fds=tuple(passed),
            start_new_session=True,
        )
    except OSError as err:
        raise SandboxError(f"cannot start the sandbox: {err}") from err
    for fd in passed:
        pipes.close(fd)
    pipes.close(out_w)
    init = None
    if prefix:
        init, child = _sandbox_init(_read_info(info_r))
        # The sandbox's pid 1 waits on the block pipe until it is in its cgroup.
        try:
            if group is not None and child is not None:
                group.add(child)
        finally:
            os.write(block_w, b"x")
            pipes.close(block_w)
    tail, channel = _Tail(limits.output_bytes), _Tail(CHANNEL_MAX_BYTES)
    streams = _Streams({out_r: tail, **({chan_r: channel} if channel_out else {})})
    status: int | None = None
    try:
        line = _read_line(status_r)
        message = marshal.loads(bytes.fromhex(line.decode())) if line else {}
        if "uid" not in message:
            _kill(proc, init)
            status, _ = _reap(proc)
            _wait_gone(init)
            _drain(streams)
            said = tail.text().strip()[-500:]
            why = (
                f"{message['error']}: {message['message']}"
                if "error" in message
                else f"the sandbox did not start: {said or _describe_status(status)}"
            )
            raise SandboxError(
                f"cannot start {argv[0]!r}: {why}",
                hint="check that the command and its working directory exist and are usable",
            )
        isolation = {**isolation, "caps": message["caps"]}
        disk = _Disk(space_of(Path(cfg["workdir"])))
        timed_out = _watch(proc.pid, streams, time.monotonic() + limits.timeout_s, disk)
        # Also after a normal exit: leftovers would hold the output pipe open.
        _kill(proc, init)
        status, rusage = _reap(proc)
        _wait_gone(init)
        wall_ns = time.monotonic_ns() - begin
        _drain(streams)
        late = _late_failure(status_r, status)
        if late:
            raise SandboxError(f"cannot start {argv[0]!r}: {late}")
        if group is not None:
            isolation = {
                **isolation,
                "memory_peak_bytes": group.peak_memory(),
                "oom_killed": group.oom_kills() > oom_before,
            }
        disk.check()
        if disk.hit:  # the run reached the bound of its writable space (and was refused there)
            isolation = {**isolation, "resource": "disk"}
    finally:
        streams.close()
        if proc.returncode is None:
            _kill(proc, init)
            _reap(proc)
        if init is not None:
            os.close(init)
    signalled = os.WIFSIGNALED(status)
    # A run killed at its deadline did not exit by itself, whichever of bwrap and its
    # child the kill reached first (bwrap that outlives its child exits 128 + signal).
    killed = signalled or timed_out
    return RunResult(
        argv=tuple(argv),
        exit_code=None if killed else os.WEXITSTATUS(status),
        signal=(os.WTERMSIG(status) if signalled else int(signal.SIGKILL)) if killed else None,
        timed_out=timed_out,
        wall_ns=wall_ns,
        cpu_ns=round((rusage.ru_utime + rusage.ru_stime) * 1e9),
        output=tail.text(),
        level=level,
        output_dropped=tail.dropped,
        isolation=isolation,
        channel=bytes(channel.data) if channel_out else None,
        channel_dropped=channel.dropped,
    )


def _late_failure(status_r: int, status: int) -> str:
    """The launcher's exec failure, said after its ready message; "" when it exec'd.

    Read only once everything that held the pipe is gone, so it cannot block.
    """
    if os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 127:
        return ""
    os.set_blocking(status_r, False)
    try:
        rest = os.read(status_r, 65536)
    except BlockingIOError:
        return ""
    for line in rest.splitlines():
        message = marshal.loads(bytes.fromhex(line.decode())) if line else {}
        if "error" in message:
            return f"{message['error']}: {message['message']}"
    return ""


def _describe_status(status: int | None) -> str:
    if status is None:
        return "no exit status"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


def _kill(proc: subprocess.Popen[bytes], init: int | None) -> None:
    """SIGKILL the sandbox: its pid 1 (taking the pid namespace along) and the process group.

    The launcher's pid is not reaped yet, so it cannot have been reused.
    """
    if init is not None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(init, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)


def _reap(proc: subprocess.Popen[bytes]) -> tuple[int, Any]:
    """Reap the started process and return its wait status and rusage."""
    _, status, rusage = os.wait4(proc.pid, 0)
    # Popen did not reap it, so tell it the outcome; otherwise it warns the
    # process is still running when it is collected.
    proc.returncode = os.waitstatus_to_exitcode(status)
    return status, rusage
