"""Routes through the test case itself: its method name, its assertions, its equality
functions, its class's attributes around the call, the observer inside its wrappers fed
and taken out, and its `self`. Each a source-only patch to the library, run for real
under the monitor; each payload prints a marker (`JBFORGED ...`) to prove it ran, and
each run must come out with the forgery found, named for what it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.pipeline.test_pytest_run import run_plan
from tests.pipeline.test_test_code_routes import (
    CMD,
    MONITORED,
    ON_COLLECTION,
    ON_EACH_RUNNER,
    ON_LOADING,
    PLAIN_TEST,
    UNITTEST_CASE,
    UNITTEST_TESTS,
    forged_on_the_test_class,
)
from tests.pipeline.test_unittest_run import run

BUG = "tests.test_t.T.test_bug"
REAL = "tests/test_a.py::T::test_real"
PLAIN = "tests/test_a.py::test_real"


def caught(channel: Any, output: str, marker: str, why: str, test: str = BUG) -> None:
    """The marker printed, and the forgery found for what it is."""
    assert marker in output, output
    assert any(why in found and test in found for found in channel.forged), (
        channel.forged,
        channel.outcomes.get(test),
    )


def caught_pytest(scratch: Path, tests: str, payload: str, marker: str, why: str) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "VALUE = 1\n",
        "tests/test_a.py": tests,
    }
    _, result, channel = run_plan(scratch, files, CMD, added={"mypkg/__init__.py": payload})
    caught(channel, result.output, marker, why, REAL if "class T" in tests else PLAIN)


# The test cases unittest's loader has made so far (its frames' lists and suites), as
# the loader asks the library module whether it is a class.
INSTANCES = """
def _instances():
    found, frame = [], _sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            todo = [value] if isinstance(value, (list, _unittest.TestSuite)) else []
            while todo:
                item = todo.pop()
                if isinstance(item, list):
                    todo.extend(item)
                elif isinstance(item, _unittest.TestSuite):
                    todo.extend(item._tests)
                elif isinstance(item, _unittest.TestCase) and item not in found:
                    found.append(item)
        frame = frame.f_back
    return found


_once = []


def _bug():
    # Only on the loader's first question: the monitor's checks ask the module too, and
    # may not see frames read while they run.
    if _once:
        return
    _once.append(1)
    for test in _instances():
        if type(test).__name__ == "T" and str(test._testMethodName) == "test_bug":
            yield test
"""


# -- 1. the test's method name a str subclass naming a sibling ------------------------------

NAME_SUBCLASS = (
    ON_LOADING
    + INSTANCES
    + """
class _Name(str):
    def __str__(self):
        return "test_bug"


def _on_load():
    for test in _bug():
        if type(test._testMethodName) is str:
            test._testMethodName = _Name("test_ok")
            print("JBFORGED test_bug runs test_ok under its name", flush=True)
"""
)


@pytest.mark.parametrize("python", MONITORED)
def test_method_name_str_subclass_runs_sibling(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=NAME_SUBCLASS, tests=UNITTEST_TESTS)
    why = "the test's method name is a _Name, not a str"
    caught(channel, output, "JBFORGED test_bug runs test_ok under its name", why)


# -- 2. a swallowing wrapper of the standard library's on the test's instance -------------

SWALLOW_ON_INSTANCE = (
    ON_LOADING
    + INSTANCES
    + """
def _on_load():
    for test in _bug():
        if "test_bug" not in vars(test):
            method = getattr(test, "test_bug")
            test.test_bug = _unittest.case._Outcome().testPartExecutor(None)(method)
            print("JBFORGED swallowing wrapper on the instance", flush=True)
"""
)


@pytest.mark.parametrize("python", MONITORED)
def test_swallowing_wrapper_on_the_instance(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=SWALLOW_ON_INSTANCE, tests=UNITTEST_TESTS)
    why = "the test's own function raised AssertionError"
    caught(channel, output, "JBFORGED swallowing wrapper on the instance", why)


# -- 3. the test case's own equality functions: assertEqual made vacuous ------------------

EQUALITY_FUNCS = (
    ON_LOADING
    + INSTANCES
    + """
def _on_load():
    for test in _bug():
        if test._type_equality_funcs.get(int) is None:
            test._type_equality_funcs[int] = "assertGreaterEqual"
            print("JBFORGED assertEqual made vacuous", flush=True)
"""
)


@pytest.mark.parametrize("python", MONITORED)
def test_type_equality_funcs_on_the_instance(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=EQUALITY_FUNCS, tests=UNITTEST_TESTS)
    why = "the test case's equality function for int is not the suite's"
    caught(channel, output, "JBFORGED assertEqual made vacuous", why)


# -- 4. an assertion method shadowed on the instance by a stdlib callable -----------------

ASSERT_SHADOWED = (
    ON_LOADING
    + INSTANCES
    + """
from unittest import mock as _mock


def _on_load():
    for test in _bug():
        if "assertEqual" not in vars(test):
            test.assertEqual = _mock.Mock()
            print("JBFORGED assertEqual shadowed", flush=True)
"""
)


@pytest.mark.parametrize("python", MONITORED)
def test_assertion_method_shadowed_on_the_instance(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=ASSERT_SHADOWED, tests=UNITTEST_TESTS)
    why = "the test case's own assertEqual shadows its class's"
    caught(channel, output, "JBFORGED assertEqual shadowed", why)


# -- 5. the same vacuous assertEqual under pytest (a unittest case), from a plugin of the
# library's on a hook no report passes through (the item's instance is made at collection)

REGISTER = """
def _register(plugin):
    frame = _sys._getframe(1)
    while frame is not None:
        config = frame.f_locals.get("config")
        if config is not None and hasattr(config, "pluginmanager"):
            if not config.pluginmanager.is_registered(plugin):
                config.pluginmanager.register(plugin, "jb")
            return
        frame = frame.f_back
"""
EQUALITY_FUNCS_PYTEST = (
    ON_COLLECTION
    + REGISTER
    + """
from unittest import mock as _mock


class _Plugin:
    def pytest_collection_modifyitems(self, session, config, items):
        for item in items:
            if item.name == "test_real":
                item.instance.addTypeEqualityFunc(int, _mock.Mock())
                print("JBFORGED assertEqual made vacuous", flush=True)


_PLUGIN = _Plugin()


def _on_collection():
    _register(_PLUGIN)
"""
)


def test_type_equality_funcs_on_the_instance_under_pytest(scratch: Path) -> None:
    why = "the test case's equality function for int is not the suite's"
    marker = "JBFORGED assertEqual made vacuous"
    caught_pytest(scratch, UNITTEST_CASE, EQUALITY_FUNCS_PYTEST, marker, why)


# -- 6. an assertion method put on the test CLASS (not machinery) before the first look ---

ASSERT_ON_CLASS = """
from unittest import mock as _mock


def _forge(cls, name):
    if "assertEqual" not in vars(cls):
        cls.assertEqual = _mock.Mock()
        print("JBFORGED assertEqual on the test class", flush=True)
"""


@pytest.mark.parametrize("runner, python", ON_EACH_RUNNER)
def test_assertion_method_on_the_test_class(scratch: Path, runner: str, python: str) -> None:
    output, forged, name = forged_on_the_test_class(scratch, runner, python, ASSERT_ON_CLASS)
    assert "JBFORGED assertEqual on the test class" in output, output
    why = "T.assertEqual of the test case is not its own file's code"
    assert any(why in found and name in found for found in forged), forged


# -- 7. mock.patch.object(T, "assertEqual", Mock()) as the test's decorator: the class is
# written (and put back) by mock at call time, no frame of the patch's on the stack

PATCHED_DURING_CALL = (
    ON_LOADING
    + """
from unittest import mock as _mock


def _on_load():
    for cls in _test_classes():
        value = vars(cls).get("test_bug")
        if type(value) is type(_on_load) and "__wrapped__" not in vars(value):
            cls.test_bug = _mock.patch.object(cls, "assertEqual", _mock.Mock())(value)
            print("JBFORGED assertEqual patched around test_bug", flush=True)
"""
)


@pytest.mark.parametrize("python", MONITORED)
def test_mock_patch_of_the_test_class_around_the_call(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=PATCHED_DURING_CALL, tests=UNITTEST_TESTS)
    why = "T.assertEqual of the test case is not its own file's code"
    caught(channel, output, "JBFORGED assertEqual patched around test_bug", why)


# -- 8. observe_within's observer fed a harmless call, then taken out of the cell ----------
# A swallowing wrapper of the standard library's holds the test's def; as unittest prints
# the test's description (after the observers are in place), an object of the library's
# on the test's `_testMethodDoc` calls the inner observer with a Mock for `self` (it
# returns) and puts the def back in the cell: the real call raises unheard, swallowed.

FED_THEN_REMOVED = (
    ON_LOADING
    + INSTANCES
    + """
import functools as _functools
from unittest import mock as _mock


def _feed(wrapper, function):
    for cell in wrapper.__closure__ or ():
        value = cell.cell_contents
        if value is not function and getattr(value, "__wrapped__", None) is function:
            value(_mock.Mock(unsafe=True))
            cell.cell_contents = function
            print("JBFORGED inner observer fed and removed", flush=True)


class _Doc:
    def __init__(self, test):
        self.test = test

    def __bool__(self):
        wrapper = vars(type(self.test)).get("test_bug")
        if wrapper is not None:
            _feed(wrapper, wrapper.__wrapped__)
        return False


def _on_load():
    for test in _bug():
        cls = type(test)
        value = vars(cls).get("test_bug")
        if type(value) is type(_on_load) and "__wrapped__" not in vars(value):
            cls.test_bug = _unittest.case._Outcome().testPartExecutor(None)(value)
        test._testMethodDoc = _Doc(test)
        print("JBFORGED swallowing wrapper and trigger", flush=True)
"""
)


@pytest.mark.parametrize("python", MONITORED)
def test_inner_observer_fed_then_taken_out(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=FED_THEN_REMOVED, tests=UNITTEST_TESTS)
    marker = "JBFORGED inner observer fed and removed"
    caught(channel, output, marker, "the test's observer was called by")
    caught(channel, output, marker, "the observer of the test's own function was taken out")


# -- 9. the same under pytest: the trigger is the test's `_testMethodName`, a str whose
# hash runs as unittest looks the (observed) method up

FED_THEN_REMOVED_PYTEST = (
    ON_COLLECTION
    + REGISTER
    + """
from unittest import mock as _mock


def _feed(wrapper, function):
    for cell in wrapper.__closure__ or ():
        value = cell.cell_contents
        if value is not function and getattr(value, "__wrapped__", None) is function:
            value(_mock.Mock(unsafe=True))
            cell.cell_contents = function
            print("JBFORGED inner observer fed and removed", flush=True)


class _Name(str):
    def __hash__(self):
        for cls in _CLASSES:
            wrapper = vars(cls).get("test_real")
            if wrapper is not None and "__wrapped__" in vars(wrapper):
                _feed(wrapper, wrapper.__wrapped__)
        return str.__hash__(self)

    def __eq__(self, other):
        return str.__eq__(self, other)


_CLASSES = []


class _Plugin:
    def pytest_collection_modifyitems(self, session, config, items):
        for item in items:
            if item.name == "test_real":
                item.instance._testMethodName = _Name("test_real")
                print("JBFORGED trigger set", flush=True)


_PLUGIN = _Plugin()


def _on_collection():
    for module, namespace in _test_modules():
        cls = namespace.get("T")
        value = vars(cls).get("test_real") if isinstance(cls, type) else None
        if type(value) is type(_on_collection) and "__wrapped__" not in vars(value):
            cls.test_real = _unittest.case._Outcome().testPartExecutor(None)(value)
            _CLASSES.append(cls)
            _register(_PLUGIN)
"""
)


def test_inner_observer_fed_then_taken_out_under_pytest(scratch: Path) -> None:
    why = "the observer of the test's own function was taken out"
    marker = "JBFORGED inner observer fed and removed"
    caught_pytest(scratch, UNITTEST_CASE, FED_THEN_REMOVED_PYTEST, marker, why)


# -- 10. the def called with a MagicMock for `self`, BY KEYWORD, by mock's own decorator:
# patch.multiple(..., create=True, self=DEFAULT) behind a staticmethod: no bound method or
# partial on the way binds anything; the observer inside the wrapper sees the call.

SELF_BY_KEYWORD = """
import types as _types2
from unittest import mock as _mock


_MOCK = __import__("functools").partial(_mock.MagicMock, unsafe=True)


def _by_keyword(value):
    target = _types2.SimpleNamespace()
    patched = _mock.patch.multiple(target, create=True, self=_mock.DEFAULT, new_callable=_MOCK)
    return staticmethod(patched(value))
"""
BY_KEYWORD = (
    SELF_BY_KEYWORD
    + """
def _forge(cls, name):
    value = vars(cls).get(name)
    if type(value) is type(_forge):
        setattr(cls, name, _by_keyword(value))
        print("JBFORGED", name, "given a Mock self by keyword", flush=True)
"""
)


@pytest.mark.parametrize("runner, python", ON_EACH_RUNNER)
def test_mock_self_by_keyword_through_patch_multiple(
    scratch: Path, runner: str, python: str
) -> None:
    output, forged, name = forged_on_the_test_class(scratch, runner, python, BY_KEYWORD)
    assert f"JBFORGED {name} given a Mock self by keyword" in output, output
    why = "the test's own function was called with a MagicMock as self"
    assert any(why in found and name in found for found in forged), forged


# -- 11. the expected-failure flag written on the test's def: unittest files it as an
# expected failure (skipped), never a pass

EXPECTING_FAILURE = (
    ON_LOADING
    + """
def _on_load():
    for cls in _test_classes():
        value = vars(cls).get("test_bug")
        expecting = vars(value).get("__unittest_expecting_failure__")
        if type(value) is type(_on_load) and not expecting:
            setattr(value, "__unittest_expecting_failure__", True)
            print("JBFORGED test_bug expected to fail", flush=True)
"""
)


@pytest.mark.parametrize("python", MONITORED)
def test_expecting_failure_flag_on_the_def(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=EXPECTING_FAILURE, tests=UNITTEST_TESTS)
    assert "JBFORGED test_bug expected to fail" in output, output
    assert channel.outcomes.get(BUG) == "skipped", channel.outcomes  # an expected failure


# -- 12. pytest's item.runtest replaced on the item by a builtin that calls nothing -----

RUNTEST_REPLACED = (
    ON_COLLECTION
    + REGISTER
    + """
class _Plugin:
    def pytest_collection_modifyitems(self, session, config, items):
        for item in items:
            if item.name == "test_real":
                item.runtest = dict
                print("JBFORGED runtest replaced", flush=True)


_PLUGIN = _Plugin()


def _on_collection():
    _register(_PLUGIN)
"""
)


def test_item_runtest_replaced_by_a_builtin(scratch: Path) -> None:
    why = "the report says passed but the test's function never ran"
    caught_pytest(scratch, PLAIN_TEST, RUNTEST_REPLACED, "JBFORGED runtest replaced", why)


# -- 13. a swallowing context manager from a file the run wrote outside the tree (/tmp):
# judged as a library's by where it comes from, heard by the observer inside the wrapper

FROM_TMP = (
    ON_COLLECTION
    + '''
import contextlib as _contextlib
import importlib as _importlib

_SOURCE = """
import contextlib


@contextlib.contextmanager
def swallow():
    try:
        yield
    except AssertionError:
        print("JBFORGED swallowed by /tmp code", flush=True)
"""


def _outside():
    with open("/tmp/jb_outside.py", "w") as fh:
        fh.write(_SOURCE)
    _sys.path.insert(0, "/tmp")
    try:
        return _importlib.import_module("jb_outside")
    finally:
        _sys.path.remove("/tmp")


def _on_collection():
    for module, namespace in _test_modules():
        value = namespace.get("test_real")
        if type(value) is type(_on_collection) and "__wrapped__" not in vars(value):
            namespace["test_real"] = _outside().swallow()(value)
            print("JBFORGED wrapped by /tmp code", flush=True)
'''
)


def test_swallowing_context_manager_from_outside_the_tree(scratch: Path) -> None:
    why = "the test's own function raised AssertionError"
    caught_pytest(scratch, PLAIN_TEST, FROM_TMP, "JBFORGED wrapped by /tmp code", why)


# A class decorator of a library's (Django's `isolate_apps`, `override_settings` on a
# plain test case) puts a setUp of its own making on the test class, around the class's.
ISOLATING_LIB = """
def double(x):
    return x * 2 if x != 3 else 7


def isolated(cls):
    decorated = cls.setUp

    def setUp(self):
        self.isolated = True
        decorated(self)

    cls.setUp = setUp
    return cls
"""
ISOLATED_TESTS = """\
import unittest

import lib


@lib.isolated
class T(unittest.TestCase):
    def setUp(self):
        self.seen = 1

    def test_ok(self):
        self.assertEqual((lib.double(2), self.seen, self.isolated), (4, 1, True))
"""


@pytest.mark.parametrize("python", MONITORED)
def test_a_library_s_class_decorator_around_set_up_is_not_tampering(
    scratch: Path, python: str
) -> None:
    channel, output, _ = run(scratch, python, tests=ISOLATED_TESTS, lib=ISOLATING_LIB)
    assert not channel.forged, channel.forged
    assert channel.outcomes.get("tests.test_t.T.test_ok") == "passed", output
