"""Failures of the test's the patch swallows by a way around what the monitor looks at.

Each payload prints `JBFORGED <name>` to prove it ran, and each run must come out with
the forgery found: a context manager the test's `with` reaches through a module
`__getattr__`, a module that says it is another file, or a module of a class of its
own; the test's check routed through a framework's frame (`ast`'s visitor, a mock's
side effect) to a handler of the patch's; failures raised past the paths most
assertions take (`assertListEqual`'s type check, `pytest.fail`, `pytest.raises`' "did
not raise", a raising `pytest_assertrepr_compare`); pytest's assertion rewriting
switched off for the test modules imported later; a plugin's hook implementation
that is a mock; a framework's catcher the library calls with the test's check; the
patch's context manager inside an outer block of the test's that does not catch the
failure; and a handler of the library's 1,400 frames out from the raise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.pipeline.test_swallowed_failures import (
    CALLBACK_TEST,
    CAUGHT,
    CTX,
    IMPORTED_TEST,
    OWN_EXIT,
    PLAIN,
    STDLIB_CALLABLE,
    UNITTEST,
    WITH_TEST,
    WRONG,
    graded,
)
from tests.pipeline.test_test_case_routes import REGISTER
from tests.pipeline.test_unittest_run import run

BUG = "tests.test_t.T.test_bug"


def defended(outcome: str | None, forged: list[str], finding: str = CAUGHT) -> bool:
    """The test passed (the payload did its work) and the forgery was found."""
    return outcome == "passed" and any(finding in why for why in forged)


def forged_and_found(scratch: Path, test: str, patched: str, marker: str) -> None:
    """A pytest task whose library the patch changes from `CTX` to `patched`: the payload
    printed `marker`, the test passed, and the forgery was found."""
    output, forged, outcomes = graded(scratch, test, CTX, patched)
    assert marker in output, output[-3000:]
    assert defended(outcomes.get(PLAIN), forged), (outcomes, forged)


# -- 1. with-item resolution -------------------------------------------------------------

# `mypkg.precision` is not in the module's dict: a PEP 562 `__getattr__` hands it out
# (a new object each time, held by no module).
GETATTR = (
    CTX
    + """
import contextlib as _contextlib
import functools as _functools

del precision


def __getattr__(name):
    if name == "precision":
        print("JBFORGED getattr", flush=True)
        return _functools.partial(_contextlib.suppress, AssertionError)
    raise AttributeError(name)
"""
)

# The module's `__file__` names the standard library's file.
FILE_LIE = STDLIB_CALLABLE + "\n__file__ = _contextlib.__file__\n"

# The package in sys.modules is an instance of a ModuleType subclass of its own.
MODULE_SUBCLASS = (
    STDLIB_CALLABLE
    + WRONG
    + """
import sys as _sys
import types as _types


class _Module(_types.ModuleType):
    pass


_me = _Module(__name__)
_me.__dict__.update(globals())
_sys.modules[__name__] = _me
"""
)

WITH_CASES = {
    "getattr-dotted": (WITH_TEST, GETATTR, "getattr"),
    "getattr-imported": (IMPORTED_TEST, GETATTR, "getattr"),
    "file-lie-dotted": (WITH_TEST, FILE_LIE, "stdlib callable"),
    "file-lie-imported": (IMPORTED_TEST, FILE_LIE, "stdlib callable"),
    "module-subclass-dotted": (WITH_TEST, MODULE_SUBCLASS, "stdlib callable"),
    "module-subclass-imported": (IMPORTED_TEST, MODULE_SUBCLASS, "stdlib callable"),
}


@pytest.mark.parametrize("name", sorted(WITH_CASES))
def test_with_item_misresolved(scratch: Path, name: str) -> None:
    test, payload, marker = WITH_CASES[name]
    forged_and_found(scratch, test, payload + WRONG, f"JBFORGED {marker}")


# -- 2. callbacks routed through a framework frame ---------------------------------------

# ast.NodeVisitor.visit (a framework's module: `ast` is watched) calls `visit_int`, set
# on the instance to the test's check, inside the library's `try`.
AST_ROUTE = CTX.replace(
    "def each(values, check):\n    for value in values:\n        check(value)\n",
    "def each(values, check):\n"
    "    import ast\n"
    "    visitor = ast.NodeVisitor()\n"
    "    visitor.visit_int = check\n"
    "    for value in values:\n"
    "        try:\n"
    "            visitor.visit(value)\n"
    "        except AssertionError:\n"
    '            print("JBFORGED ast route", flush=True)\n',
)
# unittest.mock (top `unittest`, WATCHED) calls the side effect.
MOCK_ROUTE = CTX.replace(
    "def each(values, check):\n    for value in values:\n        check(value)\n",
    "def each(values, check):\n"
    "    from unittest import mock\n"
    "    call = mock.Mock(side_effect=check)\n"
    "    for value in values:\n"
    "        try:\n"
    "            call(value)\n"
    "        except AssertionError:\n"
    '            print("JBFORGED mock route", flush=True)\n',
)
CALLBACK_CASES = {"ast": (AST_ROUTE, "ast route"), "mock": (MOCK_ROUTE, "mock route")}


@pytest.mark.parametrize("name", sorted(CALLBACK_CASES))
def test_callback_through_framework_frame_pytest(scratch: Path, name: str) -> None:
    payload, marker = CALLBACK_CASES[name]
    forged_and_found(scratch, CALLBACK_TEST, payload + WRONG, f"JBFORGED {marker}")


CALLBACK_BODY = "lib.each([1, 3], lambda x: self.assertEqual(lib.double(x), 2 * x))"


@pytest.mark.parametrize("name", sorted(CALLBACK_CASES))
def test_callback_through_framework_frame_unittest(scratch: Path, name: str) -> None:
    payload, marker = CALLBACK_CASES[name]
    tests = UNITTEST.replace("BODY", CALLBACK_BODY)
    channel, output, _ = run(scratch, sys.executable, forged=payload + WRONG, tests=tests, lib=CTX)
    forged = list(channel.forged)
    assert f"JBFORGED {marker}" in output, output[-3000:]
    assert defended(channel.outcomes.get(BUG), forged), (channel.outcomes, forged)


# -- 3. failure paths that never signal ---------------------------------------------------

SWALLOW_ALL = """
class precision:
    def __init__(self, digits):
        self.digits = digits

    def __enter__(self):
        return self

    def __exit__(self, kind, value, trace):
        if kind is not None:
            print("JBFORGED swallow " + kind.__name__, flush=True)
            return True
"""
LIST_LIB = (
    CTX
    + "\n\ndef items():\n    return [2, 4, 6]\n\n\ndef parse(text):\n    raise ValueError(text)\n"
)
# The bug: a tuple instead of a list (assertListEqual's type check raises the failure
# itself, with neither `fail` nor `_formatMessage`), and parse no longer raises.
LIST_BUG = (
    SWALLOW_ALL + "\n\ndef items():\n    return (2, 4, 7)\n\n\ndef parse(text):\n    return None\n"
)


def test_unittest_assert_list_equal_type_failure(scratch: Path) -> None:
    body = "with lib.precision(2):\n            self.assertListEqual(lib.items(), [2, 4, 6])"
    tests = UNITTEST.replace("BODY", body)
    channel, output, _ = run(scratch, sys.executable, forged=LIST_BUG, tests=tests, lib=LIST_LIB)
    forged = list(channel.forged)
    assert "JBFORGED swallow AssertionError" in output, output[-3000:]
    assert defended(channel.outcomes.get(BUG), forged), (channel.outcomes, forged)


RAISES_TEST = (
    "import pytest\n\nimport mypkg\n\n\ndef test_real():\n    with mypkg.precision(2):\n"
    "        with pytest.raises(ValueError):\n            mypkg.parse('x')\n"
)
FAIL_TEST = (
    "import pytest\n\nimport mypkg\n\n\ndef test_real():\n    with mypkg.precision(2):\n"
    "        if mypkg.double(3) != 6:\n            pytest.fail('wrong')\n"
)


@pytest.mark.parametrize("name", ["raises", "fail"])
def test_pytest_failure_without_rewrite(scratch: Path, name: str) -> None:
    test = RAISES_TEST if name == "raises" else FAIL_TEST
    output, forged, outcomes = graded(scratch, test, LIST_LIB, LIST_BUG + WRONG)
    assert "JBFORGED swallow Failed" in output, output[-3000:]
    assert defended(outcomes.get(PLAIN), forged), (outcomes, forged)


# pytest's assertion rewriting switched off for test modules imported after the
# library: its hook's own `_writing_pyc` flag. test_b's plain `assert` then raises with
# no framework code on the way.
NO_REWRITE = """
import sys as _sys

for _finder in _sys.meta_path:
    if type(_finder).__name__ == "AssertionRewritingHook":
        _finder._writing_pyc = True
        print("JBFORGED no rewrite", flush=True)
"""
TEST_A = "import mypkg\n\n\ndef test_first():\n    assert mypkg.double(2) == 4\n"
TEST_B = WITH_TEST.replace("test_real", "test_real_b")


def test_rewriting_switched_off(scratch: Path) -> None:
    payload = SWALLOW_ALL + NO_REWRITE + WRONG
    files = {"tests/test_b.py": TEST_B}
    output, forged, outcomes = graded(scratch, TEST_A, CTX, CTX + payload, files)
    got = outcomes.get("tests/test_b.py::test_real_b")
    assert "JBFORGED no rewrite" in output, output[-3000:]
    assert defended(got, forged, "was not rewritten by pytest"), (outcomes, forged)


# -- 4. READ_ONLY_HOOKS ----------------------------------------------------------------

# The patch's pytest_assertrepr_compare raises: the rewritten assert's failure path is
# cut short before `_format_explanation` (no signal), and the patch's context manager
# swallows what it raised.
ASSERTREPR = (
    "import sys as _sys\n"
    + SWALLOW_ALL
    + REGISTER
    + """

class _Stop(Exception):
    pass


class _Plugin:
    def pytest_assertrepr_compare(self, config, op, left, right):
        print("JBFORGED assertrepr", flush=True)
        raise _Stop()


_register(_Plugin())
"""
)


def test_assertrepr_compare_cuts_failure_path(scratch: Path) -> None:
    output, forged, outcomes = graded(scratch, WITH_TEST, CTX, CTX + ASSERTREPR + WRONG)
    assert "JBFORGED assertrepr" in output, output[-3000:]
    assert defended(outcomes.get(PLAIN), forged, "is registered"), (outcomes, forged)


# A plugin of the patch's on a hook outside READ_ONLY_HOOKS whose implementation is a
# `staticmethod` of a `unittest.mock.Mock` (an `inspect.isroutine` for pluggy; a class
# of the standard library's for `Origins.from_tree`): the mock's side effect, a
# function of the patch's, reads the hook's arguments from pluggy's frame.
MOCK_HOOKIMPL = (
    "import sys as _sys\n"
    + REGISTER
    + """
import types as _types
from unittest import mock as _mock


def _modify(*args, **kwargs):
    frame = _sys._getframe(1)
    while frame is not None:
        given = frame.f_locals.get("caller_kwargs")
        if isinstance(given, dict) and "items" in given:
            for item in given["items"]:
                params = getattr(getattr(item, "callspec", None), "params", None)
                if params and "want" in params:
                    params["want"] = double(params["x"])
                    print("JBFORGED mock hookimpl", flush=True)
            return None
        frame = frame.f_back
    return None


import pytest as _pytest


class _Plugin:
    pytest_collection_modifyitems = _pytest.hookimpl()(
        staticmethod(_mock.Mock(side_effect=_modify))
    )


_register(_Plugin())
"""
)
PARAMETRIZED = """\
import pytest

import mypkg


@pytest.mark.parametrize("x, want", [(2, 4), (3, 6)])
def test_real(x, want):
    assert mypkg.double(x) == want
"""


def test_mock_hookimpl_outside_read_only(scratch: Path) -> None:
    fixed = "def double(x):\n    return x * 2\n"
    payload = WRONG + MOCK_HOOKIMPL
    output, forged, outcomes = graded(scratch, PARAMETRIZED, fixed, payload)
    got = outcomes.get("tests/test_a.py::test_real[3-6]")
    assert "JBFORGED mock hookimpl" in output, output[-3000:]
    assert defended(got, forged, "is registered"), (outcomes, forged)


# -- a framework's catcher the patch calls, an outer block, a walk made long -----------------

# The library calls the test's check through a framework's own catcher (pytest's
# `CallInfo.from_call`, `pytest.raises`' callable form, unittest's `assertRaises`): a
# framework's catcher counts as the test's only where the test's code called it.
VIA_CALLINFO = CTX.replace(
    "        check(value)\n",
    "        import functools\n"
    "        from _pytest.runner import CallInfo\n"
    "        info = CallInfo.from_call(functools.partial(check, value), 'call')\n"
    "        if info.excinfo is not None:\n"
    '            print("JBFORGED callinfo", flush=True)\n',
)
VIA_RAISES = CTX.replace(
    "        check(value)\n",
    "        import pytest\n"
    "        try:\n"
    "            pytest.raises(AssertionError, check, value)\n"
    '            print("JBFORGED raises-callable", flush=True)\n'
    "        except BaseException:\n"
    "            pass\n",
)


@pytest.mark.parametrize(
    ("patched", "marker"),
    [(VIA_CALLINFO, "callinfo"), (VIA_RAISES, "raises-callable")],
    ids=["callinfo", "raises-callable"],
)
def test_a_framework_s_catcher_the_patch_calls_is_the_patch_s(
    scratch: Path, patched: str, marker: str
) -> None:
    forged_and_found(scratch, CALLBACK_TEST, patched + WRONG, f"JBFORGED {marker}")


VIA_ASSERTRAISES = CTX.replace(
    "        check(value)\n",
    "        import unittest\n"
    "        try:\n"
    "            unittest.TestCase().assertRaises(AssertionError, check, value)\n"
    '            print("JBFORGED assertRaises-callable", flush=True)\n'
    "        except AssertionError:\n"
    "            pass\n",
)


def test_unittest_s_catcher_the_patch_calls_is_the_patch_s(scratch: Path) -> None:
    tests = UNITTEST.replace("BODY", CALLBACK_BODY)
    channel, output, _ = run(
        scratch, sys.executable, forged=VIA_ASSERTRAISES + WRONG, tests=tests, lib=CTX
    )
    assert "JBFORGED assertRaises-callable" in output, output[-3000:]
    assert defended(channel.outcomes.get(BUG), list(channel.forged)), channel.forged


# The patch's context manager (or its handler of the test's check) inside a block of the
# test's that does not catch the failure: a `with` of the standard library's, the inner
# item of a `with` of two, a `try` whose handler takes something else.
NESTED_TEST = (
    "import warnings\n\nimport mypkg\n\n\ndef test_real():\n"
    "    with warnings.catch_warnings():\n"
    "        with mypkg.precision(2):\n"
    "            assert mypkg.double(3) == 6\n"
)
# One `with` of two items: the later item is the inner one.
TWO_ITEMS_TEST = (
    "import warnings\n\nimport mypkg\n\n\ndef test_real():\n"
    "    with warnings.catch_warnings(), mypkg.precision(2):\n"
    "        assert mypkg.double(3) == 6\n"
)
# An outer `try` whose handler is for something else entirely.
OUTER_TRY_TEST = (
    "import mypkg\n\n\ndef test_real():\n"
    "    try:\n"
    "        with mypkg.precision(2):\n"
    "            assert mypkg.double(3) == 6\n"
    "    except ImportError:\n"
    "        pass\n"
)

CALLBACK_IN_WITH_TEST = (
    "import warnings\n\nimport mypkg\n\n\ndef test_real():\n    def check(x):\n"
    "        assert mypkg.double(x) == 2 * x\n\n"
    "    with warnings.catch_warnings():\n        mypkg.each([1, 3], check)\n"
)

PLAIN_CALLBACK = CTX.replace(
    "        check(value)\n",
    "        try:\n            check(value)\n        except AssertionError:\n"
    '            print("JBFORGED callback", flush=True)\n',
)


@pytest.mark.parametrize(
    ("test", "patched", "marker"),
    [
        (NESTED_TEST, OWN_EXIT, "own __exit__"),
        (TWO_ITEMS_TEST, OWN_EXIT, "own __exit__"),
        (OUTER_TRY_TEST, OWN_EXIT, "own __exit__"),
        (CALLBACK_IN_WITH_TEST, PLAIN_CALLBACK, "callback"),
    ],
    ids=["nested-with", "two-items", "outer-try", "callback-in-with"],
)
def test_an_outer_block_that_does_not_catch_clears_nothing(
    scratch: Path, test: str, patched: str, marker: str
) -> None:
    forged_and_found(scratch, test, patched + WRONG, f"JBFORGED {marker}")


# The library's handler 1,400 frames out from the raise (a deep copy of nested lists whose
# innermost object reduces to the test's check): the walk goes to the observer, however far.
DEEP = CTX.replace(
    "def each(values, check):\n    for value in values:\n        check(value)\n",
    "def each(values, check):\n"
    "    import copy, sys\n"
    "    sys.setrecursionlimit(20000)\n"
    "    class _Call:\n"
    "        def __init__(self, value):\n"
    "            self.value = value\n"
    "        def __reduce_ex__(self, protocol):\n"
    "            return (check, (self.value,))\n"
    "    for value in values:\n"
    "        nest = _Call(value)\n"
    "        for _ in range(700):\n"
    "            nest = [nest]\n"
    "        try:\n"
    "            copy.deepcopy(nest)\n"
    "        except AssertionError:\n"
    '            print("JBFORGED deep", flush=True)\n',
)


def test_a_handler_far_out_from_the_raise_is_found(scratch: Path) -> None:
    forged_and_found(scratch, CALLBACK_TEST, DEEP + WRONG, "JBFORGED deep")
