"""The graded test process's memory, closed to every process of the run and to itself.

A run of the daemon's runner (the monitor's channel open) is sealed by its launcher:
no process of the run reads or writes any `/proc/<pid>/mem`, by any name, and none
may `ptrace` or `process_vm_readv` another. Each door below is tried from inside a real
graded run (the library the tests import opens it), proved to have been tried (a
marker), and must be shut; the monitor signs `monitor` only where the kernel shut it.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from jouled.pipeline import seccomp
from jouled.pipeline.graded_tree import read_only_native
from jouled.pipeline.jouled_monitor import memory_file, run_could_write
from jouled.pipeline.verdicts import sealed_level
from tests.pipeline.test_pytest_run import run_plan, run_tree, write_tree

# Each door is tried as the library is imported; a marker line says what it got.
LIBRARY = r'''
import os, subprocess, sys, tempfile

VALUE = 1

def _door(name, fn):
    try:
        print("JBDOOR", name, "open", fn(), flush=True)
    except BaseException as err:
        print("JBDOOR", name, "shut", type(err).__name__, flush=True)

def _link():
    link = os.path.join(tempfile.mkdtemp(), "scratch.bin")
    os.symlink("/proc/self/mem", link)
    return len(open(link, "rb").read(0) or b"x")

def _relative():
    os.chdir("/proc/self")
    try:
        return os.open("mem", os.O_RDONLY)
    finally:
        os.chdir("/")

CHILD = """
import ctypes, os, sys
parent = int(sys.argv[1])
which = sys.argv[2]
if which == "mem":
    open("/proc/%d/mem" % parent, "rb")
elif which == "vm":
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
    remote = (ctypes.c_void_p * 2)(int(sys.argv[3]), 8)
    if libc.process_vm_readv(parent, local, 1, remote, 1, 0) < 0:
        raise PermissionError(ctypes.get_errno())
elif which == "ptrace":
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, parent, None, None) < 0:  # PTRACE_ATTACH
        raise PermissionError(ctypes.get_errno())
"""

def _child(which):
    argv = [sys.executable, "-I", "-c", CHILD, str(os.getpid()), which, str(id(VALUE))]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise PermissionError(done.stderr.strip().splitlines()[-1])
    return "read"

_door("self-link", _link)
_door("self-relative", _relative)
_door("child-mem", lambda: _child("mem"))
_door("child-process-vm", lambda: _child("vm"))
_door("child-ptrace", lambda: _child("ptrace"))
'''
FILES = {
    "pytest.ini": "[pytest]\n",
    "mypkg/__init__.py": "VALUE = 1\n",
    "tests/test_a.py": "import mypkg\n\n\ndef test_v():\n    assert mypkg.VALUE == 1\n",
}
DOOR_NAMES = ("self-link", "self-relative", "child-mem", "child-process-vm", "child-ptrace")


def test_every_door_to_the_test_process_memory_is_shut(scratch: Path) -> None:
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    _, result, channel = run_plan(scratch, FILES, cmd, added={"mypkg/__init__.py": LIBRARY})
    doors = {
        line.split()[1]: line.split()[2]
        for line in result.output.splitlines()
        if line.startswith("JBDOOR ")
    }
    assert set(doors) == set(DOOR_NAMES), result.output  # each door was tried
    if result.isolation.get("memory") != "sealed":
        pytest.skip(f"this kernel cannot seal a run's memory: {result.isolation.get('memory')}")
    assert all(state == "shut" for state in doors.values()), doors
    assert channel.integrity == "monitor", channel
    # the relative spelling is also refused by the monitor, which names it
    assert any("mem was opened" in why for why in channel.forged), channel.forged


def test_an_unsealed_run_is_reduced() -> None:
    assert sealed_level("monitor", {"memory": "sealed"}) == "monitor"
    assert sealed_level("monitor", {"memory": "open: landlock: Function not implemented"}) == (
        "reduced"
    )
    assert sealed_level("monitor", {}) == "reduced"
    assert sealed_level("none", {}) == "none"


@pytest.mark.parametrize(
    "path",
    ["/proc/self/mem", "//proc/self/mem", "/dev/../proc/1/mem", "/proc/self/task/7/mem"],
)
def test_a_memory_file_is_named_however_spelled(path: str) -> None:
    assert memory_file(path)


def test_a_relative_memory_file_is_named_from_the_working_directory() -> None:
    here = os.getcwd()
    os.chdir("/proc/self")
    try:
        assert memory_file("mem") and memory_file("./task/../mem")
    finally:
        os.chdir(here)
    assert not memory_file("/proc/self/status") and not memory_file("/tmp/mem.txt")


def test_native_code_the_run_could_write_is_told_apart(tmp_path: Path) -> None:
    mine = tmp_path / "ext.so"
    mine.write_bytes(b"\x7fELF")
    assert run_could_write(str(mine))
    assert run_could_write(str(tmp_path / "missing.so"))
    system = Path(struct.__file__)  # the interpreter's own library, not the test's
    if os.geteuid() != 0 and system.stat().st_uid != os.getuid():
        assert not run_could_write(str(system))


def test_the_graded_run_filter_is_well_formed_and_refuses_memory_and_key_calls() -> None:
    for machine in ("x86_64", "aarch64"):
        program = seccomp.graded_run_filter(machine)
        assert program is not None and len(program) % 8 == 0
        ops = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
        assert ops[-1][0] == 0x06
        jumps = [(i, jt, jf) for i, (code, jt, jf, _) in enumerate(ops) if code & 0x07 == 0x05]
        assert jumps and all(i + 1 + max(jt, jf) < len(ops) for i, jt, jf in jumps)
        compared = {k for code, _, _, k in ops if code == 0x15}
        assert {101, 310, 311, 248, 249, 250} <= compared or {
            117,
            270,
            271,
            217,
            218,
            219,
        } <= compared
    assert seccomp.graded_run_filter("s390x") is None


# A compiled checkout: the tests import an extension module that lies inside the tree.
COMPILED_INIT = """import importlib.util, os

here = os.path.dirname(__file__)
spec = importlib.util.spec_from_file_location("_json", os.path.join(here, {name!r}))
importlib.util.module_from_spec(spec)
VALUE = 1
"""


def test_a_compiled_checkout_loads_only_with_its_native_files_read_only(scratch: Path) -> None:
    import _json

    ext = Path(_json.__file__)
    files = {**FILES, "mypkg/__init__.py": COMPILED_INIT.format(name=ext.name)}
    trees = [write_tree(scratch / name, files) for name in ("pristine", "tree")]
    for tree in trees:
        shutil.copy(ext, tree / "mypkg" / ext.name)
    pristine, tree = trees
    native = read_only_native(tree, pristine)
    assert f"mypkg/{ext.name}" in native
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    _, _, writable = run_tree(tree, scratch / "ro-writable", cmd, pristine=pristine)
    _, _, mounted = run_tree(tree, scratch / "ro-mounted", cmd, pristine=pristine, read_only=native)
    # writable, it could be the run's own: refused, naming the file
    assert any("a file the run could write, was loaded" in w for w in writable.forged)
    # mounted read-only over itself (as the evaluator does): it loads, nothing is found
    assert not mounted.forged, mounted.forged
    assert mounted.outcomes["tests/test_a.py::test_v"] == "passed"
