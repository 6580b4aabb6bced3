"""A failure of the test's own, caught inside its call by code of the patch's.

The protected test runs `with lib.ctx(): assert ...`, or hands the library a check of
its own as a callback: a library that swallows the failure there (its `__exit__` returns
True, it returns `contextlib.suppress(AssertionError)`, it wraps the callback in
`try/except`) makes the test's own function return, and every observer hears a return.
The frameworks' failure paths tell the monitor of each failure as it is raised, and the
monitor looks then at who could catch it. Each payload prints a marker to prove it ran.

The same shapes where the test itself asks for the failure to be caught (`pytest.raises`,
`assertRaises`, a `try` of its own, a subtest), or a library's code the patch left as it
was catches it, are not tampering.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tests.pipeline.test_pytest_run import run_plan
from tests.pipeline.test_test_code_routes import CMD, MONITORED
from tests.pipeline.test_unittest_run import run

CAUGHT = "a failure of the test was caught by"
PLAIN = "tests/test_a.py::test_real"
BUG = "tests.test_t.T.test_bug"


def graded(
    scratch: Path, test: str, before: str, after: str, unchanged: dict[str, str] | None = None
) -> tuple[str, list[str], dict[str, str]]:
    """A pytest task whose library `mypkg` the patch changes from `before` to `after`
    (`unchanged`: more files of the library, the same in both): output, findings, outcomes."""
    files = {"pytest.ini": "[pytest]\n", "mypkg/__init__.py": before, "tests/test_a.py": test}
    files.update(unchanged or {})
    _, result, channel = run_plan(scratch, files, CMD, added={"mypkg/__init__.py": after})
    return result.output, list(channel.forged), dict(channel.outcomes)


def caught(forged: list[str]) -> list[str]:
    return [why for why in forged if CAUGHT in why]


CTX = """
class precision:
    def __init__(self, digits):
        self.digits = digits

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def each(values, check):
    for value in values:
        check(value)


def double(x):
    return x * 2
"""
# The library's context manager swallows the failure.
OWN_EXIT = CTX.replace(
    "    def __exit__(self, *exc):\n        return None\n",
    "    def __exit__(self, kind, value, trace):\n"
    "        if kind is not None and issubclass(kind, AssertionError):\n"
    '            print("JBFORGED own __exit__", flush=True)\n'
    "            return True\n",
)
# ... with the standard library's `suppress`: no frame of the patch's as it swallows.
SUPPRESS = (
    CTX
    + """
import contextlib as _contextlib


def precision(digits):
    print("JBFORGED suppress", flush=True)
    return _contextlib.suppress(AssertionError)
"""
)
# ... with the standard library's callable itself under the library's name: no code of
# the patch's is called at all.
STDLIB_CALLABLE = (
    CTX
    + """
import contextlib as _contextlib
import functools as _functools

print("JBFORGED stdlib callable", flush=True)
precision = _functools.partial(_contextlib.suppress, AssertionError)
"""
)
# The test's check, handed to the library, is swallowed there.
CALLBACK = CTX.replace(
    "        check(value)\n",
    "        try:\n            check(value)\n        except AssertionError:\n"
    '            print("JBFORGED callback", flush=True)\n',
)
WRONG = "\n\ndef double(x):\n    return x * 2 if x != 3 else 7\n"

WITH_TEST = (
    "import mypkg\n\n\ndef test_real():\n    with mypkg.precision(2):\n"
    "        assert mypkg.double(3) == 6\n"
)
IMPORTED_TEST = (
    "import mypkg\nfrom mypkg import precision\n\n\ndef test_real():\n"
    "    with precision(2):\n        assert mypkg.double(3) == 6\n"
)
CALLBACK_TEST = (
    "import mypkg\n\n\ndef test_real():\n    def check(x):\n"
    "        assert mypkg.double(x) == 2 * x\n\n    mypkg.each([1, 3], check)\n"
)


@pytest.mark.parametrize(
    ("test", "patched", "marker"),
    [
        (WITH_TEST, OWN_EXIT, "own __exit__"),
        (WITH_TEST, SUPPRESS, "suppress"),
        (CALLBACK_TEST, CALLBACK, "callback"),
        (WITH_TEST, STDLIB_CALLABLE, "stdlib callable"),
        (IMPORTED_TEST, STDLIB_CALLABLE, "stdlib callable"),
    ],
    ids=["own-exit", "suppress", "callback", "stdlib-callable", "stdlib-callable-imported"],
)
def test_a_failure_the_patch_swallows_under_pytest_is_found(
    scratch: Path, test: str, patched: str, marker: str
) -> None:
    output, forged, outcomes = graded(scratch, test, CTX, patched + WRONG)
    assert f"JBFORGED {marker}" in output, output[-3000:]
    assert outcomes.get(PLAIN) == "passed", outcomes  # the swallow worked: only the monitor saw
    assert caught(forged), forged


UNITTEST = """\
import unittest

import lib


class T(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(lib.double(2), 4)

    def test_bug(self):
        BODY
"""
WITH_BODY = "with lib.precision(2):\n            self.assertEqual(lib.double(3), 6)"
CALLBACK_BODY = "lib.each([1, 3], lambda x: self.assertEqual(lib.double(x), 2 * x))"


@pytest.mark.parametrize("python", MONITORED)
@pytest.mark.parametrize(
    ("body", "patched", "marker"),
    [
        (WITH_BODY, OWN_EXIT, "own __exit__"),
        (WITH_BODY, SUPPRESS, "suppress"),
        (CALLBACK_BODY, CALLBACK, "callback"),
    ],
    ids=["own-exit", "suppress", "callback"],
)
def test_a_failure_the_patch_swallows_under_unittest_is_found(
    scratch: Path, python: str, body: str, patched: str, marker: str
) -> None:
    # `run` writes lib.py pristine, and the lib plus the payload in the tree: what the
    # payload defines shadows the pristine definitions.
    tests = UNITTEST.replace("BODY", body)
    channel, output, _ = run(scratch, python, forged=patched + WRONG, tests=tests, lib=CTX)
    assert f"JBFORGED {marker}" in output, output[-3000:]
    assert channel.outcomes.get(BUG) == "passed", channel.outcomes
    assert caught(list(channel.forged)), channel.forged


ASYNC_CTX = """
class session:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None


async def double(x):
    return x * 2
"""
ASYNC_SWALLOWS = """
class session:
    async def __aenter__(self):
        return self

    async def __aexit__(self, kind, value, trace):
        print("JBFORGED async __aexit__", flush=True)
        return kind is not None


async def double(x):
    return x * 2 if x != 3 else 7
"""
ASYNC_TESTS = """\
import unittest

import lib


class T(unittest.IsolatedAsyncioTestCase):
    async def test_ok(self):
        self.assertEqual(await lib.double(2), 4)

    async def test_bug(self):
        async with lib.session():
            self.assertEqual(await lib.double(3), 6)
"""


def test_a_failure_an_async_context_manager_swallows_is_found(scratch: Path) -> None:
    channel, output, _ = run(
        scratch, sys.executable, forged=ASYNC_SWALLOWS, tests=ASYNC_TESTS, lib=ASYNC_CTX
    )
    assert "JBFORGED async __aexit__" in output, output[-3000:]
    assert caught(list(channel.forged)), channel.forged


# -- a library's own handler, reached through the patch's choice ----------------------------

# The library's `each` hands the check to a thread pool and never asks for its result:
# the failure is raised on another thread, where the executor's own handler keeps it.
THREADED = CTX.replace(
    "def each(values, check):\n    for value in values:\n        check(value)\n",
    "def each(values, check):\n"
    "    from concurrent.futures import ThreadPoolExecutor, wait\n"
    "    with ThreadPoolExecutor(1) as pool:\n"
    "        wait([pool.submit(check, value) for value in values])\n"
    '    print("JBFORGED thread", flush=True)\n',
)
# The library's `each` is, unchanged, a helper that counts the failures it catches.
TOLERANT = (
    "def failures(values, check):\n    count = 0\n    for value in values:\n        try:\n"
    "            check(value)\n        except AssertionError:\n            count += 1\n"
    "    return count\n"
)
TOLERANT_EACH = CTX + "\nfrom mypkg.tolerant import failures as each\n"


@pytest.mark.parametrize("route", ["thread", "unchanged-handler"])
def test_a_failure_a_library_s_own_handler_keeps_is_found(scratch: Path, route: str) -> None:
    patched = THREADED if route == "thread" else TOLERANT_EACH
    unchanged = {"mypkg/tolerant.py": TOLERANT}
    output, forged, outcomes = graded(scratch, CALLBACK_TEST, CTX, patched + WRONG, unchanged)
    if route == "thread":
        assert "JBFORGED thread" in output, output[-3000:]
    assert outcomes.get(PLAIN) == "passed", (outcomes, output[-3000:])
    assert caught(forged), forged


# -- what the test asks to be caught ------------------------------------------------------

ASKED = {
    "pytest.raises": (
        "import pytest\n\nimport mypkg\n\n\ndef test_real():\n"
        "    with pytest.raises(AssertionError):\n        with mypkg.precision(2):\n"
        "            assert mypkg.double(3) == 7\n"
    ),
    "own-try": (
        "import mypkg\n\n\ndef test_real():\n    try:\n        with mypkg.precision(2):\n"
        "            assert mypkg.double(3) == 7\n    except AssertionError:\n"
        "        print('JBCAUGHT by the test', flush=True)\n"
    ),
}


@pytest.mark.parametrize("name", sorted(ASKED))
def test_a_failure_the_test_asks_to_be_caught_is_not_tampering(scratch: Path, name: str) -> None:
    # The patch rewrote the library (its context manager too), and does not swallow.
    output, forged, outcomes = graded(scratch, ASKED[name], CTX, CTX + "\n")
    assert outcomes.get(PLAIN) == "passed", (outcomes, output[-3000:])
    assert forged == [], forged


ASKED_UNITTEST = {
    "assertRaises": (
        "with self.assertRaises(AssertionError):\n            with lib.precision(2):\n"
        "                self.assertEqual(lib.double(3), 7)"
    ),
    "assertRaises-callable": "self.assertRaises(AssertionError, self.assertEqual, 1, 2)",
    "own-try": (
        "try:\n            self.fail('expected')\n        except AssertionError:\n            pass"
    ),
}


@pytest.mark.parametrize("name", sorted(ASKED_UNITTEST))
def test_a_failure_a_unittest_test_asks_to_be_caught_is_not_tampering(
    scratch: Path, name: str
) -> None:
    tests = UNITTEST.replace("BODY", ASKED_UNITTEST[name])
    channel, output, _ = run(scratch, sys.executable, forged="\n", tests=tests, lib=CTX)
    assert channel.outcomes.get(BUG) == "passed", (channel.outcomes, output[-3000:])
    assert list(channel.forged) == [], channel.forged


def test_a_subtest_s_failure_fails_the_test_and_is_not_tampering(scratch: Path) -> None:
    body = textwrap.indent(
        "for x in (1, 3):\n    with self.subTest(x=x):\n"
        "        self.assertEqual(lib.double(x), 2 * x + (x == 3))",
        " " * 8,
    ).lstrip()
    tests = UNITTEST.replace("BODY", body)
    channel, output, _ = run(scratch, sys.executable, forged="\n", tests=tests, lib=CTX)
    assert channel.outcomes.get(BUG) != "passed", (channel.outcomes, output[-3000:])
    assert caught(list(channel.forged)) == [], channel.forged
