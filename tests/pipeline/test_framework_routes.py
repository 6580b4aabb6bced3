"""Routes through the test framework's own control flow and what it runs a test with:
unittest's `_ShouldStop` raised inside a subtest (its part executor swallows it), a
unittest case told to run another method, an object on a test's instance, a property
test's examples rejected by the library, and an async test's coroutine never started.
Each a source-only patch to the library, run for real under the monitor; each payload
prints a marker (`JBFORGED ...`) to prove it ran, and each run must come out with the
forgery found, named for what it is.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.test_pytest_run import run_plan
from tests.pipeline.test_test_case_routes import REGISTER
from tests.pipeline.test_test_code_routes import (
    CMD,
    MONITORED,
    ON_COLLECTION,
    ON_LOADING,
    UNITTEST_CASE,
    UNITTEST_TESTS,
    graded,
)
from tests.pipeline.test_unittest_run import run, version_of

BUG = "tests.test_t.T.test_bug"
STOPPED = "a _ShouldStop unittest did not raise ended a test part"
REAL = "tests/test_a.py::T::test_real"
PLAIN = "tests/test_a.py::test_real"


def held(channel: Any, output: str, marker: str, test: str, why: str) -> None:
    """The marker printed, and the forgery found for what it is."""
    assert marker in output, output
    assert any(why in found and test in found for found in channel.forged), (
        channel.forged,
        channel.outcomes.get(test),
    )


def held_pytest(
    scratch: Path, files: dict[str, str], added: dict[str, str], marker: str, test: str, why: str
) -> None:
    _, result, channel = run_plan(scratch, files, CMD, added=added)
    held(channel, result.output, marker, test, why)


# -- 1. unittest's `_ShouldStop` raised by the library inside a test's subTest -------------
# unittest's part executor (what `subTest` runs its body in) swallows `_ShouldStop` without
# filing anything: the subtest's assertion never runs, the test's own function returns, and
# unittest files a success. The library needs no expected value: it ends whatever subtest
# calls it (Django's suites use subTest throughout).

SUBTESTS = """\
import unittest

import lib


class T(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(lib.double(2), 4)

    def test_bug(self):
        for n in (2, 3, 4):
            with self.subTest(n=n):
                self.assertEqual(lib.double(n), 2 * n)
"""
SHOULD_STOP_IN_SUBTEST = """
import sys as _sys
import unittest.case as _case

_double = double


def double(x):
    test = _sys._getframe(1).f_locals.get("self")
    if getattr(test, "_subtest", None) is not None:
        print("JBFORGED subtest ended by _ShouldStop", flush=True)
        raise _case._ShouldStop()
    return _double(x)
"""
# The same exception raised in the test's body itself (no subTest around it): the part
# executor around the test swallows it too, but the observer around the method hears it.
SHOULD_STOP_IN_BODY = """
import unittest.case as _case

_double = double


def double(x):
    if x == 3:
        print("JBFORGED test ended by _ShouldStop", flush=True)
        raise _case._ShouldStop()
    return _double(x)
"""


@pytest.mark.parametrize("python", MONITORED)
def test_should_stop_inside_a_subtest_under_the_unittest_runner(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=SHOULD_STOP_IN_SUBTEST, tests=SUBTESTS)
    held(
        channel,
        output,
        "JBFORGED subtest ended by _ShouldStop",
        BUG,
        "a _ShouldStop unittest did not raise ended a test part",
    )


@pytest.mark.parametrize("python", MONITORED)
def test_should_stop_in_the_test_body_under_the_unittest_runner(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=SHOULD_STOP_IN_BODY, tests=UNITTEST_TESTS)
    held(
        channel,
        output,
        "JBFORGED test ended by _ShouldStop",
        BUG,
        "a _ShouldStop unittest did not raise ended a test part",
    )


def test_should_stop_inside_a_subtest_under_pytest(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "lib.py": "def double(x):\n    return x * 2 if x != 3 else 7\n",
        "tests/test_a.py": SUBTESTS.replace("test_bug", "test_real"),
    }
    added = {"lib.py": files["lib.py"] + SHOULD_STOP_IN_SUBTEST}
    held_pytest(
        scratch,
        files,
        added,
        "JBFORGED subtest ended by _ShouldStop",
        REAL,
        "a _ShouldStop unittest did not raise ended a test part",
    )


# -- 2. a unittest case under pytest told to run another method: pytest hears a unittest
# case's method only by its raise (pytest versions call it differently). The test's instance
# is made at collection; a plugin of the library's on a hook no report passes through gives
# it a plain-str `_testMethodName` naming a method that does nothing (`setUp`) or a sibling.

TESTCASE_TWO = (
    "import unittest\n\nimport mypkg\n\n\nclass T(unittest.TestCase):\n"
    "    def test_ok(self):\n        self.assertEqual(mypkg.VALUE, 1)\n\n"
    "    def test_real(self):\n        self.assertEqual(mypkg.VALUE, 2)\n"
)
METHOD_NAME_RENAMED = (
    ON_COLLECTION
    + REGISTER
    + """
class _Plugin:
    def pytest_collection_modifyitems(self, session, config, items):
        for item in items:
            if item.name == "test_real":
                item.instance._testMethodName = "{name}"
                print("JBFORGED test_real runs {name}", flush=True)


_PLUGIN = _Plugin()


def _on_collection():
    _register(_PLUGIN)
"""
)


@pytest.mark.parametrize("name", ["setUp", "test_ok"])
def test_a_unittest_case_s_method_name_renamed_under_pytest(scratch: Path, name: str) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "VALUE = 1\n",
        "tests/test_a.py": TESTCASE_TWO,
    }
    added = {"mypkg/__init__.py": METHOD_NAME_RENAMED.replace("{name}", name)}
    why = f"the unittest case runs {name}, not the test test_real"
    held_pytest(scratch, files, added, f"JBFORGED test_real runs {name}", REAL, why)


# -- 3. the test case's class swapped (an object's `__class__`, allowed for objects that
# are not the framework's) for a subclass the library defines, whose `run` is its own
# file's code: machinery_problems accepts a suite class's `run` of the class's own file.

CLASS_SWAPPED = (
    ON_COLLECTION
    + REGISTER
    + """
def _quiet(cls):
    class Quiet(cls):
        def run(self, result=None):
            return result

    Quiet.__name__ = Quiet.__qualname__ = cls.__name__
    return Quiet


class _Plugin:
    def pytest_collection_modifyitems(self, session, config, items):
        for item in items:
            if item.name == "test_real":
                item.instance.__class__ = _quiet(type(item.instance))
                print("JBFORGED test_real's case given a quiet class", flush=True)


_PLUGIN = _Plugin()


def _on_collection():
    _register(_PLUGIN)
"""
)


def test_a_unittest_case_s_class_swapped_for_a_library_subclass_under_pytest(
    scratch: Path,
) -> None:
    output, forged = graded(scratch, UNITTEST_CASE, "VALUE = 1\n", CLASS_SWAPPED)
    assert "JBFORGED test_real's case given a quiet class" in output, output
    assert any("_instance was replaced by code from" in why for why in forged), forged


# -- 4. the unittest runner: an object (not a function) on the failing test's instance: a
# partial of a builtin that does nothing, claiming the test's method as `__wrapped__`.

OBJECT_ON_THE_INSTANCE = """
import functools as _functools
import sys as _sys

_double = double


def double(x):
    frame = _sys._getframe(1)
    while frame is not None:
        in_suite = frame.f_code.co_filename.endswith("suite.py")
        suite = frame.f_locals.get("self") if in_suite else None
        for test in list(getattr(suite, "_tests", None) or ()):
            name = getattr(test, "_testMethodName", "")
            if name == "test_real" and "test_real" not in vars(test):
                stand_in = _functools.partial({}.update)
                stand_in.__wrapped__ = getattr(test, "test_real")
                test.test_real = stand_in
                print("JBFORGED object on test_real's instance", flush=True)
        frame = frame.f_back
    return _double(x)
"""


@pytest.mark.parametrize("python", MONITORED)
def test_an_object_on_the_instance_under_the_unittest_runner(scratch: Path, python: str) -> None:
    tests = UNITTEST_TESTS.replace("test_bug", "test_real")  # runs after test_ok
    channel, output, _ = run(scratch, python, forged=OBJECT_ON_THE_INSTANCE, tests=tests)
    why = "the test is a builtin_function_or_method, not a function of the suite's"
    marker = "JBFORGED object on test_real's instance"
    held(channel, output, marker, "tests.test_t.T.test_real", why)


# -- 5. hypothesis: the library rejects the examples it cannot handle
# (`hypothesis.reject()` where it used to raise NotImplementedError): a rejection raised
# from the patch's code is a raise, not hypothesis's rejection of an example.

PROPERTY_TEST = """\
from hypothesis import given, settings, strategies as st

import mypkg


@settings(max_examples=40, database=None, derandomize=True)
@given(st.integers(0, 50))
def test_real(n):
    assert mypkg.half(2 * n) == n
"""
HALF = (
    "def half(x):\n    if x % 4:\n        raise NotImplementedError('odd halves')\n"
    "    return x // 2\n"
)
HALF_REJECTS = """
import hypothesis as _hypothesis

_seen = []


def half(x):
    if x % 4:
        if not _seen:
            _seen.append(1)
            print("JBFORGED example rejected by the library", flush=True)
        _hypothesis.reject()
    return x // 2
"""


def test_hypothesis_examples_rejected_by_the_library(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": HALF,
        "tests/test_a.py": PROPERTY_TEST,
    }
    added = {"mypkg/__init__.py": HALF_REJECTS}
    why = "the test's own function raised UnsatisfiedAssumption"
    held_pytest(scratch, files, added, "JBFORGED example rejected by the library", PLAIN, why)


# -- 6. an async test case's coroutine never run: asyncio's Runner made to drop every
# coroutine unstarted (a mock of the standard library's: no frame of the patch's on the
# stack). An async test case awaits its test, so its test must have run.

ASYNC_TESTS = UNITTEST_TESTS.replace(
    "unittest.TestCase", "unittest.IsolatedAsyncioTestCase"
).replace("    def test_", "    async def test_")
NEVER_STARTED = (
    ON_LOADING
    + """
from unittest import mock as _mock


def _on_load():
    runners = _sys.modules.get("asyncio.runners")
    runner = getattr(runners, "Runner", None)
    if runner is not None and not isinstance(vars(runner).get("run"), _mock.Mock):
        # A callable of the standard library's: no frame of the patch's is ever on the
        # stack, and every coroutine handed to it is dropped unstarted.
        runner.run = _mock.Mock(return_value=None)
        print("JBFORGED async tests' coroutines dropped unstarted", flush=True)
"""
)


@pytest.mark.parametrize("python", [p for p in MONITORED if version_of(p) >= (3, 11)])
def test_an_async_test_s_coroutine_never_started(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=NEVER_STARTED, tests=ASYNC_TESTS)
    why = "the report says passed but the test's function never ran"
    held(channel, output, "JBFORGED async tests' coroutines dropped unstarted", BUG, why)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q", "-p", "no:randomly"]))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio's Runner is 3.11's")
def test_an_async_test_s_coroutine_never_started_under_pytest(scratch: Path) -> None:
    tests = ASYNC_TESTS.replace("import lib", "import mypkg as lib").replace(
        "test_bug", "test_real"
    )
    library = "def double(x):\n    return x * 2 if x != 3 else 7\n"
    payload = (
        ON_COLLECTION
        + library
        + NEVER_STARTED[len(ON_LOADING) :].replace("def _on_load", "def _on_collection")
    )
    files = {"pytest.ini": "[pytest]\n", "mypkg/__init__.py": library, "tests/test_a.py": tests}
    marker = "JBFORGED async tests' coroutines dropped unstarted"
    why = "the report says passed but the test's function never ran"
    held_pytest(scratch, files, {"mypkg/__init__.py": payload}, marker, REAL, why)
