"""Running untrusted test commands.

A process sandbox, not a container: the command runs in its own session and
process group, under rlimits, with a scrubbed environment, stdin from /dev/null
and a wall-clock timeout that kills everything it started. Where the host
allows, it also gets a private network namespace (loopback up, nothing else)
and, when the daemon runs as root and `nobody` can run the daemon's
interpreter, that unprivileged uid, which then owns only the `writable` paths.

Every command starts through a launcher: a fresh interpreter in isolated mode
that applies the isolation in the only order that works (unshare while still
privileged, set rlimits, drop the uid, enter the working directory as that uid)
and then execs the command. Doing this in a launcher instead of a preexec_fn
keeps Python code out of the fork child of the daemon, which is multi-threaded.
The launcher reports what it applied, or why it could not exec, on a pipe that
closes when the exec succeeds.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import pwd
import resource
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from jouled.errors import SandboxError


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    cpu_s: int | None = None  # RLIMIT_CPU
    memory_bytes: int | None = 4 << 30  # RLIMIT_AS
    file_bytes: int | None = 256 << 20  # RLIMIT_FSIZE
    open_files: int | None = 1024  # RLIMIT_NOFILE
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
    cpu_ns: int  # user+sys CPU of the command and every descendant it reaped (launcher included)
    output: str  # merged stdout+stderr tail, decoded with errors="replace"
    level: str  # the isolation that applied: "process", "process+netns", "process+netns+uid"
    output_dropped: int = 0  # bytes of output dropped from the front to keep the tail


# -- environment --------------------------------------------------------------------------

_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def scrubbed_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a sandboxed command, plus `extra` (trusted, from the daemon).

    Nothing of the daemon's own environment is inherited: no PYTHONPATH,
    PYTEST_ADDOPTS, proxies or credentials. The daemon interpreter's directory
    comes first on PATH so `python` and `pytest` there are the daemon's.
    `run` adds a private HOME and TMPDIR per command.
    """
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{_SYSTEM_PATH}",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
    }
    env.update(extra or {})
    return env


# -- the launcher -------------------------------------------------------------------------

# Runs as `python -I -S -c`: no site-packages, no environment variables, no
# working directory on sys.path, so nothing the command can write affects it.
_LAUNCHER = r"""
import ctypes, marshal, os, resource, signal, sys

cfg = marshal.loads(bytes.fromhex(sys.argv[1]))
status = cfg["status_fd"]
libc = ctypes.CDLL(None, use_errno=True)


def say(**message):
    os.write(status, marshal.dumps(message).hex().encode() + b"\n")


def fail(stage, err):
    say(error=stage, message=str(err))
    os._exit(127)


def loopback_up():
    import fcntl, socket, struct
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0).ljust(40, b"\0")
        flags = struct.unpack_from("H", fcntl.ioctl(sock, 0x8913, request), 16)[0]
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH", b"lo", flags | 1).ljust(40, b"\0"))


applied = []
if cfg["netns"] and libc.unshare(0x40000000) == 0:
    applied.append("netns")
    try:
        loopback_up()
    except OSError:
        pass
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
    applied.append("uid")
denied = [path for path in cfg["check"] if not os.access(path, os.R_OK | os.X_OK)]
libc.prctl(38, 1, 0, 0, 0)
try:
    os.chdir(cfg["cwd"])
except OSError as err:
    fail("enter the working directory", err)
for sig in (signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(sig, signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_SETMASK, ())
libc.prctl(1, signal.SIGKILL, 0, 0, 0)
if os.getppid() != cfg["parent"]:
    os._exit(137)
say(applied=applied, denied=denied)
if cfg["probe"]:
    os._exit(0)
os.set_inheritable(status, False)
try:
    os.execv(cfg["exe"], sys.argv[2:])
except OSError as err:
    fail("exec", err)
"""
# The launcher's magic numbers: CLONE_NEWNET 0x40000000; SIOCGIFFLAGS 0x8913 and
# SIOCSIFFLAGS 0x8914 with IFF_UP 1 (a new namespace's loopback starts down);
# prctl 38 PR_SET_NO_NEW_PRIVS (setuid binaries cannot regain privileges) and
# prctl 1 PR_SET_PDEATHSIG (set after the uid change, which clears it: the
# command dies with the daemon).


@dataclass(frozen=True)
class _Plan:
    """The isolation to request; the launcher reports what it actually applied."""

    netns: bool
    ids: tuple[int, int] | None


def _rlimits(limits: Limits) -> list[tuple[str, int, int]]:
    # Core files of a crashing test would land in the workdir: never write them.
    wanted: list[tuple[str, int, int]] = [("RLIMIT_CORE", 0, 0)]
    if limits.cpu_s is not None:
        # One second between SIGXCPU and SIGKILL lets the command report it.
        wanted.append(("RLIMIT_CPU", limits.cpu_s, limits.cpu_s + 1))
    for name, value in (
        ("RLIMIT_AS", limits.memory_bytes),
        ("RLIMIT_FSIZE", limits.file_bytes),
        ("RLIMIT_NOFILE", limits.open_files),
    ):
        if value is not None:
            wanted.append((name, value, value))
    return wanted


@dataclass
class _Started:
    proc: subprocess.Popen[bytes]
    output: int  # read end of the merged stdout+stderr pipe
    applied: tuple[str, ...]
    denied: tuple[str, ...]  # paths of `check` the command's uid cannot read and search

    @property
    def pid(self) -> int:
        return self.proc.pid


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _launch(
    argv: Sequence[str],
    exe: str,
    cwd: Path,
    env: Mapping[str, str],
    limits: Limits | None,
    plan: _Plan,
    *,
    probe: bool = False,
    check: Sequence[str] = (),
) -> _Started:
    """Start the launcher and wait until it has exec'd the command (or failed to)."""
    status_r, status_w = os.pipe()
    out_r, out_w = os.pipe()
    cfg = {
        "status_fd": status_w,
        "parent": os.getpid(),
        "netns": plan.netns,
        "ids": plan.ids,
        "cwd": str(cwd),
        "exe": exe,
        "probe": probe,
        "check": list(check),
        "rlimits": _rlimits(limits) if limits else [],
    }
    # marshal, not json: the launcher is the same interpreter, and importing
    # json would cost it ~8 ms on every run.
    launcher = [sys.executable, "-I", "-S", "-B", "-c", _LAUNCHER, marshal.dumps(cfg).hex(), *argv]
    try:
        proc = subprocess.Popen(
            launcher,
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=out_w,
            env=dict(env),
            close_fds=True,
            pass_fds=(status_w,),
            start_new_session=True,
        )
    except OSError as err:
        os.close(status_r)
        os.close(out_r)
        raise SandboxError(f"cannot start the sandbox launcher: {err}") from err
    finally:
        os.close(status_w)
        os.close(out_w)
    try:
        messages = [
            marshal.loads(bytes.fromhex(line.decode())) for line in _read_all(status_r).splitlines()
        ]
    finally:
        os.close(status_r)
    failure = next((m for m in messages if "error" in m), None)
    if failure is None and messages:
        last = messages[-1]
        return _Started(proc, out_r, tuple(last["applied"]), tuple(last["denied"]))
    _reap(proc)
    try:
        said = _read_all(out_r).decode(errors="replace").strip()[-500:]
    finally:
        os.close(out_r)
    why = f"{failure['error']}: {failure['message']}" if failure else f"the launcher died: {said}"
    raise SandboxError(
        f"cannot start {argv[0]!r}: {why}",
        hint="check that the command and its working directory exist and are usable",
    )


def _reap(proc: subprocess.Popen[bytes]) -> tuple[int, resource.struct_rusage]:
    """Reap the launcher's pid (now the command) and return its wait status and rusage."""
    _, status, rusage = os.wait4(proc.pid, 0)
    # Popen did not reap it, so tell it the outcome; otherwise it warns the
    # process is still running when it is collected.
    proc.returncode = os.waitstatus_to_exitcode(status)
    return status, rusage


# -- host capabilities --------------------------------------------------------------------

_UNPRIVILEGED_USER = "nobody"
_probe_lock = threading.Lock()
_host: _Plan | None = None


def _unprivileged_ids() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(_UNPRIVILEGED_USER)
    except KeyError:
        return 65534, 65534
    return entry.pw_uid, entry.pw_gid


def _interpreter_paths() -> list[str]:
    """What a command needs to run the daemon's `python`, which PATH promises it."""
    paths = {os.path.realpath(sys.executable), sys.prefix, sys.base_prefix}
    paths.update(sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib"))
    return sorted(paths)


def _probe(plan: _Plan, check: Sequence[str] = ()) -> _Started | None:
    """What the launcher applies here under `plan`; None when it cannot run at all."""
    try:
        started = _launch(
            ["probe"], "", Path("/"), scrubbed_env(), None, plan, probe=True, check=check
        )
    except SandboxError:
        return None
    _reap(started.proc)
    os.close(started.output)
    return started


def _host_plan() -> _Plan:
    """Probe once, with a real launcher, what isolation this host allows.

    The unprivileged uid is used only if it can run the daemon's interpreter:
    otherwise every Python test would fail as that uid, whatever the patch.
    """
    global _host
    with _probe_lock:
        if _host is None:
            ids = _unprivileged_ids() if os.geteuid() == 0 else None
            probed = _probe(_Plan(netns=True, ids=ids), _interpreter_paths())
            if probed is None and ids is not None:
                ids = None  # no CAP_SETUID (a restricted container): keep the rest
                probed = _probe(_Plan(netns=True, ids=None))
            if probed is None:
                raise SandboxError("the sandbox launcher cannot run on this host")
            usable = "uid" in probed.applied and not probed.denied
            _host = _Plan(netns="netns" in probed.applied, ids=ids if usable else None)
        return _host


def _level(applied: Sequence[str]) -> str:
    return "+".join(["process", *(part for part in ("netns", "uid") if part in applied)])


def sandbox_level() -> str:
    """The strongest isolation this host allows, e.g. "process+netns+uid" (probed once).

    A single run may get less: see RunResult.level.
    """
    plan = _host_plan()
    return _level([*(["netns"] if plan.netns else []), *(["uid"] if plan.ids else [])])


# -- the unprivileged uid -----------------------------------------------------------------


def _permits(info: os.stat_result, ids: tuple[int, int], owned: bool, want: int) -> bool:
    """Whether `ids` get the permission bits `want` (4 r, 2 w, 1 x) on a file."""
    uid, gid = ids
    if owned or info.st_uid == uid:
        bits = info.st_mode >> 6
    elif info.st_gid == gid:
        bits = info.st_mode >> 3
    else:
        bits = info.st_mode
    return bits & want == want


def _within(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _reachable(path: Path, ids: tuple[int, int], owned: Sequence[Path], want: int) -> bool:
    """Whether `ids` can reach `path` and get `want` on it, once `owned` are chowned to them.

    Checks the mode bits along both the path as given and its resolved form;
    ACLs and capabilities are not considered.
    """
    try:
        for candidate in {path.absolute(), path.resolve(strict=True)}:
            for parent in reversed(candidate.parents):
                info = parent.stat()
                if not _permits(info, ids, _within(parent, owned), 1):
                    return False
            if not _permits(candidate.stat(), ids, _within(candidate, owned), want):
                return False
    except OSError:
        return False
    return True


def _chown_tree(root: Path, ids: tuple[int, int]) -> None:
    """Give `ids` the tree at `root`, never following a symlink.

    Files with more than one hard link keep their owner: they may share an
    inode with something outside the tree (a hard-linked pristine copy).
    """
    uid, gid = ids
    os.chown(root, uid, gid, follow_symlinks=False)
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in (*dirs, *files):
            path = os.path.join(top, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                continue
            os.chown(path, uid, gid, follow_symlinks=False)


def _uid_plan(
    ids: tuple[int, int], exe: Path, cwd: Path, writable: Sequence[Path], private: Path
) -> tuple[int, int] | None:
    """`ids` when the command can run as them, after chowning `writable` and `private`."""
    owned = [*writable, private]
    needed: list[tuple[Path, int]] = [(exe, 5), (cwd, 5)]
    needed += [(root.parent, 1) for root in owned]
    if not all(_reachable(path, ids, owned, want) for path, want in needed):
        return None
    try:
        for root in owned:
            _chown_tree(root, ids)
    except OSError:
        return None  # e.g. a root-squashed or read-only mount: run without the drop
    return ids


# -- supervising a running command --------------------------------------------------------

_POLL_S = 0.05  # exit polling interval where pidfds are not available
_DRAIN_GRACE_S = 2.0  # how long output may keep arriving after everything was killed
_KILL_PASSES = 20


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


def _exited(pid: int) -> bool:
    """Whether the command has exited, without reaping it (its pid stays reserved)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


@contextlib.contextmanager
def _exit_notifier(pid: int) -> Iterator[int | None]:
    """A pidfd that becomes readable when `pid` exits; None where the kernel has none."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _read_into(fd: int, tail: _Tail) -> bool:
    """Read what is available; False at end of file."""
    chunk = os.read(fd, 65536)
    tail.feed(chunk)
    return bool(chunk)


def _watch(pid: int, output: int, tail: _Tail, deadline: float) -> bool:
    """Collect output until the command exits or the deadline passes; True on timeout."""
    with selectors.DefaultSelector() as sel, _exit_notifier(pid) as pidfd:
        sel.register(output, selectors.EVENT_READ)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ)
        wait_s = None if pidfd is not None else _POLL_S
        while not _exited(pid):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            for key, _ in sel.select(min(remaining, wait_s or remaining)):
                if key.fd == output and not _read_into(output, tail):
                    sel.unregister(output)
    return False


def _drain(output: int, tail: _Tail) -> None:
    """Read the rest of the output; give up when nothing that could write is left."""
    deadline = time.monotonic() + _DRAIN_GRACE_S
    with selectors.DefaultSelector() as sel:
        sel.register(output, selectors.EVENT_READ)
        while (remaining := deadline - time.monotonic()) > 0:
            if sel.select(remaining) and not _read_into(output, tail):
                return


def _stat_fields(pid: int) -> tuple[bytes, int, int] | None:
    """(state, process group, session) of `pid`, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()  # the command name may contain anything
    return fields[0], int(fields[2]), int(fields[3])


def _belongs(pid: int, leader: int, netns: str | None) -> bool:
    fields = _stat_fields(pid)
    if fields is None or fields[0] == b"Z":  # a zombie is already dead
        return False
    if leader in fields[1:]:
        return True
    if netns is None:
        return False
    try:
        # Catches what called setsid() to leave the session; leaving the namespace too
        # would take a user namespace of its own.
        return os.readlink(f"/proc/{pid}/ns/net") == netns
    except OSError:
        return False


def _strays(leader: int, netns: str | None) -> list[int]:
    me = os.getpid()
    with os.scandir("/proc") as entries:
        pids = [int(entry.name) for entry in entries if entry.name.isdigit()]
    return [pid for pid in pids if pid not in (me, leader) and _belongs(pid, leader, netns)]


def _kill(pid: int, leader: int, netns: str | None) -> None:
    """SIGKILL `pid`, re-checking through a pidfd that the pid was not reused meanwhile."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        return
    try:
        if _belongs(pid, leader, netns):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


def _kill_everything(leader: int, netns: str | None) -> None:
    """SIGKILL the command's process group, session and network namespace.

    The leader is not reaped yet, so its pid cannot have been reused.
    """
    with contextlib.suppress(OSError):
        os.killpg(leader, signal.SIGKILL)
    for _ in range(_KILL_PASSES):  # each pass also catches what forked during the last
        strays = _strays(leader, netns)
        if not strays:
            return
        for pid in strays:
            _kill(pid, leader, netns)


def _namespace(pid: int, applied: Sequence[str]) -> str | None:
    """The command's network namespace when it is private to the command."""
    if "netns" not in applied:
        return None
    try:
        theirs = os.readlink(f"/proc/{pid}/ns/net")
        return theirs if theirs != os.readlink("/proc/self/ns/net") else None
    except OSError:
        return None


# -- running ------------------------------------------------------------------------------


def _resolve(program: str, cwd: Path, path_var: str) -> Path:
    if "/" in program:
        exe = cwd / program
    else:
        found = shutil.which(program, path=path_var)
        if found is None:
            raise SandboxError(
                f"cannot start {program!r}: executable not found",
                hint=f"the sandbox PATH is {path_var}",
            )
        exe = Path(found)
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        raise SandboxError(f"cannot start {program!r}: {exe} is not an executable file")
    return exe


def _remove_tree(root: Path) -> None:
    """Remove a tree the command wrote to, even where it took permissions away."""
    shutil.rmtree(root, ignore_errors=True)
    if not root.exists():
        return
    for top, dirs, _ in os.walk(root):
        for name in dirs:
            path = os.path.join(top, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)
    shutil.rmtree(root, ignore_errors=True)


def _private_dirs(root: Path) -> dict[str, str]:
    home, tmp = root / "home", root / "tmp"
    home.mkdir()
    tmp.mkdir()
    return {"HOME": str(home), "TMPDIR": str(tmp)}


def run(
    argv: Sequence[str],
    cwd: Path,
    *,
    limits: Limits,
    env: Mapping[str, str] | None = None,
    writable: Sequence[Path] = (),
) -> RunResult:
    """Run `argv` in `cwd` in the sandbox and collect its outcome.

    `env` is layered over `scrubbed_env()` and a private HOME and TMPDIR. When
    the daemon runs as root and the unprivileged uid can reach the executable
    and `cwd`, the command runs as that uid and every path in `writable` (which
    must exist) is chowned to it first, recursively; otherwise it runs as the
    daemon's user and `writable` is left alone. Raises SandboxError only when
    the command cannot be started; a nonzero exit is a result.
    """
    if not argv:
        raise SandboxError("cannot start an empty command")
    if not cwd.is_dir():
        raise SandboxError(f"cannot start {argv[0]!r}: working directory {cwd} does not exist")
    missing = [str(p) for p in writable if not p.exists()]
    if missing:
        raise SandboxError(f"writable paths do not exist: {', '.join(missing)}")
    owned = [Path(p).resolve() for p in writable]  # chown the directories, not links to them
    host = _host_plan()
    private = Path(tempfile.mkdtemp(prefix="jouled-run-")).resolve()
    try:
        full_env = {**scrubbed_env(), **_private_dirs(private), **(env or {})}
        exe = _resolve(argv[0], cwd, full_env.get("PATH", ""))
        ids = None
        if host.ids is not None:
            ids = _uid_plan(host.ids, exe, cwd, owned, private)
        plan = _Plan(netns=host.netns, ids=ids)
        return _run_started(argv, exe, cwd, full_env, limits, plan)
    finally:
        _remove_tree(private)


def _run_started(
    argv: Sequence[str], exe: Path, cwd: Path, env: Mapping[str, str], limits: Limits, plan: _Plan
) -> RunResult:
    """Launch, watch, clean up after and account for one command."""
    begin = time.monotonic_ns()
    started = _launch(argv, str(exe), cwd, env, limits, plan)
    tail = _Tail(limits.output_bytes)
    try:
        netns = _namespace(started.pid, started.applied)
        timed_out = _watch(started.pid, started.output, tail, time.monotonic() + limits.timeout_s)
        # Also after a normal exit: leftovers would hold the output pipe open.
        _kill_everything(started.pid, netns)
        status, rusage = _reap(started.proc)
        wall_ns = time.monotonic_ns() - begin
        _drain(started.output, tail)
    finally:
        if started.proc.returncode is None:
            _kill_everything(started.pid, None)
            _reap(started.proc)
        os.close(started.output)
    signalled = os.WIFSIGNALED(status)
    return RunResult(
        argv=tuple(argv),
        exit_code=None if signalled else os.WEXITSTATUS(status),
        signal=os.WTERMSIG(status) if signalled else None,
        timed_out=timed_out,
        wall_ns=wall_ns,
        cpu_ns=round((rusage.ru_utime + rusage.ru_stime) * 1e9),
        output=tail.text(),
        level=_level(started.applied),
        output_dropped=tail.dropped,
    )
