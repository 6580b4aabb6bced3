"""Bytecode of the patch's own making, a way to the process's memory CPython leaves open.

CPython does not verify bytecode: a code object whose `LOAD_CONST` reads past its
constants takes any address as an object. The patch's library below makes one
(`code.replace`), points it at a fake `bytearray` spanning the address space, and
writes one byte of an immutable bytes object; the same code made in a thread the
patch starts on the standard library (none of its frames on that thread's stack), and
in a frame of the patch's compiling named as the import system's loader; and
bytecode the patch edited by hand, loaded through the import system's own loader for
bytecode files from a file it wrote, or from a loader of its own that feeds it. Each
payload proves it ran (a marker line) and must be refused, the run `tampered`; code the
compiler made from source, and a code object the environment's libraries rename, still
run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jouled.pipeline.testreport import PASSED
from tests.integration import attacks as A
from tests.pipeline.test_pytest_run import run_plan

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="the payload's bytecode is Python 3.11's and later"
)

EXPLOIT = (
    A.OOB_MEMORY
    + r"""
import dis, marshal, os, struct, sys, tempfile

VALUE = 1

def _door(name, fn):
    try:
        print("JBDOOR", name, fn(), flush=True)
    except BaseException as err:
        print("JBDOOR", name, "error", type(err).__name__, str(err)[:200], flush=True)

def _victim():
    return ("JB-" + "UNTOUCHED").encode()

def _write(memory):
    victim = _victim()
    memory[id(victim) + bytes.__basicsize__ - 1 + 3] = ord("X")
    return victim.decode()

def _own():
    memory, keep = oob_memory(lambda c, b, k: c.replace(co_code=b, co_consts=k))
    return _write(memory)

def _thread():
    from concurrent.futures import ThreadPoolExecutor

    def made_in_a_thread(c, b, k):
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(c.replace, co_code=b, co_consts=k).result()

    memory, keep = oob_memory(made_in_a_thread)
    return _write(memory)

def _frozen():
    # Made in a frame of the patch's own compiling that passes for the import system's
    # loader unmarshalling a module (its file and function named as that one's).
    namespace = {}
    source = "def get_code(c, b, k):\n    return c.replace(co_code=b, co_consts=k)\n"
    exec(compile(source, "<frozen importlib._bootstrap_external>", "exec"), namespace)
    memory, keep = oob_memory(namespace["get_code"])
    return _write(memory)

def _sourceless():
    import importlib.machinery, importlib.util

    code = compile("RESULT = 'compiled'", "jbhand", "exec")
    data = marshal.dumps(code)
    first = bytes([dis.opmap["LOAD_CONST"], 0])
    at = data.index(first)  # the first LOAD_CONST: now it loads None instead
    data = data[:at] + bytes([dis.opmap["LOAD_CONST"], 1]) + data[at + 2 :]
    header = importlib.util.MAGIC_NUMBER + b"\0" * 12
    path = os.path.join(tempfile.mkdtemp(), "jbhand.bin")
    with open(path, "wb") as out:
        out.write(header + data)
    return _load(importlib.machinery.SourcelessFileLoader("jbhand", path))

def _load(loader):
    import importlib.util

    spec = importlib.util.spec_from_loader("jbhand", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return "ran:%r" % (module.RESULT,)

def _fitted():
    # The bytes come from the loader's own get_data; its path is a file nobody may write.
    import importlib.machinery, importlib.util

    code = compile("RESULT = 'compiled'", "jbhand", "exec")
    data = importlib.util.MAGIC_NUMBER + b"\0" * 12 + marshal.dumps(code)
    first = bytes([dis.opmap["LOAD_CONST"], 0])
    at = data.index(first, 16)
    data = data[:at] + bytes([dis.opmap["LOAD_CONST"], 1]) + data[at + 2 :]

    class Loader(importlib.machinery.SourcelessFileLoader):
        def get_data(self, path):
            return data

    return _load(Loader("jbhand", os.__file__))
"""
)

FILES = {
    "pytest.ini": "[pytest]\n",
    "mypkg/__init__.py": "VALUE = 1\n",
    "tests/test_a.py": "import mypkg\n\n\ndef test_v():\n    assert mypkg.VALUE == 1\n",
}
CMD = ["python", "-m", "pytest", "-s", "tests"]
DOORS = {
    "own": "_own",
    "thread": "_thread",
    "frozen": "_frozen",
    "sourceless": "_sourceless",
    "fitted": "_fitted",
}


def door_lines(output: str) -> dict[str, str]:
    return {
        line.split()[1]: " ".join(line.split()[2:])
        for line in output.splitlines()
        if line.startswith("JBDOOR ")
    }


@pytest.mark.parametrize("door", list(DOORS))
def test_bytecode_of_the_patch_s_making_is_refused(scratch: Path, door: str) -> None:
    library = EXPLOIT + f'\n_door("{door}", {DOORS[door]})\n'
    _, result, channel = run_plan(scratch, FILES, CMD, added={"mypkg/__init__.py": library})
    got = door_lines(result.output)
    assert door in got, result.output  # the payload ran
    assert got[door].startswith("error Refused"), (got, result.output)
    assert channel.forged, channel
    assert channel.outcomes["tests/test_a.py::test_v"] == PASSED, channel  # the run went on


def test_code_the_environment_renames_and_compiled_code_still_run(scratch: Path) -> None:
    # A test helper (trusted, as a library of the environment is) renames a function's
    # code, as hypothesis does; the patch's library compiles and runs source of its own.
    files = {
        **FILES,
        "tests/conftest.py": (
            "def helper():\n    return 7\n\n\n"
            "helper.__code__ = helper.__code__.replace(co_name='renamed')\n"
        ),
        "tests/test_b.py": "from conftest import helper\n\n\ndef test_h():\n"
        "    assert helper() == 7 and helper.__code__.co_name == 'renamed'\n",
    }
    library = "VALUE = 1\nexec(compile('DOUBLE = VALUE * 2', 'mypkg-gen', 'exec'))\n"
    _, result, channel = run_plan(scratch, files, CMD, added={"mypkg/__init__.py": library})
    assert not channel.forged, (channel.forged, result.output)
    assert channel.outcomes["tests/test_a.py::test_v"] == PASSED, result.output
    assert channel.outcomes["tests/test_b.py::test_h"] == PASSED, result.output
