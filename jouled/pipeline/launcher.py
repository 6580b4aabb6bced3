"""Starting and supervising one command: the launcher inside, the watch outside.

The launcher (`python -I -S`, nothing of the tree on its path) sets the rlimits
and drops to the run's uid before exec'ing the command, reporting what it
applied on a pipe that closes when the exec succeeds. Outside, `run_started`
keeps the output's tail and the side channel's, kills the whole sandbox at the
deadline or when the writable space takes the host's floor, and accounts for
the run in a `RunResult`.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jouled.errors import SandboxError
from jouled.meter.estimator import add_sandboxed_cpu
from jouled.pipeline.cgroup import Group
from jouled.pipeline.limits import Limits, RunResult
from jouled.pipeline.scratch import FLOOR, Space, space_of
from jouled.pipeline.seccomp import no_new_userns

# The side channels a command may be given, at fixed descriptor numbers.
CHANNEL_IN_FD, CHANNEL_OUT_FD = 3, 4
CHANNEL_MAX_BYTES = 64 << 20


# Runs as `python -I -S -B -c`: no site-packages, no environment variables, no
# working directory on sys.path, so nothing the command can write affects it.
LAUNCHER = r"""
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


def seal(program):
    # Close the run's processes' memory to one another and to themselves (see SEAL).
    import ctypes
    import stat
    import struct

    lib = ctypes.CDLL(None, use_errno=True)
    lib.syscall.restype = ctypes.c_long

    def why(what):
        return "open: %s: %s" % (what, os.strerror(ctypes.get_errno()))

    if not program:
        return "open: no seccomp filter for this machine"

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = ctypes.create_string_buffer(program, len(program))
    if lib.prctl(22, 2, ctypes.byref(Prog(len(program) // 8, ctypes.addressof(code))), 0, 0):
        return why("seccomp")
    if lib.syscall(444, None, 0, 1) < 1:
        return why("landlock")
    handled = ctypes.c_uint64(6)  # LANDLOCK_ACCESS_FS_WRITE_FILE | _READ_FILE
    ruleset = lib.syscall(444, ctypes.byref(handled), 8, 0)
    if ruleset < 0:
        return why("landlock")

    def allow(path):
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return ""
        try:
            rule = ctypes.create_string_buffer(struct.pack("=Qi", 6, fd), 12)
            return "" if lib.syscall(445, ruleset, 1, rule, 0) == 0 else why("landlock " + path)
        finally:
            os.close(fd)

    paths = []
    for name in os.listdir("/"):
        real = os.path.realpath("/" + name)
        if name != "proc" and real != "/" and real != "/proc" and not real.startswith("/proc/"):
            paths.append("/" + name)
    for name in os.listdir("/proc"):
        pid_dir = name.isdigit() or name in ("self", "thread-self")
        if not pid_dir and not os.path.islink("/proc/" + name):
            paths.append("/proc/" + name)
    own = "/proc/%d/" % os.getpid()
    for name in os.listdir(own):
        plain = stat.S_ISREG(os.lstat(own + name).st_mode)
        if name != "mem" and (plain or name in ("net", "fdinfo")):
            paths.append(own + name)
    for path in paths:
        failed = allow(path)
        if failed:
            return failed
    if lib.syscall(446, ruleset, 0):
        return why("landlock")
    os.close(ruleset)
    return "sealed"


memory = seal(cfg["seal"]) if cfg.get("seal") is not None else ""
say(uid=os.getuid(), caps=caps[0] if caps else "", memory=memory)
if cfg["probe"]:
    os._exit(0)
try:
    os.execv(cfg["exe"], sys.argv[2:])
except OSError as err:
    fail("exec", err)
"""
# SEAL: a graded run's test process holds the monitor, its key and the code it checks,
# so no process of the run may read or write it. `seal` loads a seccomp filter refusing
# ptrace and process_vm_readv/writev (prctl 22 PR_SET_SECCOMP, mode 2 a filter), and a
# Landlock ruleset (syscalls 444 create, 445 add a rule, 446 restrict self; the same
# numbers on every architecture) under which files may be read and written only beneath
# every top-level directory but /proc, the global entries of /proc, and the launcher's
# own /proc/<pid> files but `mem` (the pid the test process keeps across exec): no
# process of the run, nor the test process itself, opens any /proc/<pid>/mem, by any
# name. Both hold across exec and for everything the run starts. The launcher reports
# "sealed", or "open: <why>" where the kernel lacks either.
# The launcher's magic numbers: prctl 38 PR_SET_NO_NEW_PRIVS (setuid binaries
# cannot regain privileges) and prctl 1 PR_SET_PDEATHSIG (set after the uid
# change, which clears it: in the process level, the command dies with the daemon).


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


_PIPE_BUFFER = 65536  # what a pipe holds before a write waits for its reader


def _feed(fd: int, data: bytes) -> None:
    """Write `data` into a pipe the command reads as it starts, then close it."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # the command ended before it read everything: it fails on its own
    finally:
        os.close(fd)


def run_started(
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
    cpu_before = group.cpu_ns() if group is not None else None
    cpu_after: int | None = None
    status_r, status_w = pipes.pipe()
    out_r, out_w = pipes.pipe()
    passed = [status_w]
    moves: list[tuple[int, int]] = []
    if channel_in is not None:
        in_r, in_w = pipes.pipe()
        if len(channel_in) <= _PIPE_BUFFER:
            os.write(in_w, channel_in)
            pipes.close(in_w)
        else:  # a setup with sealed test files: fed as the command reads it
            pipes.fds.remove(in_w)
            threading.Thread(target=_feed, args=(in_w, channel_in), daemon=True).start()
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
    launcher = [sys.executable, "-I", "-S", "-B", "-c", LAUNCHER, marshal.dumps(cfg).hex()]
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
        if message.get("memory"):
            isolation["memory"] = message["memory"]
        disk = _Disk(space_of(Path(cfg["workdir"])))
        timed_out = _watch(proc.pid, streams, time.monotonic() + limits.timeout_s, disk)
        # Also after a normal exit: leftovers would hold the output pipe open.
        _kill(proc, init)
        status, rusage = _reap(proc)
        _wait_gone(init)
        wall_ns = time.monotonic_ns() - begin
        if group is not None and cpu_before is not None:
            cpu_after = group.cpu_ns()
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
    # bwrap's pid 1 reaps the command, and bwrap exits without reaping its pid 1, so
    # `wait4` counts bwrap alone: the run's CPU is the cgroup's, where there is one.
    if cpu_before is not None and cpu_after is not None:
        cpu_ns, counted = cpu_after - cpu_before, "cgroup"
        add_sandboxed_cpu(cpu_ns)  # for an estimate by CPU time
    else:
        cpu_ns = round((rusage.ru_utime + rusage.ru_stime) * 1e9)
        counted = "uncounted" if prefix else "wait4"
    isolation = {**isolation, "cpu": counted}
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
        cpu_ns=cpu_ns,
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
