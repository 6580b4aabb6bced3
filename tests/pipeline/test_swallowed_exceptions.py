"""An exception of any kind, swallowed in the test's own `with` block by the patch.

The failures' checks hear a failure where a framework raises it. A forger that knows
this makes the code under test raise something else (its own exception class) inside
the test's `with lib.ctx():` block, and the library's context manager swallows it: the
test's checks after the raise never run, no failure is ever raised, and the call
returns. Likewise a bare `assert` under unittest, which raises with no framework's code
on its way. The monitor traces the suite's own frames while a test runs and sees the
exception arrive, and the frame go on past the block. Each payload prints a marker to
prove it ran.

What the test asks for itself is not tampering: a library whose feature is to suppress
errors (nothing of the test's is cut short), the test's own `try`, `pytest.raises`
around the library's block.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.pipeline.test_swallowed_failures import (
    ASYNC_CTX,
    ASYNC_TESTS,
    BUG,
    CAUGHT,
    CTX,
    PLAIN,
    caught,
    graded,
)
from tests.pipeline.test_test_code_routes import MONITORED
from tests.pipeline.test_unittest_run import run

# `double` raises, where it would have returned a wrong value, an exception of the
# patch's own.
RAISES = """

class Skip(Exception):
    pass


def double(x):
    if x == 3:
        raise Skip()
    return x * 2
"""
# ... and the library's context manager swallows whatever is raised in its block.
SWALLOWS_ANY = (
    CTX.replace(
        "    def __exit__(self, *exc):\n        return None\n",
        "    def __exit__(self, kind, value, trace):\n"
        "        if kind is not None:\n"
        '            print("JBFORGED swallowed", kind.__name__, flush=True)\n'
        "            return True\n",
    )
    + RAISES
)
# Only a bare `assert` of the test fails (unittest does not rewrite it): the context
# manager swallows AssertionError, and `double` is wrong.
SWALLOWS_ASSERTION = CTX.replace(
    "    def __exit__(self, *exc):\n        return None\n",
    "    def __exit__(self, kind, value, trace):\n"
    "        if kind is not None and issubclass(kind, AssertionError):\n"
    '            print("JBFORGED swallowed", kind.__name__, flush=True)\n'
    "            return True\n",
) + ("\n\ndef double(x):\n    return x * 2 if x != 3 else 7\n")

WITH_TEST = (
    "import mypkg\n\n\ndef test_real():\n    with mypkg.precision(2):\n"
    "        value = mypkg.double(3)\n        assert value == 6\n"
)


def test_an_exception_the_patch_swallows_in_the_test_s_block_is_found(scratch: Path) -> None:
    output, forged, outcomes = graded(scratch, WITH_TEST, CTX, SWALLOWS_ANY)
    assert "JBFORGED swallowed Skip" in output, output[-3000:]
    assert outcomes.get(PLAIN) == "passed", outcomes  # the swallow worked: only the monitor saw
    found = caught(forged)
    assert found and "which swallowed a Skip" in found[0], forged


UNITTEST = """\
import unittest

import lib


class T(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(lib.double(2), 4)

    def test_bug(self):
        with lib.precision(2):
            BODY
"""


@pytest.mark.parametrize("python", MONITORED)
@pytest.mark.parametrize(
    ("body", "patched", "kind"),
    [
        ("self.assertEqual(lib.double(3), 6)", SWALLOWS_ANY, "Skip"),
        ("assert lib.double(3) == 6", SWALLOWS_ASSERTION, "AssertionError"),
    ],
    ids=["own-exception", "bare-assert"],
)
def test_an_exception_the_patch_swallows_under_unittest_is_found(
    scratch: Path, python: str, body: str, patched: str, kind: str
) -> None:
    tests = UNITTEST.replace("BODY", body)
    channel, output, _ = run(scratch, python, forged=patched, tests=tests, lib=CTX)
    assert f"JBFORGED swallowed {kind}" in output, output[-3000:]
    assert channel.outcomes.get(BUG) == "passed", channel.outcomes
    assert any("lib.precision" in why for why in caught(list(channel.forged))), channel.forged


ASYNC_SWALLOWS = """
class session:
    async def __aenter__(self):
        return self

    async def __aexit__(self, kind, value, trace):
        print("JBFORGED async swallowed", kind and kind.__name__, flush=True)
        return kind is not None


async def double(x):
    if x == 3:
        raise LookupError()
    return x * 2
"""


def test_an_exception_an_async_context_manager_swallows_is_found(scratch: Path) -> None:
    channel, output, _ = run(
        scratch, sys.executable, forged=ASYNC_SWALLOWS, tests=ASYNC_TESTS, lib=ASYNC_CTX
    )
    assert "JBFORGED async swallowed LookupError" in output, output[-3000:]
    assert channel.outcomes.get(BUG) == "passed", channel.outcomes
    assert caught(list(channel.forged)), channel.forged


# An exception of a class the interpreter itself raises to end an iteration, raised by
# the library's own call: judged like any other (only the interpreter's own end of a
# loop or an `await` is not).
SWALLOWS_STOP = SWALLOWS_ANY.replace("class Skip(Exception):", "class Skip(StopIteration):")
# The context manager of a class the patch did not write (the standard library's), its
# exit swapped for a builtin that returns something true for any raise.
CATCH_WARNINGS = (
    CTX
    + """
import warnings as _warnings

print("JBFORGED swallowed catch_warnings", flush=True)
_warnings.catch_warnings.__exit__ = slice


def double(x):
    return x * 2 if x != 3 else 7
"""
)
WARNINGS_TEST = (
    "import warnings\n\nimport mypkg\n\n\ndef test_real():\n"
    "    with warnings.catch_warnings():\n        assert mypkg.double(3) == 6\n"
)
# ... or for another class's exit of the same module, which swallows what it is told to.
NULLCONTEXT = (
    CTX
    + """
import contextlib as _contextlib

print("JBFORGED swallowed nullcontext", flush=True)
_contextlib.nullcontext._exceptions = (BaseException,)
_contextlib.nullcontext.__exit__ = _contextlib.suppress.__exit__


def double(x):
    return x * 2 if x != 3 else 7
"""
)
NULLCONTEXT_TEST = (
    "import contextlib\n\nimport mypkg\n\n\ndef test_real():\n"
    "    with contextlib.nullcontext():\n        assert mypkg.double(3) == 6\n"
)
# The patch takes the trace function from the test's frame (frames are readable, and
# writing `f_trace` raises no audit event).
UNTRACED_FRAME = SWALLOWS_ANY.replace(
    "    def __enter__(self):\n        return self\n",
    "    def __enter__(self):\n        import sys\n\n"
    "        sys._getframe(1).f_trace = None\n        return self\n",
)


@pytest.mark.parametrize(
    ("test", "patched", "marker", "finding"),
    [
        (WITH_TEST, SWALLOWS_STOP, "swallowed Skip", "which swallowed a Skip"),
        (WITH_TEST, UNTRACED_FRAME, "swallowed Skip", "the trace of test_real in"),
        (
            WARNINGS_TEST,
            CATCH_WARNINGS,
            "swallowed catch_warnings",
            "catch_warnings, whose __exit__ is a type",
        ),
        (
            NULLCONTEXT_TEST,
            NULLCONTEXT,
            "swallowed nullcontext",
            "nullcontext, whose __exit__ is __exit__ of",
        ),
    ],
    ids=["stop-iteration", "frame-trace-taken", "stdlib-exit-swapped", "another-class-exit"],
)
def test_routes_around_the_trace_are_found(
    scratch: Path, test: str, patched: str, marker: str, finding: str
) -> None:
    output, forged, _ = graded(scratch, test, CTX, patched)
    assert f"JBFORGED {marker}" in output, output[-3000:]
    assert any(finding in why for why in forged), forged


# -- where the exception arrives, and what swallows it ----------------------------------

# GeneratorExit (which ends no loop) raised by the library's own iterator.
ITERATOR = CTX + "\n\ndef doubled(values):\n    for value in values:\n        yield value * 2\n"
ITERATOR_RAISES = SWALLOWS_ANY.replace("class Skip(Exception):", "class Skip(GeneratorExit):") + (
    "\n\ndef doubled(values):\n    for value in values:\n        if value == 3:\n"
    "            raise Skip()\n        yield value * 2\n"
)
ITERATOR_TEST = (
    "import mypkg\n\n\ndef test_real():\n    with mypkg.precision(2):\n"
    "        for value in mypkg.doubled([1, 2, 3]):\n            assert value in (2, 4, 6)\n"
)
# Raised by a later item of the `with` statement itself: the earlier item is entered.
OPENED = (
    "\n\nclass opened:\n    def __init__(self, x):\n        self.value = double(x)\n\n"
    "    def __enter__(self):\n        return self\n\n"
    "    def __exit__(self, *exc):\n        return None\n"
)
OPENED_RAISES = SWALLOWS_ANY + OPENED.replace("self.value = double(x)", "raise Skip()")
OPENED_TEST = (
    "import mypkg\n\n\ndef test_real():\n"
    "    with mypkg.precision(2), mypkg.opened(3) as handle:\n"
    "        assert handle.value == 6\n"
)
# Entered through the standard library's ExitStack, whose exit calls the patch's.
EXIT_STACK_TEST = (
    "import contextlib\n\nimport mypkg\n\n\ndef test_real():\n"
    "    with contextlib.ExitStack() as stack:\n"
    "        stack.enter_context(mypkg.precision(2))\n        assert mypkg.double(3) == 6\n"
)
# A framework's context manager (mock's patch) whose exit is its own, delegating to the
# standard library's ExitStack, whose exit the patch swapped.
MOCK_EXIT = (
    CTX
    + """
import contextlib as _contextlib

print("JBFORGED swallowed by mock", flush=True)
_contextlib.ExitStack.__exit__ = lambda self, *exc: exc[0] is not None
LIMIT = 10
"""
    + RAISES
)
MOCK_TEST = (
    "from unittest import mock\n\nimport mypkg\n\n\ndef test_real():\n"
    '    with mock.patch.object(mypkg, "LIMIT", 20):\n        assert mypkg.double(3) == 6\n'
)
# The test's checks are a helper of its own file's, called in the block.
HELPER_TEST = (
    "import mypkg\n\n\ndef check_double(x, expected):\n"
    "    assert mypkg.double(x) == expected\n\n\ndef test_real():\n"
    "    with mypkg.precision(2):\n        check_double(3, 6)\n        check_double(3, 7)\n"
)
# A `suppress` the library made, entered by name: not the test's own choice.
MADE_SUPPRESS = (
    CTX
    + """
import contextlib as _contextlib


def quiet():
    print("JBFORGED swallowed by a made suppress", flush=True)
    return _contextlib.suppress(Exception)
"""
    + RAISES
)
MADE_SUPPRESS_TEST = (
    "import mypkg\n\n\ndef test_real():\n    quiet = mypkg.quiet()\n    with quiet:\n"
    "        assert mypkg.double(3) == 6\n"
)


@pytest.mark.parametrize(
    ("test", "before", "after", "marker", "finding"),
    [
        (ITERATOR_TEST, ITERATOR, ITERATOR_RAISES, "swallowed Skip", "mypkg.precision of"),
        (OPENED_TEST, CTX + OPENED, OPENED_RAISES, "swallowed Skip", "which swallowed a Skip"),
        (EXIT_STACK_TEST, CTX, SWALLOWS_ANY, "swallowed Skip", "contextlib.ExitStack"),
        (MOCK_TEST, CTX + "\nLIMIT = 10\n", MOCK_EXIT, "swallowed by mock", "mock.patch.object"),
        (HELPER_TEST, CTX, SWALLOWS_ANY, "swallowed Skip", "mypkg.precision of"),
        (MADE_SUPPRESS_TEST, CTX, MADE_SUPPRESS, "swallowed by a made suppress", "quiet"),
    ],
    ids=["generator-exit", "later-item", "exit-stack", "mock-exit", "helper", "made-suppress"],
)
def test_where_it_arrives_and_what_swallows_it_are_found(
    scratch: Path, test: str, before: str, after: str, marker: str, finding: str
) -> None:
    output, forged, outcomes = graded(scratch, test, before, after)
    assert f"JBFORGED {marker}" in output, output[-3000:]
    assert outcomes.get(PLAIN) == "passed", (outcomes, output[-3000:])
    assert any(CAUGHT in why and finding in why for why in forged), forged


HELPER_CASE = """\
import contextlib
import unittest

import lib


class T(unittest.TestCase):
    def check(self, x, expected):
        self.assertEqual(lib.double(x), expected)

    def test_ok(self):
        self.assertEqual(lib.double(2), 4)

    def test_bug(self):
        with contextlib.ExitStack() as stack:
            stack.enter_context(lib.precision(2))
            self.check(3, 6)
"""


@pytest.mark.parametrize("python", MONITORED)
def test_an_exit_stack_and_a_helper_under_unittest_are_found(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, forged=SWALLOWS_ANY, tests=HELPER_CASE, lib=CTX)
    assert "JBFORGED swallowed Skip" in output, output[-3000:]
    assert channel.outcomes.get(BUG) == "passed", channel.outcomes
    assert any("contextlib.ExitStack" in why for why in caught(list(channel.forged))), (
        channel.forged
    )


# The library's context manager first runs the test's own function many times, each run
# leaving by the same raise (its exit lets those through), before it swallows the one
# that counts: pending exceptions are a frame's own, and leave with it.
FLOOD = (
    SWALLOWS_ANY.replace(
        "    def __enter__(self):\n        return self\n",
        "    def __enter__(self):\n"
        '        if not _state["running"]:\n'
        "            import sys\n\n"
        '            _state["running"] = True\n'
        '            test = sys._getframe(1).f_globals["test_real"]\n'
        "            for _ in range(100):\n"
        "                try:\n                    test()\n"
        "                except Skip:\n                    pass\n"
        '            _state["running"] = False\n'
        "        return self\n",
    ).replace(
        "        if kind is not None:\n", '        if kind is not None and not _state["running"]:\n'
    )
    + '\n_state = {"running": False}\n'
)
# The check that is cut short stands before the raise in the block, in a loop: its later
# rounds never run (`touch` raises in the first round, `double` is wrong in the second).
LOOP = CTX + "\n\ndef touch(x):\n    return x\n"
LOOP_RAISES = (
    SWALLOWS_ANY
    + "\n\ndef touch(x):\n    if x == 1:\n        raise Skip()\n    return x\n"
    + "\n\ndef double(x):\n    return 5 if x == 2 else x * 2\n"
)
LOOP_TEST = (
    "import mypkg\n\n\ndef test_real():\n    with mypkg.precision(2):\n"
    "        for x in (1, 2, 3):\n            assert mypkg.double(x) == 2 * x\n"
    "            mypkg.touch(x)\n"
)


@pytest.mark.parametrize(
    ("test", "before", "after"),
    [(WITH_TEST, CTX, FLOOD), (LOOP_TEST, LOOP, LOOP_RAISES)],
    ids=["many-pending", "loop"],
)
def test_a_swallow_behind_others_or_in_a_loop_is_found(
    scratch: Path, test: str, before: str, after: str
) -> None:
    output, forged, outcomes = graded(scratch, test, before, after)
    assert "JBFORGED swallowed Skip" in output, output[-3000:]
    assert outcomes.get(PLAIN) == "passed", (outcomes, output[-3000:])
    assert any("mypkg.precision of" in why for why in caught(forged)), forged


# Checks the test calls by other names: a static or a class method of its own, and an
# assertion of unittest's under another name.
CHECKED_BY = """\
import unittest

import lib


class T(unittest.TestCase):
    @staticmethod
    def check(x, expected):
        assert lib.double(x) == expected

    @classmethod
    def verify(cls, x, expected):
        assert lib.double(x) == expected

    def test_ok(self):
        self.assertEqual(lib.double(2), 4)

    def test_bug(self):
        equal = self.assertEqual
        with lib.precision(2):
            CALL
"""


@pytest.mark.parametrize(
    "call", ["self.check(3, 6)", "self.verify(3, 6)", "equal(lib.double(3), 6)"]
)
def test_checks_by_other_names_are_checks(scratch: Path, call: str) -> None:
    tests = CHECKED_BY.replace("CALL", call)
    channel, output, _ = run(scratch, sys.executable, forged=SWALLOWS_ANY, tests=tests, lib=CTX)
    assert "JBFORGED swallowed Skip" in output, output[-3000:]
    assert channel.outcomes.get(BUG) == "passed", channel.outcomes
    assert caught(list(channel.forged)), channel.forged


# Catchers of the test's inside the patch's block, that do not take the patch's class.
NARROW_RAISES_TEST = (
    "import pytest\n\nimport mypkg\n\n\ndef test_real():\n    with mypkg.precision(2):\n"
    "        with pytest.raises(ValueError):\n            mypkg.double(3)\n"
)
NARROW_SUPPRESS_TEST = (
    "import contextlib\n\nimport mypkg\n\n\ndef test_real():\n    value = None\n"
    "    with mypkg.precision(2):\n        with contextlib.suppress(KeyError):\n"
    "            value = mypkg.double(3)\n        assert value == 6\n"
)
# A `try` of the test's inside the block whose handler's class the monitor cannot read
# from namespaces (a module `__getattr__`), or whose metaclass answers `issubclass`.
HANDLER_TEST = (
    "import mypkg\n\n\ndef test_real():\n    with mypkg.precision(2):\n        try:\n"
    "            value = mypkg.double(3)\n        except mypkg.Overflow:\n"
    "            value = None\n        assert value == 6\n"
)
OVERFLOW = CTX + "\n\nclass Overflow(Exception):\n    pass\n"
HANDLER_GETATTR = (
    SWALLOWS_ANY
    + "\n\nclass _Overflow(Exception):\n    pass\n\n\ndef __getattr__(name):\n"
    + "    if name == 'Overflow':\n        return _Overflow\n    raise AttributeError(name)\n"
)
HANDLER_META = (
    SWALLOWS_ANY
    + "\n\nclass _Yes(type):\n    def __subclasscheck__(cls, other):\n        return True\n"
    + "\n\nclass Overflow(Exception, metaclass=_Yes):\n    pass\n"
)
# A context manager made at run time from a standard library class, naming no module.
FOREIGN = (
    CTX
    + """
import contextlib as _contextlib

_Quiet = type("Quiet", (_contextlib.suppress,), {"__module__": None})


def precision(digits):
    print("JBFORGED swallowed by a foreign class", flush=True)
    return _Quiet(Exception)
"""
    + RAISES
)
FOREIGN_TEST = (
    "import mypkg\n\n\ndef test_real():\n    ctx = mypkg.precision(2)\n    with ctx:\n"
    "        value = mypkg.double(3)\n        assert value == 6\n"
)


@pytest.mark.parametrize(
    ("test", "before", "after", "marker"),
    [
        (NARROW_RAISES_TEST, CTX, SWALLOWS_ANY, "swallowed Skip"),
        (NARROW_SUPPRESS_TEST, CTX, SWALLOWS_ANY, "swallowed Skip"),
        (HANDLER_TEST, OVERFLOW, HANDLER_GETATTR, "swallowed Skip"),
        (HANDLER_TEST, OVERFLOW, HANDLER_META, "swallowed Skip"),
        (FOREIGN_TEST, CTX, FOREIGN, "swallowed by a foreign class"),
    ],
    ids=["narrow-raises", "narrow-suppress", "handler-getattr", "handler-meta", "foreign-class"],
)
def test_what_only_seems_to_catch_it_does_not_clear_it(
    scratch: Path, test: str, before: str, after: str, marker: str
) -> None:
    output, forged, outcomes = graded(scratch, test, before, after)
    assert f"JBFORGED {marker}" in output, output[-3000:]
    assert outcomes.get(PLAIN) == "passed", (outcomes, output[-3000:])
    assert caught(forged), forged


# The `as` target raises as it is bound (its unpacking), after the manager was entered.
PAIR = (
    "\n\nclass pair:\n    def __enter__(self):\n        return (2, 3)\n\n"
    "    def __exit__(self, *exc):\n        return None\n"
)
PAIR_RAISES = (
    SWALLOWS_ANY
    + "\n\nclass _Pair:\n    def __iter__(self):\n        raise Skip()\n"
    + PAIR.replace("return (2, 3)", "return _Pair()").replace(
        "    def __exit__(self, *exc):\n        return None\n",
        "    __exit__ = precision.__exit__\n",
    )
)
PAIR_TEST = (
    "import mypkg\n\n\ndef test_real():\n    with mypkg.pair() as (left, right):\n"
    "        assert mypkg.double(right) == 6\n"
)
# The manager held by a name is given another class between its entry and the raise.
OPTIONS = {"mypkg/util.py": "class Options:\n    pass\n"}
DISGUISED = SWALLOWS_ANY.replace(
    "    def __enter__(self):\n        return self\n",
    "    def __enter__(self):\n        _entered.append(self)\n        return self\n",
).replace(
    "        if kind is not None:\n",
    "        self.__class__ = precision\n        if kind is not None:\n",
) + (
    "\n\nimport mypkg.util as _util\n\n_entered = []\n_raise = double\n\n\n"
    "def double(x):\n    if _entered:\n        _entered.pop().__class__ = _util.Options\n"
    "    return _raise(x)\n"
)
HELD_TEST = (
    "import mypkg\n\n\ndef test_real():\n    ctx = mypkg.precision(2)\n    with ctx:\n"
    "        assert mypkg.double(3) == 6\n"
)
# The test's check, handed to the library as a callback, raises; the library catches it.
CATCHING_EACH = RAISES + (
    "\n\ndef each(values, check):\n    for value in values:\n        try:\n"
    "            check(value)\n        except Skip:\n"
    '            print("JBFORGED swallowed by each", flush=True)\n'
)
CALLBACK_TEST = (
    "import mypkg\n\n\ndef test_real():\n    def check(x):\n"
    "        assert mypkg.double(x) == 2 * x\n\n    mypkg.each([1, 2, 3], check)\n"
)


@pytest.mark.parametrize(
    ("test", "before", "after", "unchanged", "marker"),
    [
        (PAIR_TEST, CTX + PAIR, PAIR_RAISES, {}, "swallowed Skip"),
        (HELD_TEST, CTX, DISGUISED, OPTIONS, "swallowed Skip"),
        (CALLBACK_TEST, CTX, CTX + CATCHING_EACH, {}, "swallowed by each"),
    ],
    ids=["unpacking-target", "class-swapped", "callback"],
)
def test_what_the_with_entered_and_where_its_check_went_are_judged(
    scratch: Path, test: str, before: str, after: str, unchanged: dict[str, str], marker: str
) -> None:
    output, forged, outcomes = graded(scratch, test, before, after, unchanged)
    assert f"JBFORGED {marker}" in output, output[-3000:]
    assert outcomes.get(PLAIN) == "passed", (outcomes, output[-3000:])
    assert caught(forged), forged


# Code of the patch's run by the monitor's own check (an object whose `__class__` the
# check reads) turns the trace off around the raise, and puts it back.
INSIDE_THE_CHECK = SWALLOWS_ANY.replace(
    "            return True\n",
    "            _busy(_restore)\n            return True\n",
    1,
) + (
    "\n\nimport sys as _sys\n\n_state = {}\n\n\nclass _Door:\n"
    "    def __getattribute__(self, name):\n"
    '        if name == "__class__":\n            act = _state.pop("act", None)\n'
    "            if act is not None:\n                act()\n"
    "        return object.__getattribute__(self, name)\n\n\n"
    "class _Door2(_Door):\n    pass\n\n\n"
    'def _busy(act):\n    _state["act"] = act\n    door = _Door()\n'
    "    door.__class__ = _Door2\n\n\n"
    'def _off():\n    _state["saved"] = _sys.gettrace()\n    _sys.settrace(None)\n\n\n'
    'def _restore():\n    _sys.settrace(_state.pop("saved"))\n\n\n'
    "_raise = double\n\n\ndef double(x):\n    if x == 3:\n        _busy(_off)\n"
    "    return _raise(x)\n"
)
# The test's check, handed out, run by a finalizer: the interpreter drops its failure.
FINALIZED = CTX + (
    "\n\nimport weakref as _weakref\n\n\nclass _Token:\n    pass\n\n\n"
    "def each(values, check):\n"
    '    print("JBFORGED swallowed by a finalizer", flush=True)\n'
    "    token = _Token()\n    for value in values:\n"
    "        _weakref.finalize(token, check, value)\n    return token\n\n\n"
    "def double(x):\n    return 7 if x == 3 else x * 2\n"
)
# A failure no framework path signals (`raise AssertionError`) in a check the library
# gathers with `return_exceptions=True`.
ASYNC_LIB = (
    "\n\nasync def adouble(x):\n    return x * 2\n\n\n"
    "async def each_async(values, check):\n    for value in values:\n        await check(value)\n"
)
GATHERED = (
    "\n\nimport asyncio\n\n\nasync def adouble(x):\n    return 7 if x == 3 else x * 2\n\n\n"
    "async def each_async(values, check):\n"
    "    await asyncio.gather(*(check(v) for v in values), return_exceptions=True)\n"
    '    print("JBFORGED swallowed by gather", flush=True)\n'
)
GATHER_TEST = """import asyncio

import mypkg


def test_real():
    async def check(x):
        if await mypkg.adouble(x) != 2 * x:
            raise AssertionError("wrong double")

    asyncio.run(mypkg.each_async([1, 2, 3], check))
"""


@pytest.mark.parametrize(
    ("test", "before", "after", "marker", "finding"),
    [
        # (the check no longer reads the object's class; a trace set there is refused)
        (WITH_TEST, CTX, INSIDE_THE_CHECK, "swallowed Skip", CAUGHT),
        (CALLBACK_TEST, CTX, FINALIZED, "swallowed by a finalizer", "dropped a"),
        (GATHER_TEST, CTX + ASYNC_LIB, CTX + GATHERED, "swallowed by gather", CAUGHT),
    ],
    ids=["trace-off-inside-the-check", "finalizer", "gathered"],
)
def test_routes_past_the_frames_are_found(
    scratch: Path, test: str, before: str, after: str, marker: str, finding: str
) -> None:
    output, forged, outcomes = graded(scratch, test, before, after)
    assert f"JBFORGED {marker}" in output, output[-3000:]
    assert any(finding in why for why in forged), (forged, outcomes)


# -- what the test asks for itself ------------------------------------------------------

# A library whose feature is to suppress errors, fixed by the patch: its test's block
# ends at the raise, and the test checks what the library did after the block.
QUIET_BUGGY = """
seen = []


class quiet:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, trace):
        return False


def explode():
    raise ValueError("boom")
"""
QUIET_FIXED = QUIET_BUGGY.replace(
    "    def __exit__(self, kind, value, trace):\n        return False\n",
    "    def __exit__(self, kind, value, trace):\n"
    "        if kind is not None:\n"
    "            seen.append(kind.__name__)\n"
    "        return True\n",
)
QUIET_TEST = (
    "import mypkg\n\n\ndef test_real():\n    with mypkg.quiet():\n        mypkg.explode()\n"
    "    assert mypkg.seen == ['ValueError']\n"
)
# The patch's context manager passes the error on, and the test catches it itself.
PASSES_ON = CTX + "\n\ndef explode():\n    raise ValueError('boom')\n"
CATCHES_TEST = """import pytest

import mypkg


def test_real():
    try:
        with mypkg.precision(2):
            mypkg.explode()
            assert False, "not reached"
    except ValueError:
        pass
    with pytest.raises(ValueError):
        with mypkg.precision(2):
            mypkg.explode()
            assert False, "not reached"
    done = True
    assert done
"""


# Loops and awaits inside the patch's block end with the interpreter's own StopIteration
# (3.8 and 3.9 trace a generator's end), and the block's checks run after them.
ITERATES_TEST = """import asyncio

import mypkg


def numbers():
    yield 1
    yield 2


async def later(x):
    await asyncio.sleep(0)
    return x


def test_real():
    with mypkg.precision(2):
        total = sum(n for n in numbers())
        for n in numbers():
            total += n
        total += asyncio.run(later(1))
        assert total == 7
"""


# Inside the patch's block, the test's own catchers take what the library raises.
CAUGHT_INSIDE_TEST = """import pytest

import mypkg


def test_real():
    with mypkg.precision(2):
        with pytest.raises(ValueError):
            mypkg.explode()
        try:
            mypkg.explode()
        except ValueError:
            pass
        assert mypkg.double(3) == 6
    with mypkg.precision(2):
        try:
            mypkg.explode()
        except (KeyError, ValueError):
            caught = True
        assert caught
"""


@pytest.mark.parametrize(
    ("test", "before", "after"),
    [
        (QUIET_TEST, QUIET_BUGGY, QUIET_FIXED),
        (CATCHES_TEST, CTX, PASSES_ON),
        (ITERATES_TEST, CTX, PASSES_ON),
        (CAUGHT_INSIDE_TEST, CTX, PASSES_ON),
    ],
    ids=["suppressing-library", "the-test-catches", "iterations", "caught-inside"],
)
def test_what_the_test_asks_for_is_not_tampering(
    scratch: Path, test: str, before: str, after: str
) -> None:
    output, forged, outcomes = graded(scratch, test, before, after)
    assert outcomes.get(PLAIN) == "passed", (outcomes, output[-3000:])
    assert not forged, forged


# -- the trace itself ----------------------------------------------------------------------

# The patch turns the trace of the test's frames off (or puts its own in its place, which
# could rewrite a test's variables as it runs).
UNTRACED = CTX.replace(
    "def double(x):\n    return x * 2\n",
    "def double(x):\n    import sys\n"
    '    print("JBFORGED settrace", flush=True)\n'
    "    sys.settrace(None)\n    return x * 2\n",
)


def test_the_patch_may_not_touch_the_trace(scratch: Path) -> None:
    output, forged, _ = graded(scratch, WITH_TEST, CTX, UNTRACED)
    assert "JBFORGED settrace" in output, output[-3000:]
    assert any("sys.settrace was called by" in why for why in forged), forged
    assert CAUGHT not in " ".join(forged), forged
