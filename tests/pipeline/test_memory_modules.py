"""Modules that hand Python code the process's memory (ctypes, cffi), kept out of graded runs.

The monitor refuses such a module to code the patch wrote. But once *anything* has
loaded it, every line of the process may use it with no event left to refuse: a
library of the environment that loads ctypes at import (NumPy does) or a thread the
patch starts on the import system itself (none of the patch's frames on the loading
stack) leaves `sys.modules["ctypes"]` to the patch, whose write to an immutable bytes
object below proves raw memory access. So a graded run loads none of them: whoever
asks gets an ImportError (an importer that can do without, as NumPy can, goes on) and
the channel names what was withheld from whom. A daemon told to allow them
(`--memory-modules allow`, for environments that cannot do without) loads them, and
the run is signed `reduced`: the monitor holds nothing there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jouled.contracts.task import load_task
from jouled.errors import SandboxError
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.metering import Metering
from jouled.pipeline.evaluate import Evaluator
from jouled.pipeline.graded_tree import prepare_tree, seed
from jouled.pipeline.testreport import PASSED
from jouled.pipeline.verdicts import sealed_level
from tests.integration.attacks import TASKS
from tests.pipeline.test_pytest_run import run_plan
from tests.test_swebench import MemoryBaselines

# The environment's library, trusted as the environment is: it loads ctypes if it may.
ENVIRONMENT = """
try:
    import ctypes
    print("JBENV ctypes loaded", flush=True)
except ImportError as err:
    ctypes = None
    print("JBENV ctypes refused:", err, flush=True)
"""

# The patch's library: when imported, it reaches for ctypes without importing it and,
# if it finds it, writes one byte of an immutable bytes object.
WRITE = r"""
import sys

VALUE = 1

def _write(ctypes):
    victim = ("JB-" + "UNTOUCHED").encode()

    class Cell(ctypes.Union):
        _fields_ = [("address", ctypes.c_void_p), ("bytes", ctypes.POINTER(ctypes.c_ubyte))]

    cell = Cell()
    cell.address = id(victim) + bytes.__basicsize__ - 1
    cell.bytes[3] = ord("X")
    return victim.decode()

def _door(name, find):
    try:
        ctypes = find()
        got = _write(ctypes) if ctypes is not None else "absent"
        print("JBDOOR", name, got, flush=True)
    except BaseException as err:
        print("JBDOOR", name, "error", type(err).__name__, err, flush=True)
"""

PRELOADED = (
    WRITE
    + """
_door("preloaded", lambda: sys.modules.get("ctypes"))
"""
)

# A thread that starts on the import system: nothing of the patch's on its stack.
THREAD = (
    WRITE
    + """
def _by_thread():
    import importlib, threading

    loader = threading.Thread(target=importlib.import_module, args=("ctypes",))
    loader.start()
    loader.join()
    return sys.modules.get("ctypes")

_door("thread", _by_thread)
"""
)

FILES = {
    "pytest.ini": "[pytest]\n",
    "mypkg/__init__.py": "VALUE = 1\n",
    "tests/test_a.py": "import mypkg\n\n\ndef test_v():\n    assert mypkg.VALUE == 1\n",
}
CMD = ["python", "-m", "pytest", "-s", "tests"]


def doors(output: str) -> dict[str, str]:
    return {
        line.split()[1]: " ".join(line.split()[2:])
        for line in output.splitlines()
        if line.startswith("JBDOOR ")
    }


def test_a_module_the_environment_loads_is_withheld_from_the_run(scratch: Path) -> None:
    files = {**FILES, "tests/conftest.py": ENVIRONMENT}
    _, result, channel = run_plan(scratch, files, CMD, added={"mypkg/__init__.py": PRELOADED})
    assert "JBENV ctypes refused: jouled:" in result.output, result.output
    assert doors(result.output) == {"preloaded": "absent"}, result.output  # the payload ran
    assert not channel.forged, channel.forged  # the environment's ask is no tampering
    assert channel.withheld == ["_ctypes (asked for by tests/conftest.py)"], channel
    assert channel.integrity == "monitor" and not channel.memory_open, channel
    assert channel.outcomes["tests/test_a.py::test_v"] == PASSED  # the run goes on without it


def test_a_module_loaded_by_a_thread_the_patch_started_is_withheld(scratch: Path) -> None:
    _, result, channel = run_plan(scratch, FILES, CMD, added={"mypkg/__init__.py": THREAD})
    assert doors(result.output) == {"thread": "absent"}, result.output
    assert any(w.startswith("_ctypes (") for w in channel.withheld), channel
    assert channel.integrity == "monitor" and not channel.memory_open, channel


def test_allowed_memory_modules_leave_the_run_reduced(scratch: Path) -> None:
    files = {**FILES, "tests/conftest.py": ENVIRONMENT}
    _, result, channel = run_plan(
        scratch, files, CMD, added={"mypkg/__init__.py": PRELOADED}, memory_modules="allow"
    )
    # Allowed, the door is open (the write took), and the run says so: `reduced`.
    assert doors(result.output) == {"preloaded": "JB-XNTOUCHED"}, result.output
    assert channel.memory_open == ["_ctypes (asked for by tests/conftest.py)"], channel
    assert channel.integrity == "reduced", channel
    assert not channel.withheld and not channel.forged, channel


def test_the_patch_asking_itself_is_still_tampering(scratch: Path) -> None:
    own = WRITE + '\nimport importlib\n_door("own", lambda: importlib.import_module("ctypes"))\n'
    _, result, channel = run_plan(
        scratch, FILES, CMD, added={"mypkg/__init__.py": own}, memory_modules="allow"
    )
    own_door = doors(result.output)["own"]
    assert own_door.startswith("error Refused") and "_ctypes" in own_door, result.output
    assert any("_ctypes" in why for why in channel.forged), channel.forged


# Django's test runner imports ctypes at the top of the module (for its parallel mode).
DJANGO_RUNNER = """
import ctypes

PARALLEL = lambda: ctypes.c_int
"""


def test_the_test_framework_s_own_import_gets_a_stand_in_without_memory(scratch: Path) -> None:
    files = {
        **FILES,
        "django/__init__.py": "",
        "django/test/__init__.py": "",
        "django/test/runner.py": DJANGO_RUNNER,
        "tests/conftest.py": "import django.test.runner\n",
    }
    _, result, channel = run_plan(scratch, files, CMD, added={"mypkg/__init__.py": PRELOADED})
    # The payload found the stand-in, which has nothing to write memory with.
    assert doors(result.output) == {
        "preloaded": "error AttributeError module 'ctypes' has no "
        "attribute 'Union': ctypes is withheld from graded runs (a daemon run with "
        "--memory-modules allow loads it)"
    }, result.output
    assert channel.outcomes["tests/test_a.py::test_v"] == PASSED, result.output
    assert channel.withheld == ["ctypes (asked for by django/test/runner.py)"], channel
    assert channel.integrity == "monitor" and not channel.forged, channel


# -- what the evaluator signs ---------------------------------------------------------------


def _lrucache_with_ctypes(root: Path) -> Path:
    """The bundled lrucache task, its tests' conftest loading ctypes as a library would."""
    task = root / "lrucache"
    shutil.copytree(TASKS / "smoke" / "lrucache", task)
    (task / "before" / "tests" / "conftest.py").write_text(ENVIRONMENT)
    return task


@pytest.mark.parametrize("policy", ["withhold", "allow"])
def test_the_evaluator_signs_what_was_withheld_or_let_in(tmp_path: Path, policy: str) -> None:
    contract = load_task(_lrucache_with_ctypes(tmp_path), "smoke")
    metering = Metering(EstimatorMeter(), None, "exclusive")
    evaluator = Evaluator(metering, MemoryBaselines(), tmp_path / "work", memory_modules=policy)
    tree = seed(contract, tmp_path / "run" / "tree")
    prepare_tree(contract, tree, None)
    check = evaluator.run_check(contract, tree)
    assert not check.forged, check.forged
    asked = "_ctypes (asked for by tests/conftest.py)"
    if policy == "withhold":
        assert check.result.isolation["withheld"] == [asked], check.result.isolation
        assert check.level == sealed_level("monitor", check.result.isolation)
    else:
        assert check.result.isolation["memory"] == f"open: loaded {asked}"
        assert check.level == "reduced" and "withheld" not in check.result.isolation


def test_allowed_memory_modules_are_refused_under_min_integrity_monitor(tmp_path: Path) -> None:
    contract = load_task(_lrucache_with_ctypes(tmp_path), "smoke")
    metering = Metering(EstimatorMeter(), None, "exclusive")
    evaluator = Evaluator(
        metering,
        MemoryBaselines(),
        tmp_path / "work",
        memory_modules="allow",
        min_integrity="monitor",
    )
    tree = seed(contract, tmp_path / "run" / "tree")
    prepare_tree(contract, tree, None)
    with pytest.raises(SandboxError, match="below --min-integrity 'monitor'"):
        evaluator.run_check(contract, tree)
