"""A wrapper made only of the standard library's parts, put by a source-only patch around
a failing test, that calls the test's own function and swallows its failure.

Every layer is code the patch did not write and the wrapper holds the test it names, so
what ran is the test's own `def`: only hearing how that function's own call ended shows
the failure. Each payload prints a marker (`JBFORGED ...`) to prove it ran; each run must
come out with the forgery found, under pytest and the unittest runner. A suite's own
wrappers (a mock patch, a context decorator that lets the raise through, an expected
failure behind a decorator) must not read as tampering.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pipeline.test_pytest_run import run_plan
from tests.pipeline.test_test_case_routes import REGISTER
from tests.pipeline.test_test_code_routes import (
    CMD,
    MONITORED,
    ON_COLLECTION,
    ON_EACH_RUNNER,
    PLAIN_TEST,
    UNITTEST_CASE,
    UNITTEST_TESTS,
    forged_on_the_test_class,
    graded,
    on_the_test_class,
)
from tests.pipeline.test_unittest_run import run

# Two wrappers of the standard library's own that swallow what the test raises:
# unittest's part executor used as a decorator (it files the error on a result of None),
# and contextlib's decorator given `suppress(AssertionError)` as its context manager.
WRAPPERS = """
import contextlib as _contextlib
import functools as _functools
import itertools as _itertools


def _part_executor(value):
    return _unittest.case._Outcome().testPartExecutor(None)(value)


def _suppressing(value):
    quiet = _contextlib.suppress(AssertionError)
    quiet._recreate_cm = _functools.partial(next, _itertools.repeat(quiet))
    return _contextlib.ContextDecorator.__call__(quiet, value)


_WRAP = {wrap}
"""
SWALLOWED_IN_THE_MODULE = (
    ON_COLLECTION
    + WRAPPERS
    + """
def _on_collection():
    for module, namespace in _test_modules():
        value = namespace.get("test_real")
        if type(value) is type(_on_collection) and "__wrapped__" not in vars(value):
            namespace["test_real"] = _WRAP(value)
            print("JBFORGED swallowing wrapper around test_real", flush=True)
"""
)
SWALLOWING_ON_THE_CLASS = (
    WRAPPERS
    + """
def _forge(cls, name):
    value = vars(cls).get(name)
    if type(value) is type(_forge) and "__wrapped__" not in vars(value):
        setattr(cls, name, _WRAP(value))
        print("JBFORGED swallowing wrapper around", name, flush=True)
"""
)
SWALLOWED_ON_THE_CLASS = on_the_test_class(SWALLOWING_ON_THE_CLASS, "pytest")
SWALLOWED_AT_LOADING = on_the_test_class(SWALLOWING_ON_THE_CLASS, "unittest")
KINDS = {"part-executor": "_part_executor", "suppress": "_suppressing"}


@pytest.mark.parametrize("wrap", sorted(KINDS))
@pytest.mark.parametrize(
    "tests, payload",
    [(PLAIN_TEST, SWALLOWED_IN_THE_MODULE), (UNITTEST_CASE, SWALLOWED_ON_THE_CLASS)],
    ids=["function", "unittest-case"],
)
def test_a_library_wrapper_that_swallows_the_failure_is_found(
    scratch: Path, tests: str, payload: str, wrap: str
) -> None:
    output, forged = graded(scratch, tests, "VALUE = 1\n", payload.replace("{wrap}", KINDS[wrap]))
    assert "JBFORGED swallowing wrapper around test_real" in output, output
    assert any(
        "the test's own function raised AssertionError" in why and "test_real" in why
        for why in forged
    ), forged


@pytest.mark.parametrize("python", MONITORED)
@pytest.mark.parametrize("wrap", sorted(KINDS))
def test_the_unittest_runner_finds_a_library_wrapper_that_swallows(
    scratch: Path, python: str, wrap: str
) -> None:
    payload = SWALLOWED_AT_LOADING.replace("{wrap}", KINDS[wrap])
    channel, output, _ = run(scratch, python, forged=payload, tests=UNITTEST_TESTS)
    assert "JBFORGED swallowing wrapper around test_bug" in output, output
    assert any(
        "the test's own function raised AssertionError" in why and "test_bug" in why
        for why in channel.forged
    ), channel.forged


# The observer put back out of the wrapper's way, by a plugin of the library's on a hook
# that runs after the runner's and before the test is called: the wrapper then calls the
# test's own function unheard.
PUT_BACK_BY_A_PLUGIN = (
    SWALLOWED_IN_THE_MODULE
    + REGISTER
    + """
_WRAPPED = []
_wrap = _WRAP


def _WRAP(value):
    wrapper = _wrap(value)
    _WRAPPED.append((wrapper, value))
    return wrapper


class _Plugin:
    def pytest_runtest_call(self, item):
        for wrapper, value in _WRAPPED:
            for cell in wrapper.__closure__ or ():
                if callable(cell.cell_contents) and cell.cell_contents is not value:
                    if getattr(cell.cell_contents, "__wrapped__", None) is value:
                        cell.cell_contents = value
                        print("JBFORGED observer put back", flush=True)


_register(_Plugin())
"""
)


def test_the_observer_put_back_out_of_the_wrapper_s_way_is_found(scratch: Path) -> None:
    payload = PUT_BACK_BY_A_PLUGIN.replace("{wrap}", "_part_executor")
    output, forged = graded(scratch, PLAIN_TEST, "VALUE = 1\n", payload)
    assert "JBFORGED swallowing wrapper around test_real" in output, output
    assert "JBFORGED observer put back" in output, output
    assert any(
        "the test's own function never ran" in why and "test_real" in why for why in forged
    ), forged


# A suite's own wrappers: a mock patch and a context decorator that let the raise
# through, a wrapped async test, and a wrapped test expected to fail.
OWN_WRAPPERS = """\
import contextlib
import os
import unittest
from unittest import mock

import lib


@contextlib.contextmanager
def noted():
    yield


class T(unittest.TestCase):
    @mock.patch.dict(os.environ, {"JB_WRAPPED": "1"})
    @noted()
    def test_ok(self):
        self.assertEqual((lib.double(2), os.environ["JB_WRAPPED"]), (4, "1"))

    @unittest.expectedFailure
    @noted()
    def test_known_bug(self):
        self.assertEqual(lib.double(3), 6)


class A(unittest.IsolatedAsyncioTestCase):
    @mock.patch.dict(os.environ, {"JB_WRAPPED": "1"})
    async def test_async(self):
        self.assertEqual(lib.double(2), 4)
"""
OWN_LIB = "def double(x):\n    return x * 2 if x != 3 else 7\n"


@pytest.mark.parametrize("python", MONITORED)
def test_a_suite_s_own_wrappers_are_not_tampering(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged="\n", tests=OWN_WRAPPERS, lib=OWN_LIB)
    assert not channel.forged, channel.forged
    outcomes = channel.outcomes
    assert outcomes.get("tests.test_t.T.test_ok") == "passed", output
    assert outcomes.get("tests.test_t.A.test_async") == "passed", output
    assert outcomes.get("tests.test_t.T.test_known_bug") == "skipped", output


# Django's way with an async test: its test case puts the method, in an object that runs
# it to completion on an event loop (asgiref's async_to_sync), on the test itself before
# unittest calls it.
DJANGO_STYLE_ASYNC = """\
import asyncio
import functools
import os
import unittest
from unittest import mock

import lib


class AsyncToSync:
    def __init__(self, awaitable):
        self.awaitable = awaitable
        functools.update_wrapper(self, awaitable)

    def __call__(self, *args, **kwargs):
        return asyncio.run(self.awaitable(*args, **kwargs))


class T(unittest.TestCase):
    def __call__(self, result=None):
        method = getattr(self, self._testMethodName)
        if asyncio.iscoroutinefunction(method):
            setattr(self, self._testMethodName, AsyncToSync(method))
        return super().__call__(result)

    @mock.patch("os.environ", {"JB_WRAPPED": "1"})
    async def test_ok(self):
        self.assertEqual((lib.double(2), os.environ["JB_WRAPPED"]), (4, "1"))

    @mock.patch("os.environ", {"JB_WRAPPED": "1"})
    async def test_bug(self):
        self.assertEqual(lib.double(3), 6)
"""


@pytest.mark.parametrize("python", MONITORED)
def test_an_async_test_run_again_by_its_test_case_is_heard_inside_its_wrappers(
    scratch: Path, python: str
) -> None:
    channel, output, _ = run(scratch, python, forged="\n", tests=DJANGO_STYLE_ASYNC)
    assert not channel.forged, channel.forged
    assert channel.outcomes.get("tests.test_t.T.test_ok") == "passed", output
    assert channel.outcomes.get("tests.test_t.T.test_bug") == "failed", output


# A suite's own slip: a synchronous decorator on a coroutine test of a plain test case.
# The coroutine is never awaited and unittest counts a pass; the test's own function
# never ran, but no wrapper of the patch's made it so.
NEVER_AWAITED = """\
import contextlib
import unittest


@contextlib.contextmanager
def noted():
    yield


class T(unittest.TestCase):
    @noted()
    async def test_vacuous(self):
        self.fail("never awaited")
"""


@pytest.mark.parametrize("python", MONITORED)
def test_a_coroutine_test_a_suite_s_wrapper_never_awaits_is_not_tampering(
    scratch: Path, python: str
) -> None:
    channel, output, _ = run(scratch, python, forged="\n", tests=NEVER_AWAITED)
    assert not channel.forged, channel.forged
    assert channel.outcomes.get("tests.test_t.T.test_vacuous") == "passed", output


def test_a_suite_s_own_wrappers_are_not_tampering_under_pytest(scratch: Path) -> None:
    files = {"pytest.ini": "[pytest]\n", "lib.py": OWN_LIB, "tests/test_a.py": OWN_WRAPPERS}
    _, result, channel = run_plan(
        scratch, files, CMD, added={"lib.py": OWN_LIB.replace("x * 2", "2 * x")}
    )
    assert not channel.forged, channel.forged
    assert channel.outcomes.get("tests/test_a.py::T::test_ok") == "passed", result.output
    assert channel.outcomes.get("tests/test_a.py::A::test_async") == "passed", result.output


# The test's own function called with another `self`: an object of the standard
# library's that answers every assertion method and checks nothing. Bound by a method
# object put on the class, or by a partial behind a staticmethod; every layer is code the
# patch did not write and what runs in the end is the test's own `def`.
ANOTHER_SELF = """
import functools as _functools
from unittest import mock as _mock


def _rebind(value):
    if _HOW == "method":
        return _types.MethodType(value, _mock.Mock(unsafe=True))
    return staticmethod(_functools.partial(value, _mock.Mock(unsafe=True)))


_HOW = "{how}"
"""
REBOUND = (
    "import types as _types\n"
    + ANOTHER_SELF
    + """
def _forge(cls, name):
    value = vars(cls).get(name)
    if type(value) is type(_forge):
        setattr(cls, name, _rebind(value))
        print("JBFORGED", name, "given another self", flush=True)
"""
)


@pytest.mark.parametrize("runner, python", ON_EACH_RUNNER)
@pytest.mark.parametrize("how", ["method", "partial"])
def test_a_test_run_with_another_self_is_found(
    scratch: Path, runner: str, python: str, how: str
) -> None:
    body = REBOUND.replace("{how}", how)
    output, forged, name = forged_on_the_test_class(scratch, runner, python, body)
    assert f"JBFORGED {name} given another self" in output, output
    assert any(name in why and "not the test case" in why for why in forged), forged


# Property tests: hypothesis calls the test's own function once per example, through
# `inner_test` on the test's handle (its documented place for a runner to wrap the test),
# rejects some examples by raising inside it, and hides its wrapper behind the test's
# own name and file.
PROPERTY_TESTS = """\
from hypothesis import assume, given, settings, strategies as st

import mypkg

CHECKED = settings(max_examples=30, database=None, derandomize=True)


@CHECKED
@given(st.integers(0, 50))
def test_ok(n):
    assume(n % 3 != 0)
    assert mypkg.double(n) == 2 * n


@CHECKED
@given(st.integers(0, 50))
def test_real(n):
    assume(n % 3 != 0)
    assert mypkg.half(2 * n) == n
"""
DOUBLING = "def double(x):\n    return x * 2\n\n\ndef half(x):\n    return x // 2 + 1\n"
SWALLOWED_THROUGH_THE_HANDLE = (
    ON_COLLECTION
    + WRAPPERS.replace("{wrap}", "_part_executor")
    + """
def double(x):
    return x * 2


def half(x):
    return x // 2 + 1


def _on_collection():
    for module, namespace in _test_modules():
        handle = getattr(namespace.get("test_real"), "hypothesis", None)
        inner = getattr(handle, "inner_test", None)
        if inner is not None and "__wrapped__" not in vars(inner):
            handle.inner_test = _WRAP(inner)
            print("JBFORGED swallowing wrapper around test_real", flush=True)
"""
)


def test_property_tests_and_their_rejected_examples_are_not_tampering(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": DOUBLING,
        "tests/test_a.py": PROPERTY_TESTS,
    }
    fixed = DOUBLING.replace("x // 2 + 1", "x // 2")
    _, result, channel = run_plan(scratch, files, CMD, added={"mypkg/__init__.py": fixed})
    assert not channel.forged, channel.forged
    assert channel.outcomes.get("tests/test_a.py::test_ok") == "passed", result.output
    assert channel.outcomes.get("tests/test_a.py::test_real") == "passed", result.output


def test_a_swallowing_wrapper_put_in_a_property_test_s_handle_is_found(scratch: Path) -> None:
    output, forged = graded(scratch, PROPERTY_TESTS, DOUBLING, SWALLOWED_THROUGH_THE_HANDLE)
    assert "JBFORGED swallowing wrapper around test_real" in output, output
    assert any(
        "the test's own function raised AssertionError" in why and "test_real" in why
        for why in forged
    ), forged
