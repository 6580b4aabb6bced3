"""Attacks on what attempts share: the disk, the daemon's memory, the kernel, the host.

Each attack runs against real `jouled serve` subprocesses (copied tasks,
throw-away data dirs) and proves it ran with marker lines in the graded run's
output (see attacks.py), or, for a hosted solver, by what it left for the
daemon to read:

- a patch whose tests fill their writable space is stopped at the attempt's
  bound (a tmpfs of --attempt-disk-mb, or, where there is none, the data
  dir's free-space floor), signed `resource: disk`; the next correct fix is
  still graded;
- a hosted solver that writes far more than a patch can carry is refused
  clearly, without the daemon ever holding its work in memory;
- a test that asks for a user namespace of its own does not get one;
- two daemons on one host run their attempts under distinct uids and cgroups.
"""

from __future__ import annotations

import base64
import ctypes
import errno
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jb_client.api import Client
from jb_client.errors import ClientError

from jouled.errors import Kind
from jouled.pipeline.sandbox import BWRAP, host

from . import attacks as A
from .conftest import Daemon, start_daemon

if host().level != BWRAP:
    pytest.skip(
        f"this host gives only the {host().level!r} sandbox level: {host().lacking}",
        allow_module_level=True,
    )

DISK_MB = 24  # the attempts' tmpfs in the first daemon: small, so the attack is cheap


def body(receipt: dict[str, Any]) -> dict[str, Any]:
    return json.loads(base64.b64decode(receipt["entry"]["payload"]))["body"]


def submit(daemon: Daemon, task: A.TaskInfo, patch: bytes) -> dict[str, Any]:
    with Client(daemon.target, timeout_s=600) as client:
        return client.submit(task.task_id, patch).to_dict()


def attack(daemon: Daemon, tasks: Path, source: str, **cfg: Any) -> tuple[dict[str, Any], str]:
    """Submit a patch appending `source` (a payload body) to lrucache; its receipt and token."""
    token = A.new_token()
    payload = A.payload(source, {"token": token, **cfg})
    patch = A.build_patch(A.LRUCACHE.dir(tasks), append={A.LRUCACHE.library: payload})
    return submit(daemon, A.LRUCACHE, patch), token


def markers(receipt: dict[str, Any], token: str, *probes: str) -> dict[str, str]:
    """The payload's markers, after checking that it ran and reported `probes`."""
    found = A.markers(str(receipt.get("output_tail", "")), token)
    why = f"{json.dumps(found, indent=1)}\n{str(receipt.get('output_tail', ''))[-3000:]}"
    assert "ran" in found, f"the payload did not run\n{why}"
    assert "crash" not in found, f"the payload crashed\n{why}"
    missing = [p for p in probes if p not in found]
    assert not missing, f"the payload never reported {missing}\n{why}"
    return found


def correct_fix(daemon: Daemon, tasks: Path) -> str:
    patch = A.build_patch(A.LRUCACHE.dir(tasks), fix=True)
    return str(submit(daemon, A.LRUCACHE, patch)["status"])


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Path]]:
    root = tmp_path_factory.mktemp("attack-resources")
    tasks = A.copy_tasks(root / "tasks")
    d = start_daemon(root / "data", "--attempt-disk-mb", str(DISK_MB), tasks=tasks)
    yield d, tasks
    assert d.stop() == 0, d.log.read_text()


# -- disk -------------------------------------------------------------------------------------

# Writes 1 MiB chunks into files in the working directory (the attempt's tree) until
# CFG["megabytes"] are written or the file system refuses; says which.
FILL = r"""
def fill():
    chunk = b"x" * (1 << 20)
    written = 0
    try:
        for n in range(CFG["megabytes"] // 64 + 1):
            with open("jbattack-fill-%d.bin" % n, "wb", buffering=0) as fh:
                for _ in range(64):
                    if written >= CFG["megabytes"]:
                        return "wrote=%d" % written
                    fh.write(chunk)
                    written += 1
                    emit("disk-progress", "OK", "wrote=%d" % written)
    except OSError as err:
        return "stopped=%d;errno=%s" % (written, err.errno)
    return "wrote=%d" % written

attempt("disk-fill", fill)
"""


def test_filling_the_writable_space_stops_at_the_bound(arena: tuple[Daemon, Path]) -> None:
    daemon, tasks = arena
    receipt, token = attack(daemon, tasks, FILL, megabytes=4 * DISK_MB)
    found = markers(receipt, token, "disk-fill")
    detail = A.detail(found["disk-fill"])
    assert detail.startswith("stopped="), f"the payload wrote all it wanted: {detail}"
    written = int(detail.split(";")[0].removeprefix("stopped="))
    assert written <= DISK_MB, f"wrote {written} MiB past a {DISK_MB} MiB bound"
    assert detail.endswith(f"errno={errno.ENOSPC}"), detail
    isolation = body(receipt)["isolation"]
    assert isolation["disk"] == {"bound": "tmpfs", "bytes": DISK_MB << 20}, isolation
    assert isolation["resource"] == "disk", isolation
    assert receipt["status"] == "unresolved"
    # Nothing of the attempt is left in the data dir, and the next agent's fix is graded.
    assert not list((daemon.data_dir / "work").iterdir())
    assert correct_fix(daemon, tasks) == "resolved"


def test_a_tree_larger_than_the_writable_space_is_refused_clearly(tmp_path: Path) -> None:
    tasks = A.copy_tasks(tmp_path / "tasks")
    (A.LRUCACHE.dir(tasks) / "before" / "data.txt").write_text("x" * (3 << 20))
    daemon = start_daemon(tmp_path / "data", "--attempt-disk-mb", "2", tasks=tasks)
    try:
        patch = A.build_patch(A.LRUCACHE.dir(tasks), fix=True)
        size = daemon.ledger_size()
        with Client(daemon.target, timeout_s=600) as client, pytest.raises(ClientError) as err:
            client.submit(A.LRUCACHE.task_id, patch, idempotency_key="too-big")
        assert err.value.kind == Kind.RESOURCE_EXHAUSTED, err.value
        assert "does not fit an attempt's writable space of 2 MiB" in err.value.message
        assert "raise the daemon's --attempt-disk-mb" in err.value.hint
        assert daemon.ledger_size() == size, "something was recorded for the refused attempt"
    finally:
        daemon.stop()


def _mount_tmpfs(path: Path, size: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"size={size},mode=0700".encode()
    return libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", 6, options) == 0


def test_without_a_tmpfs_a_run_is_killed_at_the_free_space_floor(tmp_path: Path) -> None:
    """The data dir on a small file system of its own (a tmpfs standing in for the disk)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or not _mount_tmpfs(disk, 160 << 20):
        pytest.skip("needs root and mount(2) to give the data dir a small file system")
    daemon = None
    try:
        tasks = A.copy_tasks(tmp_path / "tasks")
        daemon = start_daemon(
            disk / "data", "--attempt-disk-mb", "0", "--min-free-mb", "64", tasks=tasks
        )
        receipt, token = attack(daemon, tasks, FILL, megabytes=150)
        found = markers(receipt, token, "disk-progress")
        assert "disk-fill" not in found or A.detail(found["disk-fill"]).startswith("stopped")
        isolation = body(receipt)["isolation"]
        assert isolation["disk"] == {"bound": "free-space floor", "bytes": 64 << 20}
        assert isolation["resource"] == "disk", isolation
        assert receipt["status"] in ("unresolved", "timeout")
        assert shutil.disk_usage(disk).free >= 64 << 20, "the attempt's files were left behind"
        assert correct_fix(daemon, tasks) == "resolved"
    finally:
        if daemon is not None and daemon.proc.poll() is None:
            daemon.stop()
        ctypes.CDLL(None, use_errno=True).umount2(str(disk).encode(), 2)


# -- a hosted solver's work, read back ------------------------------------------------------

# A hosted "agent" that writes a huge text file (and a real fix) into its workdir.
HOARDER = """\
import sys
with open("generated.txt", "w") as fh:
    line = "generated line that no patch should carry\\n"
    for _ in range(int(sys.argv[1]) * (1 << 20) // len(line)):
        fh.write(line)
print("hoarded", sys.argv[1], "MiB", flush=True)
"""


def _vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmHWM")


def test_a_solver_that_writes_a_lot_is_refused_without_the_daemon_holding_it(
    tmp_path: Path,
) -> None:
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "hoarder.py").write_text(HOARDER)
    for path in (agent, agent / "hoarder.py"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    megabytes = 200
    solvers = tmp_path / "solvers.toml"
    solvers.write_text(
        "[solvers.hoarder]\n"
        f'argv = ["{sys.executable}", "{agent / "hoarder.py"}", "{megabytes}"]\n'
        "timeout_s = 300\n"
        'network = "none"\n'
        f'paths = ["{agent}"]\n'
    )
    tasks = A.copy_tasks(tmp_path / "tasks")
    daemon = start_daemon(
        tmp_path / "data", "--solvers", str(solvers), "--attempt-disk-mb", "512", tasks=tasks
    )
    try:
        with Client(daemon.target, timeout_s=600) as client:
            # The task's baseline first, so the figure below is the solver's alone.
            client.run_solver(A.LRUCACHE.task_id, "noop", run_id="warm")
            before = _vm_hwm(daemon.proc.pid)
            receipt = client.run_solver(A.LRUCACHE.task_id, "hoarder", run_id="hoard").to_dict()
        peak = _vm_hwm(daemon.proc.pid)
        result = body(receipt)
        assert result["solve"]["exit_code"] == 0, result["solve"]
        # A diff held in memory reads the whole file, decodes it and splits it into lines:
        # several times its size. The bounded one reads none of it.
        assert peak - before < 64 << 20, (
            f"the daemon's peak RSS grew by {(peak - before) >> 20} MiB reading the solver's work"
        )
        assert peak < 256 << 20, f"the daemon's peak RSS is {peak >> 20} MiB (README: 256)"
        assert receipt["status"] == "unresolved"
        refused = result.get("refused", "")
        assert "generated.txt" in refused and "bounded to" in refused, result
        assert correct_fix(daemon, tasks) == "resolved"
    finally:
        daemon.stop()


# -- nested user namespaces -----------------------------------------------------------------

# Asks for a user namespace three ways from inside the graded run: the unshare(1)
# command, and unshare(2) and clone(2) with CLONE_NEWUSER from a child interpreter
# (the test process's own monitor refuses ctypes; a child has no monitor).
USERNS = r"""
import subprocess

CHILD = '''
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
NEWUSER = 0x10000000
if sys.argv[1] == "unshare":
    if libc.unshare(NEWUSER) != 0:
        sys.exit("unshare: " + os.strerror(ctypes.get_errno()))
    print(open("/proc/self/uid_map").read().strip())
else:
    libc.syscall.restype = ctypes.c_long
    nr = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
    pid = libc.syscall(nr, NEWUSER | signal.SIGCHLD, 0, 0, 0, 0)
    if pid < 0:
        sys.exit("clone: " + os.strerror(ctypes.get_errno()))
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("child", pid)
'''

def probe(name, argv):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except Exception as err:
        emit(name, "ERR", repr(err))
        return
    said = (done.stdout + done.stderr).strip()[-200:]
    emit(name, "OK" if done.returncode == 0 else "denied", said)

probe("userns-command", ["unshare", "--user", "--map-root-user", "id", "-u"])
probe("userns-unshare", [sys.executable, "-I", "-c", CHILD, "unshare"])
probe("userns-clone", [sys.executable, "-I", "-c", CHILD, "clone"])
"""


def test_a_run_cannot_make_a_user_namespace(arena: tuple[Daemon, Path]) -> None:
    daemon, tasks = arena
    receipt, token = attack(daemon, tasks, USERNS)
    found = markers(receipt, token, "userns-command", "userns-unshare", "userns-clone")
    made = A.succeeded(found, "userns-")
    assert not made, f"the payload made a user namespace: {made}"
    for probe in ("userns-command", "userns-unshare", "userns-clone"):
        assert A.verdict(found[probe]) == "denied", found[probe]
    for probe in ("userns-unshare", "userns-clone"):
        assert "Operation not permitted" in found[probe], found[probe]
    isolation = body(receipt)["isolation"]
    assert isolation["nested_userns"] in ("seccomp", "disable-userns"), isolation


# -- several daemons on one host ------------------------------------------------------------

WHO = r"""
def who():
    groups = [line.strip() for line in open("/proc/self/cgroup")]
    return "uid=%d;cgroup=%s" % (os.getuid(), "|".join(groups))

attempt("who", who)
"""


def test_two_daemons_never_share_uids_or_cgroups(
    arena: tuple[Daemon, Path], tmp_path: Path
) -> None:
    first, tasks = arena
    second = start_daemon(tmp_path / "data", tasks=tasks)
    try:
        seen = []
        for daemon in (first, second):
            receipt, token = attack(daemon, tasks, WHO)
            found = markers(receipt, token, "who")
            fields = dict(part.split("=", 1) for part in A.detail(found["who"]).split(";"))
            seen.append((int(fields["uid"]), body(receipt)["isolation"]))
    finally:
        second.stop()
    (uid_a, iso_a), (uid_b, iso_b) = seen
    assert iso_a["instance"] != iso_b["instance"], (iso_a, iso_b)
    if iso_a["uid"] == "pooled":  # a root daemon: each run a uid of its daemon's own block
        (lo_a, hi_a), (lo_b, hi_b) = iso_a["uids"], iso_b["uids"]
        assert lo_a <= uid_a <= hi_a and lo_b <= uid_b <= hi_b, (uid_a, iso_a, uid_b, iso_b)
        assert hi_a < lo_b or hi_b < lo_a, f"the uid blocks overlap: {iso_a} {iso_b}"
    if iso_a["cgroup"] is None:
        pytest.skip("this host delegates no cgroup: only the uids could be compared")
    assert iso_a["cgroup_name"] != iso_b["cgroup_name"], (iso_a, iso_b)
    assert iso_a["instance"] in iso_a["cgroup_name"], iso_a
    assert iso_b["instance"] in iso_b["cgroup_name"], iso_b
