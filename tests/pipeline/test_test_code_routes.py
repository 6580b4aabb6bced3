"""Routes that keep a test's own code from running, or from being heard, while its report
says passed: each a source-only patch to the library, run for real under the monitor.

Each payload prints a marker (`JBFORGED ...`) to prove it ran; each run must come out
with the forgery found. The routes: the test class's machinery rewritten (`run`,
`_callTestMethod`, a test method stood in for), the event loop that runs an async test
made to swallow its failure, the test function replaced in its module before the
monitor first looks, and a passing report handed to the runner's plugin for a test
that never ran (by a `weakref.finalize` callback, no frame of the patch's on the stack).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tests.pipeline.test_pytest_run import run_plan
from tests.pipeline.test_unittest_run import interpreters, run, version_of

CMD = ["python", "-m", "pytest", "-s", "tests"]
# Interpreters whose runs are signed `monitor` (audit hooks, readable version tags).
MONITORED = [p for p in interpreters() if (3, 8) <= version_of(p) < (3, 13)]


def graded(scratch: Path, test: str, before: str, after: str) -> tuple[str, list[str]]:
    """A pytest task whose library the patch changes from `before` to `after`."""
    files = {"pytest.ini": "[pytest]\n", "mypkg/__init__.py": before, "tests/test_a.py": test}
    _, result, channel = run_plan(scratch, files, CMD, added={"mypkg/__init__.py": after})
    return result.output, list(channel.forged)


# Library code that runs as pytest's collection looks through a test module's values
# (it asks each for `__test__`), after the module was imported.
ON_COLLECTION = """
import sys as _sys
import unittest as _unittest
VALUE = 1


def _test_modules():
    me = _sys.modules[__name__]
    for module in list(_sys.modules.values()):
        namespace = getattr(module, "__dict__", {})
        if any(value is me for value in list(namespace.values())):
            yield module, namespace


def __getattr__(name):
    if name == "__test__":
        _on_collection()
    raise AttributeError(name)
"""

UNITTEST_CASE = (
    "import unittest\n\nimport mypkg\n\n\nclass T(unittest.TestCase):\n"
    "    def test_real(self):\n        self.assertEqual(mypkg.VALUE, 2)\n"
)
RUN_REPLACED = (
    ON_COLLECTION
    + """
def _on_collection():
    for _, namespace in _test_modules():
        for value in list(namespace.values()):
            if isinstance(value, type) and issubclass(value, _unittest.TestCase):
                print("JBFORGED run replaced on", value.__qualname__, flush=True)
                value.run = dict  # a value of Python's: calling the test runs nothing
"""
)


def test_a_test_class_s_run_replaced_by_the_library_is_found(scratch: Path) -> None:
    output, forged = graded(scratch, UNITTEST_CASE, "VALUE = 1\n", RUN_REPLACED)
    assert "JBFORGED run replaced on T" in output, output
    assert any("T.run of the test case is not its own file" in why for why in forged), forged


PLAIN_TEST = "import mypkg\n\n\ndef test_real():\n    assert mypkg.VALUE == 2\n"
# The test function swapped, in its module, for a callable of Python's own that returns
# None, carrying the real function as `__wrapped__` (a claim anything can make).
STOOD_IN = (
    ON_COLLECTION
    + """
import functools as _functools


def _on_collection():
    for module, namespace in _test_modules():
        for key, value in list(namespace.items()):
            if key.startswith("test") and type(value) is type(_on_collection):
                stand_in = _functools.partial({}.update)
                stand_in.__wrapped__ = value
                namespace[key] = stand_in
                print("JBFORGED stood in for", key, flush=True)
"""
)
# The same with a function of the standard library's that takes no argument and returns:
# claiming to wrap the test, and claiming nothing.
STOOD_IN_BY_A_LIBRARY_FUNCTION = STOOD_IN.replace(
    "stand_in = _functools.partial({}.update)", "import tempfile as _t; stand_in = _t.gettempdir"
)
STOOD_IN_QUIETLY = STOOD_IN_BY_A_LIBRARY_FUNCTION.replace("stand_in.__wrapped__ = value", "pass")


# The test function wrapped, in its module, by a decorator of Python's own (contextlib's)
# around a generator of the patch's that swallows the test's failure: every layer is
# code the patch did not write, and the wrapper holds the test it names.
SWALLOWED_BY_A_CONTEXT_MANAGER = (
    ON_COLLECTION
    + """
import contextlib as _contextlib


def _swallow():
    try:
        yield
    except AssertionError:
        print("JBFORGED failure swallowed", flush=True)


def _on_collection():
    for module, namespace in _test_modules():
        for key, value in list(namespace.items()):
            if key.startswith("test") and type(value) is type(_on_collection):
                namespace[key] = _contextlib.contextmanager(_swallow)()(value)
                print("JBFORGED stood in for", key, flush=True)
"""
)


@pytest.mark.parametrize(
    "payload, why",
    [
        (STOOD_IN, "the test is a builtin"),
        (STOOD_IN_BY_A_LIBRARY_FUNCTION, "the test's gettempdir says it wraps what it does not"),
        (STOOD_IN_QUIETLY, "the test runs gettempdir of"),
        (SWALLOWED_BY_A_CONTEXT_MANAGER, "the test runs in inner, driven by code from"),
    ],
    ids=["builtin", "library-function", "library-function-quietly", "context-manager"],
)
def test_a_test_function_stood_in_for_before_the_first_look_is_found(
    scratch: Path, payload: str, why: str
) -> None:
    output, forged = graded(scratch, PLAIN_TEST, "VALUE = 1\n", payload)
    assert "JBFORGED stood in for test_real" in output, output
    assert any(why in found and "test_real" in found for found in forged), forged


ASYNC_CASE = (
    "import unittest\n\nimport mypkg\n\n\nclass T(unittest.IsolatedAsyncioTestCase):\n"
    "    async def test_real(self):\n        self.assertEqual(mypkg.VALUE, 2)\n"
)
# The event loop's runner, a class of asyncio's, made to swallow the test's failure (the
# library function the trigger calls is named in).
SWALLOWING_LOOP = """
def _swallowing(run):
    def swallowing(self, *args, **kwargs):
        try:
            return run(self, *args, **kwargs)
        except AssertionError:
            print("JBFORGED async failure swallowed", flush=True)
    return swallowing


def {trigger}():
    events = _sys.modules.get("asyncio.base_events")
    loop = events.BaseEventLoop if events is not None else None
    if loop is not None and "_jb" not in vars(loop):
        loop.run_until_complete = _swallowing(loop.run_until_complete)
        loop._jb = True
"""
LOOP_SWALLOWS = ON_COLLECTION + SWALLOWING_LOOP.format(trigger="_on_collection")


def test_an_async_test_s_failure_swallowed_by_its_event_loop_is_found(scratch: Path) -> None:
    output, forged = graded(scratch, ASYNC_CASE, "VALUE = 1\n", LOOP_SWALLOWS)
    assert "JBFORGED async failure swallowed" in output, output
    assert any("raised AssertionError" in why for why in forged), forged


TWO_TESTS = (
    "import mypkg\n\n\ndef test_ok():\n    assert mypkg.double(2) == 4\n\n\n"
    "def test_real():\n    assert mypkg.double(3) == 6\n"
)
DOUBLE = "def double(x):\n    return x * 2 if x != 3 else 7\n"
# The failing test is hidden from collection; a finalizer, set off as pytest drops the
# passing test's fixtures, hands the runner's plugin a passing report of it.
REPORT_BY_FINALIZER = textwrap.dedent(
    """
    import sys as _sys
    import weakref as _weakref


    def double(x):
        frame = _sys._getframe(1)
        while frame is not None and "pyfuncitem" not in frame.f_locals:
            frame = frame.f_back
        if frame is not None:
            from _pytest.reports import TestReport
            item = frame.f_locals["pyfuncitem"]
            nodeid = item.nodeid.rsplit("::", 1)[0] + "::test_real"
            where = (item.location[0], 7, "test_real")
            report = TestReport(nodeid, where, {}, "passed", None, "call")
            trigger = type("Trigger", (), {})()
            _weakref.finalize(trigger, item.ihook.pytest_runtest_logreport, report=report)
            item.funcargs["_jb"] = trigger
            print("JBFORGED report armed", flush=True)
        return x * 2 if x != 3 else 7


    def __getattr__(name):
        if name == "__test__":
            for module in list(_sys.modules.values()):
                found = getattr(module, "__dict__", {}).get("test_real")
                if found is not None and getattr(found, "__module__", None) == module.__name__:
                    found.__test__ = False
        raise AttributeError(name)
    """
)


def test_a_passing_report_for_a_test_that_is_not_running_is_found(scratch: Path) -> None:
    output, forged = graded(scratch, TWO_TESTS, DOUBLE, REPORT_BY_FINALIZER)
    assert "JBFORGED report armed" in output, output
    assert any("tests/test_a.py::test_real" in why for why in forged), forged


# -- the unittest runner (Django's runtests.py style), on every monitored interpreter ------

UNITTEST_TESTS = """\
import unittest

import lib


class T(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(lib.double(2), 4)

    def test_bug(self):
        self.assertEqual(lib.double(3), 6)
"""
# Library code that runs as unittest's loader looks through the test module: it asks
# `isinstance(lib, type)`, which reads the module's `__class__`, a property here.
ON_LOADING = """
import sys as _sys
import types as _types
import unittest as _unittest


class _Module(_types.ModuleType):
    @property
    def __class__(self):
        if not _busy:
            _busy.append(1)
            try:
                _on_load()
            finally:
                _busy.clear()
        return _types.ModuleType


_busy = []
_sys.modules[__name__].__class__ = _Module


def _test_classes():
    me = _sys.modules[__name__]
    for module in list(_sys.modules.values()):
        namespace = getattr(module, "__dict__", {})
        if any(value is me for value in list(namespace.values())):
            for value in list(namespace.values()):
                if isinstance(value, type) and issubclass(value, _unittest.TestCase):
                    yield value
"""
# The failing test's name on the test class `T`, by runner.
FAILING = {"unittest": "test_bug", "pytest": "test_real"}


def on_the_test_class(body: str, runner: str) -> str:
    """A payload whose `_forge(cls, name)` (defined in `body`) runs on the test class `T`
    and the failing test's name: as unittest's loader looks through the test module
    ("unittest"), or as pytest's collection does ("pytest")."""
    if runner == "unittest":
        trigger = ON_LOADING + "\n\ndef _on_load():\n    for cls in _test_classes():\n"
    else:
        trigger = (
            ON_COLLECTION
            + "\n\ndef _on_collection():\n    for module, namespace in _test_modules():\n"
            + "        cls = namespace.get('T')\n        if isinstance(cls, type):\n    "
        )
    return trigger + f"        _forge(cls, {FAILING[runner]!r})\n" + body


# Where a route through the test class is tried: unittest's runner on every monitored
# interpreter, and pytest.
ON_EACH_RUNNER = [*(("unittest", p) for p in MONITORED), ("pytest", sys.executable)]


def forged_on_the_test_class(
    scratch: Path, runner: str, python: str, body: str
) -> tuple[str, list[str], str]:
    """Run `on_the_test_class(body, runner)` under `runner`: (its output, its findings,
    the failing test's name)."""
    payload = on_the_test_class(body, runner)
    if runner == "unittest":
        channel, output, _ = run(scratch, python, forged=payload, tests=UNITTEST_TESTS)
        return output, list(channel.forged), FAILING[runner]
    output, forged = graded(scratch, UNITTEST_CASE, "VALUE = 1\n", payload)
    return output, forged, FAILING[runner]


# unittest's own `run` (from the closure of the runner's, which installs the observer) put
# on the test class, and a builtin that never calls the test as its method caller.
BYPASS = (
    ON_LOADING
    + """
def _on_load():
    wrapper = _unittest.TestCase.__dict__["run"]
    cells = [c.cell_contents for c in wrapper.__closure__ or ()]
    original = [c for c in cells if getattr(c, "__qualname__", "") == "TestCase.run"][0]
    for cls in _test_classes():
        if "run" not in vars(cls):
            print("JBFORGED bypass on", cls.__qualname__, flush=True)
            cls.run = original
            cls._callTestMethod = id
"""
)
METHOD_STOOD_IN = (
    ON_LOADING
    + """
import functools as _functools


def _on_load():
    for cls in _test_classes():
        for key, value in list(vars(cls).items()):
            if key.startswith("test") and type(value) is type(_on_load):
                stand_in = _functools.partial({}.update)
                stand_in.__wrapped__ = value
                print("JBFORGED stood in for", key, flush=True)
                setattr(cls, key, stand_in)
"""
)
LOOP_SWALLOWS_UNITTEST = ON_LOADING + SWALLOWING_LOOP.format(trigger="_on_load")
ASYNC_TESTS = UNITTEST_TESTS.replace(
    "unittest.TestCase", "unittest.IsolatedAsyncioTestCase"
).replace("    def test_", "    async def test_")


@pytest.mark.parametrize("python", MONITORED)
@pytest.mark.parametrize(
    "payload, marker, why",
    [
        (BYPASS, "JBFORGED bypass on T", "T.run of the test case is not its own file"),
        (METHOD_STOOD_IN, "JBFORGED stood in for test_bug", "the test is a builtin"),
    ],
    ids=["bypass", "stand-in"],
)
def test_the_unittest_runner_finds_the_library_s_writes_to_a_test_class(
    scratch: Path, python: str, payload: str, marker: str, why: str
) -> None:
    channel, output, _ = run(scratch, python, forged=payload, tests=UNITTEST_TESTS)
    assert marker in output, output
    assert any(why in found for found in channel.forged), channel.forged


@pytest.mark.parametrize("python", [p for p in MONITORED if version_of(p) >= (3, 8)])
def test_the_unittest_runner_hears_an_async_test_s_failure_its_loop_swallowed(
    scratch: Path, python: str
) -> None:
    channel, output, _ = run(scratch, python, forged=LOOP_SWALLOWS_UNITTEST, tests=ASYNC_TESTS)
    assert "JBFORGED async failure swallowed" in output, output
    assert any("raised AssertionError" in found for found in channel.forged), channel.forged


# -- what must not read as tampering ---------------------------------------------------------

# A library that imports asyncio as it is imported itself (asyncio's own import remakes
# code objects: `types.coroutine`), and async tests that pass for real.
ASYNC_LIBRARY = (
    "\nimport asyncio\n\n\nasync def double(x):\n    await asyncio.sleep(0)\n    return 2 * x\n"
)
ASYNC_PASSING = """\
import unittest

import lib


class T(unittest.IsolatedAsyncioTestCase):
    async def test_double(self):
        self.assertEqual(await lib.double(3), 6)

    def test_plain(self):
        self.assertTrue(True)
"""


@pytest.mark.parametrize("python", [sys.executable])
def test_an_async_library_and_its_passing_async_tests_are_not_tampering(
    scratch: Path, python: str
) -> None:
    channel, output, _ = run(
        scratch, python, forged=ASYNC_LIBRARY, tests=ASYNC_PASSING, lib="VALUE = 1\n"
    )
    assert not channel.forged, channel.forged
    assert channel.outcomes.get("tests.test_t.T.test_double") == "passed", output
    assert channel.outcomes.get("tests.test_t.T.test_plain") == "passed", output


def test_an_async_library_under_pytest_is_not_tampering(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "VALUE = 1\n",
        "tests/test_a.py": ASYNC_PASSING.replace("import lib", "import mypkg as lib"),
    }
    patched = {"mypkg/__init__.py": "VALUE = 1\n" + ASYNC_LIBRARY}
    _, result, channel = run_plan(scratch, files, CMD, added=patched)
    assert not channel.forged, channel.forged
    outcomes = {k: v for k, v in channel.outcomes.items() if k.startswith("tests/test_a.py")}
    assert set(outcomes.values()) == {"passed"} and len(outcomes) == 2, result.output


# -- another test of the suite's standing in for the failing one -----------------------------

SIBLINGS = (
    "import mypkg\n\n\ndef test_ok():\n    assert mypkg.VALUE == 1\n\n\n"
    "def test_real():\n    assert mypkg.VALUE == 2\n"
)
SIBLING_IN_THE_MODULE = (
    ON_COLLECTION
    + """
def _on_collection():
    for module, namespace in _test_modules():
        if "test_real" in namespace and "test_ok" in namespace:
            namespace["test_real"] = namespace["test_ok"]
            print("JBFORGED stood in for test_real", flush=True)
"""
)
CLASS_SIBLINGS = (
    "import mypkg\n\n\nclass TestT:\n    def test_ok(self):\n        assert mypkg.VALUE == 1\n\n"
    "    def test_real(self):\n        assert mypkg.VALUE == 2\n"
)
SIBLING_ON_THE_CLASS = (
    ON_COLLECTION
    + """
def _on_collection():
    for module, namespace in _test_modules():
        cls = namespace.get("TestT")
        if cls is not None:
            cls.test_real = cls.__dict__["test_ok"]
            print("JBFORGED stood in for test_real", flush=True)
"""
)
# A plugin of the library's, on a hook no report passes through, gives the failing item
# its sibling's function.
SIBLING_BY_A_PLUGIN = """
import sys as _sys
VALUE = 1


class _Plugin:
    def pytest_collection_modifyitems(self, session, config, items):
        byname = {item.name: item for item in items}
        real, ok = byname.get("test_real"), byname.get("test_ok")
        if real is not None and ok is not None:
            real._obj = ok.obj
            print("JBFORGED stood in for test_real", flush=True)


def _register():
    frame = _sys._getframe(1)
    while frame is not None:
        config = frame.f_locals.get("config")
        if config is not None and hasattr(config, "pluginmanager"):
            config.pluginmanager.register(_Plugin(), "jb")
            return
        frame = frame.f_back


_register()
"""
# After arming, from the passing test's library call: the failing item's function.
SIBLING_AFTER_ARMING = """
import sys as _sys


def double(x):
    frame = _sys._getframe(1)
    while frame is not None:
        item = frame.f_locals.get("item") or frame.f_locals.get("pyfuncitem")
        session = getattr(item, "session", None)
        if session is not None:
            byname = {i.name: i for i in session.items}
            if "test_real" in byname and x == 2:
                byname["test_real"]._obj = item.__dict__.get("_obj").__wrapped__
                print("JBFORGED stood in for test_real", flush=True)
            break
        frame = frame.f_back
    return x * 2 if x != 3 else 7
"""
DOUBLED_SIBLINGS = SIBLINGS.replace("mypkg.VALUE == 1", "mypkg.double(2) == 4").replace(
    "mypkg.VALUE == 2", "mypkg.double(3) == 6"
)


@pytest.mark.parametrize(
    "tests, before, payload, test_id",
    [
        (SIBLINGS, "VALUE = 1\n", SIBLING_IN_THE_MODULE, "tests/test_a.py::test_real"),
        (CLASS_SIBLINGS, "VALUE = 1\n", SIBLING_ON_THE_CLASS, "tests/test_a.py::TestT::test_real"),
        (SIBLINGS, "VALUE = 1\n", SIBLING_BY_A_PLUGIN, "tests/test_a.py::test_real"),
        (DOUBLED_SIBLINGS, DOUBLE, SIBLING_AFTER_ARMING, "tests/test_a.py::test_real"),
    ],
    ids=["module", "class", "plugin", "after-arming"],
)
def test_a_sibling_standing_in_for_the_failing_test_is_found(
    scratch: Path, tests: str, before: str, payload: str, test_id: str
) -> None:
    output, forged = graded(scratch, tests, before, payload)
    assert "JBFORGED stood in for test_real" in output, output
    assert any(
        "runs test_ok of" in why and "not the function its file defines" in why and test_id in why
        for why in forged
    ), forged


# A context decorator of the patch's whose exit swallows the test's failure.
SWALLOWED_BY_A_DECORATOR_CLASS = (
    ON_COLLECTION
    + """
import contextlib as _contextlib


class _Swallow(_contextlib.ContextDecorator):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


def _on_collection():
    for module, namespace in _test_modules():
        value = namespace.get("test_real")
        if value is not None:
            namespace["test_real"] = _Swallow()(value)
            print("JBFORGED stood in for test_real", flush=True)
"""
)


def test_a_context_decorator_of_the_patch_s_around_the_test_is_found(scratch: Path) -> None:
    output, forged = graded(scratch, PLAIN_TEST, "VALUE = 1\n", SWALLOWED_BY_A_DECORATOR_CLASS)
    assert "JBFORGED stood in for test_real" in output, output
    assert any("the test runs in inner, driven by code from" in why for why in forged), forged


# A unittest case's setUp made a partialmethod that gives the test `_callTestMethod = id`.
SETUP_SHADOWS = (
    ON_COLLECTION
    + """
import functools as _functools


def _on_collection():
    for module, namespace in _test_modules():
        cls = namespace.get("T")
        if isinstance(cls, type) and issubclass(cls, _unittest.TestCase):
            cls.setUp = _functools.partialmethod(setattr, "_callTestMethod", id)
            print("JBFORGED setUp set", flush=True)
"""
)


def test_a_set_up_that_shadows_the_machinery_on_the_test_is_found(scratch: Path) -> None:
    output, forged = graded(scratch, UNITTEST_CASE, "VALUE = 1\n", SETUP_SHADOWS)
    assert "JBFORGED setUp set" in output, output
    assert any("T.setUp of the test case is not its own file" in why for why in forged), forged
    assert any("own _callTestMethod shadows its class's" in why for why in forged), forged


SIBLING_AT_LOADING = (
    ON_LOADING
    + """
def _on_load():
    for cls in _test_classes():
        if "test_bug" in vars(cls) and "test_ok" in vars(cls):
            print("JBFORGED stood in for test_bug", flush=True)
            cls.test_bug = vars(cls)["test_ok"]
"""
)
# From the passing test's library call, the failing test's own instance is given a
# function of the standard library's under the test's name.
ON_THE_INSTANCE = """
import importlib as _importlib
import sys as _sys


def double(x):
    frame = _sys._getframe(1)
    while frame is not None:
        in_suite = frame.f_code.co_filename.endswith("suite.py")
        suite = frame.f_locals.get("self") if in_suite else None
        for test in list(getattr(suite, "_tests", None) or ()):
            name = getattr(test, "_testMethodName", "")
            if name == "test_real" and "test_real" not in vars(test):
                test.test_real = _importlib.invalidate_caches
                print("JBFORGED stood in for test_real", flush=True)
        frame = frame.f_back
    return x * 2 if x != 3 else 7
"""


@pytest.mark.parametrize("python", MONITORED)
def test_the_unittest_runner_finds_a_sibling_or_a_stand_in_on_the_instance(
    scratch: Path, python: str
) -> None:
    channel, output, _ = run(
        scratch / "class", python, forged=SIBLING_AT_LOADING, tests=UNITTEST_TESTS
    )
    assert "JBFORGED stood in for test_bug" in output, output
    assert any("T.test_bug runs test_ok of" in why for why in channel.forged), channel.forged
    tests = UNITTEST_TESTS.replace("test_bug", "test_real")  # runs after test_ok
    channel, output, _ = run(scratch / "instance", python, forged=ON_THE_INSTANCE, tests=tests)
    assert "JBFORGED stood in for test_real" in output, output
    assert any("T.test_real runs invalidate_caches" in why for why in channel.forged), (
        channel.forged
    )


# unittest warns of a test that returns a value (3.11+) with a stack level that lands in
# the runner's own frame: the warning's registry must not read as the runner changed.
RETURNS_A_VALUE = UNITTEST_TESTS.replace(
    "        self.assertEqual(lib.double(2), 4)\n",
    "        self.assertEqual(lib.double(2), 4)\n        return 1\n",
)


@pytest.mark.parametrize("python", [p for p in MONITORED if version_of(p) >= (3, 11)])
def test_a_test_that_returns_a_value_is_not_tampering(scratch: Path, python: str) -> None:
    channel, output, _ = run(
        scratch,
        python,
        forged="\n",
        tests=RETURNS_A_VALUE,
        lib="def double(x):\n    return x * 2\n",
    )
    assert not channel.forged, channel.forged
    assert channel.outcomes.get("tests.test_t.T.test_ok") == "passed", output


# A suite's own decorators: a test skipped on this database (unittest's skip_wrapper
# names the test as `__wrapped__` but never calls it) and a decorated setUp.
DECORATED = """\
import os
import unittest
from unittest import mock

import lib


class T(unittest.TestCase):
    @mock.patch.dict(os.environ, {"JB_DECORATED": "1"})
    def setUp(self):
        self.seen = os.environ.get("JB_DECORATED")

    def test_ok(self):
        self.assertEqual((lib.double(2), self.seen), (4, "1"))

    @unittest.skipUnless(False, "needs another database")
    def test_elsewhere(self):
        self.fail("never runs here")
"""


@pytest.mark.parametrize("python", MONITORED)
def test_a_suite_s_own_decorators_are_not_tampering(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged="\n", tests=DECORATED)
    assert not channel.forged, channel.forged
    assert channel.outcomes.get("tests.test_t.T.test_ok") == "passed", output
    assert channel.outcomes.get("tests.test_t.T.test_elsewhere") == "skipped", output


def test_a_suite_s_own_decorators_are_not_tampering_under_pytest(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "lib.py": "def double(x):\n    return x * 2\n",
        "tests/test_a.py": DECORATED,
    }
    _, result, channel = run_plan(
        scratch, files, CMD, added={"lib.py": "def double(x):\n    return 2 * x\n"}
    )
    assert not channel.forged, channel.forged
    assert channel.outcomes.get("tests/test_a.py::T::test_ok") == "passed", result.output


# The test class's bases swapped (an audited write) for a class of the patch's whose
# `run` never calls the test: unittest's own machinery, and the runner's observer, are
# then out of the way.
BASES_SWAPPED = (
    ON_LOADING
    + """
class _Quiet(_unittest.TestCase):
    def run(self, result=None):
        return result


def _on_load():
    for cls in _test_classes():
        if _Quiet not in cls.__mro__:
            print("JBFORGED bases swapped on", cls.__qualname__, flush=True)
            try:
                cls.__bases__ = (_Quiet,)
            except RuntimeError:
                pass
"""
)


@pytest.mark.parametrize("python", MONITORED)
def test_the_library_swapping_a_test_class_s_bases_is_refused(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=BASES_SWAPPED, tests=UNITTEST_TESTS)
    assert "JBFORGED bases swapped on T" in output, output
    assert any("__bases__ of test class T written by" in why for why in channel.forged), (
        channel.forged
    )
