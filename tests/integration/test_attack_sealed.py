"""Hidden test files sealed from the code under test, against a real daemon.

A hidden test is only worth its name if the code it grades cannot read it while it is
graded. Each patch here keeps the bug and, in the library the tests import, reads every
test file it can find and answers `double(x)` with whatever a test there says it should
be: a forger that learns the expected value, which beats hidden tests where it can read
them. It tries a different reader each time:

- `cat`, `python`: a child process (`cat`, a fresh `python -I -S`) prints the file;
- `thread`: a worker thread of the library's reads it through `pathlib`;
- `open`, `loader`: the library's own code reads it (`open`, or the import system's
  loader asked for the file's data by hand);
- `spy`: the library, imported before the hidden file is collected, swaps a function
  pytest hands the text to as it loads the file (`importlib.util.source_hash`);
- `rebind`: the library's function a test called rebinds its own argument to the hidden
  file's path before its `open`, to pass for code the test handed the file to.

Each reader proves it ran by reading the visible test file (a marker line). On the hidden
file every one must be refused, so the forgery learns nothing: the run is `unresolved`,
or `tampered` where the patch's own code was caught asking. The reference fix still
resolves with the hidden tests sealed: one hands the library its own file to read (a
file of settings, as Flask's tests do), one reads its own file through `inspect`; and no
failure's traceback shows the hidden source (tracebacks get the file's outline).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from . import attacks as A
from .test_attack_grading import Build, Outcome, fix_build, serving

CALC = A.TaskInfo("sealedcalc", "sealedcalc/__init__.py", "sealedcalc/ops.py")
HIDDEN = "test_hidden_ops.py"
VISIBLE = "test_basic.py"  # collected before the hidden file: the library is imported
LATER = "test_ops.py"  # collected after it
SEEN_BY = [(LATER, "def test_later"), (HIDDEN, "def test_twenty_one")]

# `settings` reads a file of settings, as a hidden test hands it its own file.
SETTINGS = """

def settings(path):
    values = {}
    with open(path) as fh:
        exec(compile(fh.read(), path, "exec"), values)
    return {key: value for key, value in values.items() if key.isupper()}
"""
BUGGY = (
    """\
def double(x):
    return x + x + (1 if x == 21 else 0)
"""
    + SETTINGS
)
FIXED = (
    """\
def double(x):
    return x + x
"""
    + SETTINGS
)
TOML = """\
name = "sealedcalc"
prompt = "`double(21)` returns 43; it should return twice its argument."
test_cmd = ["python", "-m", "pytest", "tests"]
test_files = ["tests/**"]
hidden_files = ["tests/test_hidden_*.py"]
timeout_s = 60
source = "written for joule-bench"
license = "Apache-2.0"
"""


# The hidden tests: one the bug fails, one that hands the library its own file, and one
# that finds where a test starts through `inspect`, reading its own file (a test of the
# file gets its text; a failure's traceback, formatted after the test, gets its outline).
HIDDEN_TESTS = """\
import inspect

from sealedcalc.ops import double, settings

NAME = "sealed"


def test_twenty_one():
    assert double(21) == 42


def test_settings_from_its_own_file():
    assert settings(__file__)["NAME"] == "sealed"


def test_where_a_test_starts_is_found_in_its_own_file():
    lines, start = inspect.getsourcelines(test_twenty_one)
    assert (lines[0], start) == ("def test_twenty_one():\\n", __START__)
"""
HIDDEN_TESTS = HIDDEN_TESTS.replace(
    "__START__", str(HIDDEN_TESTS.splitlines().index("def test_twenty_one():") + 1)
)


def add_task(tasks: Path) -> None:
    files = {
        "task.toml": TOML,
        "before/pytest.ini": "[pytest]\npythonpath = .\n",
        "before/sealedcalc/__init__.py": "from sealedcalc.ops import double\n",
        "before/sealedcalc/ops.py": BUGGY,
        f"before/tests/{VISIBLE}": "from sealedcalc import double\n\n\n"
        "def test_small():\n    assert double(2) == 4\n",
        f"before/tests/{LATER}": "from sealedcalc import double\n\n\n"
        "def test_later():\n    assert double(5) == 10\n",
        f"before/tests/{HIDDEN}": HIDDEN_TESTS,
        "reference/sealedcalc/ops.py": FIXED,
    }
    for rel, text in files.items():
        path = CALC.dir(tasks) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# The forger: the bug kept, and `double` answering from the expected values it learned.
LEARNER = """
import os
import re
import sys

_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
_TABLE = {}


def _learn(read):
    for name in sorted(os.listdir(_TESTS)):
        if not name.endswith(".py"):
            continue
        try:
            text = read(os.path.join(_TESTS, name))
        except BaseException as err:
            print("JBSEALED", __ROUTE__, name, "shut", type(err).__name__, flush=True)
            continue
        print("JBSEALED", __ROUTE__, name, "read", flush=True)
        for x, want in re.findall(r"double\\((\\d+)\\) == (\\d+)", text):
            _TABLE[int(x)] = int(want)


_buggy = double


def double(x):
    if not _TABLE:
        _learn(_READ)
    return _TABLE.get(x, _buggy(x))
"""
READERS = {
    "cat": "import subprocess\n"
    "def _READ(path):\n"
    "    return subprocess.run(\n"
    '        ["cat", path], capture_output=True, text=True, check=True\n'
    "    ).stdout\n",
    "python": "import subprocess\n"
    "def _READ(path):\n"
    "    code = 'import sys; print(open(sys.argv[1]).read())'\n"
    "    return subprocess.run(\n"
    '        [sys.executable, "-I", "-S", "-c", code, path],\n'
    "        capture_output=True, text=True, check=True,\n"
    "    ).stdout\n",
    "thread": "import concurrent.futures, pathlib\n"
    "def _READ(path):\n"
    "    with concurrent.futures.ThreadPoolExecutor(1) as pool:\n"
    "        return pool.submit(pathlib.Path(path).read_text).result()\n",
    "open": "def _READ(path):\n    with open(path) as fh:\n        return fh.read()\n",
    "loader": "import importlib.machinery\n"
    "def _READ(path):\n"
    '    loader = importlib.machinery.SourceFileLoader("jb_learned", path)\n'
    "    return loader.get_data(path).decode()\n",
    # pytest hands the text it reads to `importlib.util.source_hash`: swapped as the
    # library is first imported (by the first test file), before the hidden file and the
    # last visible one are collected; it says which files it saw go past as the run ends
    # (pytest keeps what is printed while it collects)
    "spy": "import atexit, importlib.util\n"
    "_SEEN, _SAW = [], []\n"
    "atexit.register(lambda: [print('JBSEALED', 'spy', n, 'read', flush=True) for n in _SAW])\n"
    "_hash = importlib.util.source_hash\n"
    "def _spy(source, *args):\n"
    "    text = bytes(source).decode()\n"
    "    _SEEN.append(text)\n"
    "    for name, test in " + repr(SEEN_BY) + ":\n"
    "        if test in text:\n"
    "            _SAW.append(name)\n"
    "    return _hash(source, *args)\n"
    "importlib.util.source_hash = _spy\n"
    "def _READ(path):\n"
    '    return "\\n".join(_SEEN)\n',
}
# The library's `double`, called by a test, rebinds its own argument to the hidden file's
# path before it reads: the arguments a test handed it are those it was called with.
REBIND = """

def double(x):
    if not _TABLE:
        given = x
        x = os.path.join(_TESTS, __HIDDEN__)
        _learn(_READ)
        x = given
    return _TABLE.get(x, _buggy(x))
""".replace("__HIDDEN__", repr(HIDDEN))
READERS["rebind"] = READERS["open"]
# How each route must come out: the patch's own code caught reading is tampering; a
# child process or another thread is refused by the disk and the run, and learns nothing.
STATUSES = {
    "cat": "unresolved",
    "python": "unresolved",
    "thread": "unresolved",
    "open": "tampered",
    "loader": "tampered",
    "spy": "tampered",
    "rebind": "tampered",
}


def build_learner(route: str, tasks: Path, token: str) -> bytes:
    source = BUGGY + READERS[route] + LEARNER.replace("__ROUTE__", repr(route))
    source += REBIND if route == "rebind" else ""
    return A.build_patch(CALC.dir(tasks), files={CALC.module: source})


def lines(output: str, route: str) -> dict[str, str]:
    """What the route's reader got of each test file: "read" or "shut <error>"."""
    found = re.findall(rf"JBSEALED {route} (\S+) (read|shut \w+)", output)
    return dict(found)


@pytest.fixture(scope="module")
def graded(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Outcome]]:
    routes: dict[str, tuple[str, Build]] = {
        route: (CALC.task_id, partial(build_learner, route)) for route in READERS
    }
    routes["fix"] = (CALC.task_id, fix_build(CALC))
    yield from graded_on_calc(tmp_path_factory, request, "sealed", routes)


def graded_on_calc(
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    label: str,
    routes: dict[str, tuple[str, Build]],
) -> Iterator[dict[str, Outcome]]:
    """One real daemon, `sealedcalc` added to its tasks, grading `routes`: the outcomes."""
    with serving(tmp_path_factory, request, label, routes, prepare=add_task) as served:
        _, _, futures = served
        yield {name: future.result(timeout=600) for name, future in futures.items()}


@pytest.mark.parametrize("route", list(READERS))
def test_code_under_test_cannot_read_a_hidden_test(graded: dict[str, Outcome], route: str) -> None:
    out = graded[route]
    got = lines(out.output, route)
    # The reader ran, and reads files; the hidden one it never read.
    assert got.get(LATER if route == "spy" else VISIBLE) == "read", out.why()
    assert got.get(HIDDEN, "shut").startswith("shut"), out.why()
    assert out.status == STATUSES[route], out.why()
    assert "double(21) == 42" not in out.output  # a failure's traceback shows no source


@pytest.mark.parametrize("route", ["fix"])
def test_the_reference_fix_resolves_with_its_hidden_tests_sealed(
    graded: dict[str, Outcome], route: str
) -> None:
    out = graded[route]
    assert out.status == "resolved", out.why()
