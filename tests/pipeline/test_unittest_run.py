"""The unittest runner: Django-style scripts run under the integrity monitor, on every
interpreter this host has (the environments of old SWE-bench instances run it too)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jouled.pipeline import unittest_run
from jouled.pipeline.limits import Limits
from jouled.pipeline.pytest_run import Canaries, Channel, read_channel
from jouled.pipeline.sandbox import Sandbox
from jouled.pipeline.testreport import FAILED, PASSED, parse_ra
from tests.integration.attacks import UNITTEST_SWALLOW

RUNTESTS = """\
import sys
import unittest

if __name__ == "__main__":
    suite = unittest.defaultTestLoader.loadTestsFromNames(sys.argv[1:])
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
"""
TESTS = """\
import unittest

import lib


class T(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(lib.double(2), 4)

    def test_bug(self):
        self.assertEqual(lib.double(3), 6)
"""
LIB = "def double(x):\n    return x * 2 if x != 3 else 7\n"
# The library makes unittest's text result report failures as successes.
FORGERY = """
import unittest as _unittest
_unittest.TextTestResult.addFailure = lambda self, test, err: self.addSuccess(test)
"""
EXPECTED = {"tests.test_t.T.test_ok": PASSED, "tests.test_t.T.test_bug": FAILED}


def interpreters() -> list[str]:
    """This interpreter and every other CPython 3.6+ found here (pyenv, PATH)."""
    found = {os.path.realpath(sys.executable): sys.executable}
    candidates = glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3"))
    candidates += [shutil.which(f"python3.{n}") or "" for n in range(6, 15)]
    for path in candidates:
        real = os.path.realpath(path) if path else ""
        if real and "/shims/" not in real and os.access(real, os.X_OK):
            found.setdefault(real, real)  # a shim dispatches elsewhere: only real ones
    return sorted(found.values())


def version_of(python: str) -> tuple[int, int]:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d %d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    major, minor = out.stdout.split()
    return int(major), int(minor)


def run(
    scratch: Path, python: str, forged: str = "", tests: str = TESTS, lib: str = LIB
) -> tuple[Channel, str, int | None]:
    pristine, tree = scratch / "pristine", scratch / "tree"
    for root in (pristine, tree):
        (root / "tests").mkdir(parents=True)
        (root / "tests" / "__init__.py").write_text("")
        (root / "tests" / "runtests.py").write_text(RUNTESTS)
        (root / "tests" / "test_t.py").write_text(tests)
        (root / "lib.py").write_text(lib)
    if forged:
        (tree / "lib.py").write_text(lib + forged)
    ro = scratch / "ro"
    ro.mkdir()
    box = Sandbox()
    layout = box.layout(tree, ro)
    protected = ["tests/test_t.py", "tests/runtests.py", "tests/__init__.py"]
    cmd = [python, "tests/runtests.py", "tests.test_t"]
    plan = unittest_run.plan(cmd, tree, ro, layout, pristine, protected, python)
    assert plan is not None
    home = Path(os.path.realpath(python)).parents[1]
    result = box.run(
        plan.argv,
        tree,
        limits=Limits(timeout_s=120),
        env={"PYTHONPATH": layout.workdir},
        ro_dir=ro,
        channel_in=plan.setup,
        channel_out=True,
        read_only=[home] if not str(home).startswith(("/usr", "/opt")) else [],
    )
    return read_channel(result.channel or b"", plan.key), result.output, result.exit_code


def test_commands_it_carries() -> None:
    split = unittest_run.split_unittest
    assert split(["./tests/runtests.py", "--parallel", "1", "a.b"]) == (
        "script",
        "./tests/runtests.py",
        ["--parallel", "1", "a.b"],
        None,
    )
    assert split(["python", "-m", "unittest", "t"]) == ("module", "unittest", ["t"], "python")
    assert split(["python3.9", "runtests.py"]) == ("script", "runtests.py", [], "python3.9")
    assert split(["bin/test", "x"]) is None
    assert split(["python", "-m", "pytest"]) is None


@pytest.mark.parametrize(
    ("log_id", "uid"),
    [
        ("test_x (a.b.C)", "a.b.C.test_x"),
        ("test_x (a.b.C.test_x)", "a.b.C.test_x"),
        ("test_x (a.b.C)\nDoc line.", "a.b.C.test_x"),
        ("tests/test_a.py::test_x", None),
    ],
)
def test_log_ids_map_to_unittest_ids(log_id: str, uid: str | None) -> None:
    assert unittest_run.unittest_id(log_id) == uid


DOCUMENTED = """\
import unittest


class Base(unittest.TestCase):
    def test_inherited(self):
        \"\"\"
        Inherited from the base.

        More text.
        \"\"\"


class T(Base):
    def test_doc(self):
        \"\"\"Rounds half to even.\"\"\"

    def test_plain(self):
        pass
"""


def test_a_log_pass_under_a_docstring_line_is_held_to_the_tests_it_describes(
    tmp_path: Path,
) -> None:
    """Run verbosely, unittest names a test with a docstring by its first line: a pass the
    log claims under that line must be a pass of a test it describes."""
    (tmp_path / "tests" / "app").mkdir(parents=True)
    (tmp_path / "tests" / "app" / "__init__.py").write_text("")
    (tmp_path / "tests" / "app" / "tests.py").write_text(DOCUMENTED)
    cmd = ("./tests/runtests.py", "--verbosity", "2", "app.tests")
    doc, inherited = "app.tests.T.test_doc", "app.tests.T.test_inherited"
    failed = Channel({doc: FAILED, inherited: FAILED}, True, True, 1)
    claims = {"Rounds half to even.": PASSED}
    why = unittest_run.disagreement(claims, failed, 1, tree=tmp_path, test_cmd=cmd)
    assert "Rounds half to even." in why and "saw it failed" in why, why
    why = unittest_run.disagreement(
        {"Inherited from the base.": PASSED}, failed, 1, tree=tmp_path, test_cmd=cmd
    )
    assert "saw it failed" in why, why
    passed = Channel({doc: PASSED, inherited: FAILED}, True, True, 1)
    assert unittest_run.disagreement(claims, passed, 1, tree=tmp_path, test_cmd=cmd) == ""
    # A line that describes no test the channel names is left unchecked, as before.
    other = {"Describes nothing here.": PASSED}
    assert unittest_run.disagreement(other, failed, 1, tree=tmp_path, test_cmd=cmd) == ""


def test_a_log_pass_the_runner_did_not_see_is_a_disagreement() -> None:
    channel = Channel(dict(EXPECTED), True, True, 1)
    agree = {"test_ok (tests.test_t.T)": PASSED, "test_bug (tests.test_t.T)": FAILED}
    assert unittest_run.disagreement(agree, channel, 1) == ""
    lying = {**agree, "test_bug (tests.test_t.T)": PASSED}
    assert "test_bug" in unittest_run.disagreement(lying, channel, 1)
    assert "exited 0 but the runner finished with 1" in unittest_run.disagreement(agree, channel, 0)
    unfinished = Channel(dict(EXPECTED), True, False, None)
    assert "never finished" in unittest_run.disagreement(agree, unfinished, 0)
    canaries = Canaries(
        ("tests/test_c.py",), ("tests.test_c.C.test_p",), ("tests.test_c.C.test_f",)
    )
    planted = {**EXPECTED, "tests.test_c.C.test_p": PASSED, "tests.test_c.C.test_f": FAILED}
    assert unittest_run.disagreement(agree, Channel(planted, True, True, 1), 1, canaries) == ""
    forced = {**planted, "tests.test_c.C.test_f": PASSED}
    why = unittest_run.disagreement(agree, Channel(forced, True, True, 1), 1, canaries)
    assert "did not come out as planted" in why


@pytest.mark.parametrize("python", interpreters())
def test_the_runner_reports_under_every_interpreter_here(scratch: Path, python: str) -> None:
    channel, output, exit_code = run(scratch, python)
    assert channel.started and channel.finished and not channel.forged, (channel, output)
    assert channel.integrity == ("monitor" if (3, 8) <= version_of(python) < (3, 13) else "reduced")
    assert {k: v for k, v in channel.outcomes.items() if k in EXPECTED} == EXPECTED, output
    assert exit_code == 1 and channel.exit == 1
    # A canary beside the tests, on no command line, came out as planted: one pass, one fail.
    planted = sorted(v for k, v in channel.outcomes.items() if k not in EXPECTED)
    assert planted == [FAILED, PASSED], channel.outcomes
    assert all(k.startswith("tests.test_") for k in channel.outcomes), channel.outcomes


@pytest.mark.parametrize("python", interpreters())
def test_a_patched_library_importing_a_module_for_the_first_time_is_not_tampering(
    scratch: Path, python: str
) -> None:
    # Python 3.8 raises an audit event for every code object it unmarshals: a module the
    # patch changed that imports one not yet loaded is the import system's doing, not the
    # patch making code that claims to be the standard library's.
    changed = LIB.replace("x * 2", "2 * x") + "import fractions\nfrom unittest import mock\n"
    channel, output, _ = run(scratch, python, forged="\n", lib=changed)
    assert not channel.forged, (channel.forged, output)
    assert {k: v for k, v in channel.outcomes.items() if k in EXPECTED} == EXPECTED, output


def test_a_library_that_makes_the_runner_print_ok_is_caught(scratch: Path) -> None:
    channel, output, exit_code = run(scratch, sys.executable, forged=FORGERY)
    # The forgery ran: the text runner printed "ok" for the failing test and exited 0.
    assert "test_bug (tests.test_t.T" in output and "FAIL" not in output, output
    assert exit_code == 0
    log = {"test_bug (tests.test_t.T)": PASSED, "test_ok (tests.test_t.T)": PASSED}
    why = unittest_run.disagreement(log, channel, exit_code)
    assert "TextTestResult.addFailure was replaced" in why, why
    assert parse_ra(output) == {}  # nothing a pytest summary parser could be fooled by


# The failing test has a docstring, so the verbose log names it by that line; the library
# writes the line again, passed, as the process exits (the official parser keeps the last).
DOCSTRING_TESTS = TESTS.replace(
    "def test_bug(self):\n", 'def test_bug(self):\n        """Doubles three."""\n'
)
DOCSTRING_FORGERY = """
import atexit as _atexit
import os as _os
_atexit.register(lambda: _os.write(1, b"JBFORGED docstring-line\\nDoubles three. ... ok\\n"))
"""


def test_a_pass_written_under_a_docstring_line_is_caught(scratch: Path) -> None:
    from jouled.contracts import swebench_harness as harness

    channel, output, exit_code = run(
        scratch, sys.executable, forged=DOCSTRING_FORGERY, tests=DOCSTRING_TESTS
    )
    assert "JBFORGED docstring-line" in output, output  # the payload ran
    log = harness.outcomes("django", output)
    # The forgery took: Django's log parser reads the failing test as passed.
    assert log.get("Doubles three.") == PASSED, log
    assert channel.outcomes.get("tests.test_t.T.test_bug") == FAILED, channel
    cmd = [sys.executable, "tests/runtests.py", "tests.test_t"]
    why = unittest_run.disagreement(log, channel, exit_code, tree=scratch / "tree", test_cmd=cmd)
    assert "Doubles three." in why and "saw it failed" in why, why


def test_a_failure_swallowed_and_put_back_before_any_check_is_caught(scratch: Path) -> None:
    channel, output, _ = run(scratch, sys.executable, forged=UNITTEST_SWALLOW)
    # The forgery ran: the failing test was reported a success and the run exited 0.
    assert "JBFORGED swallowed tests.test_t.T.test_bug" in output, output
    assert channel.outcomes.get("tests.test_t.T.test_bug") == PASSED
    assert any("but the test raised AssertionError" in why for why in channel.forged), channel


# `half` should refuse odd numbers and does not: the failing test asks for the refusal
# through unittest's own helper, after a call that works.
RAISES_LIB = "def half(x):\n    return x // 2\n"
RAISES_TESTS = """\
import unittest

import lib


class T(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(lib.half(4), 2)

    def test_bug(self):
        self.assertEqual(lib.half(2), 1)
        with self.assertRaises(ValueError):
            lib.half(3)
"""
# The library swaps the context class `assertRaises` builds (a global of unittest.case)
# for one that swallows "not raised", when called by a test that goes on to use it; that
# context, as it is built, puts the real class back, so nothing is left changed when the
# test ends, and no check runs in between.
RAISES_PUT_BACK = """
import unittest.case as _case
_helpers = _case.TestCase.assertRaises.__globals__
_Real = _helpers["_AssertRaisesContext"]


class _Swallow(_Real):
    def __init__(self, *args, **kwargs):
        _helpers["_AssertRaisesContext"] = _Real
        _inside.append(self)
        super().__init__(*args, **kwargs)

    def __exit__(self, kind, value, tb):
        _inside.remove(self)
        if kind is None:
            print("JBFORGED swallowed", flush=True)
            return False
        return super().__exit__(kind, value, tb)


_inside = []


_half = half


def half(x):
    import sys
    caller = sys._getframe(1).f_code
    if "assertRaises" in caller.co_names and not _inside:
        _helpers["_AssertRaisesContext"] = _Swallow
    return _half(x)
"""


@pytest.mark.parametrize("python", interpreters())
def test_a_helper_left_alone_is_not_called_put_back(scratch: Path, python: str) -> None:
    channel, output, _ = run(scratch, python, tests=RAISES_TESTS, lib=RAISES_LIB)
    assert channel.outcomes.get("tests.test_t.T.test_bug") == FAILED, (channel, output)
    assert channel.outcomes.get("tests.test_t.T.test_ok") == PASSED, (channel, output)
    assert not channel.forged, channel


# A class of the suite patches `open` for all its tests (as a fake file system does),
# live while unittest reports each one: nothing the runner calls is what it patched.
CLASS_PATCH_TESTS = """\
import io
import unittest
import unittest.mock

import lib


class T(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        fake = unittest.mock.mock_open(read_data="4")
        cls.patcher = unittest.mock.patch("builtins.open", fake)
        cls.patcher.start()

    @classmethod
    def tearDownClass(cls):
        cls.patcher.stop()

    def test_ok(self):
        with open("four.txt") as f:
            self.assertEqual(lib.double(2), int(f.read()))

    def test_bug(self):
        self.assertEqual(lib.double(3), 6)
"""


@pytest.mark.parametrize("python", interpreters())
def test_a_suite_s_patch_of_open_across_its_tests_is_not_tampering(
    scratch: Path, python: str
) -> None:
    channel, output, _ = run(scratch, python, tests=CLASS_PATCH_TESTS)
    assert channel.outcomes.get("tests.test_t.T.test_ok") == PASSED, (channel, output)
    assert channel.outcomes.get("tests.test_t.T.test_bug") == FAILED, (channel, output)
    assert not channel.forged, channel


# `mean` drops the last value; the failing test compares it through unittest's
# assertAlmostEqual, which judges by `abs`.
MEAN_LIB = "def mean(xs):\n    return sum(xs[:-1]) / len(xs)\n"
MEAN_TESTS = """\
import unittest

import lib


class T(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(lib.mean([0, 0]), 0)

    def test_bug(self):
        self.assertAlmostEqual(lib.mean([1, 2, 3, 4]), 2.5)
"""


# The library, called for the argument of the check, swaps Python's `abs` for one that
# says "no difference" once and puts the real one back as it does: the check it makes
# next is the one it lies to. Nothing of unittest's is touched, and `builtins` is where
# test suites patch and put back for themselves.
def abs_swapped_in(function: str) -> str:
    """What the patch appends to the library: each call of `function` swaps `abs` for a
    liar that puts the real one back as it answers its first caller."""
    return f"""
import builtins as _builtins
_real_abs = _builtins.abs


def _lying_abs(x):
    _builtins.abs = _real_abs
    print("JBFORGED abs lied", flush=True)
    return 0


_real_{function} = {function}


def {function}(*args):
    _builtins.abs = _lying_abs
    print("JBFORGED abs swapped", flush=True)
    return _real_{function}(*args)
"""


ABS_PUT_BACK = abs_swapped_in("mean")


@pytest.mark.parametrize("python", interpreters())
def test_a_builtin_swapped_for_the_framework_s_next_call_is_not_what_it_calls(
    scratch: Path, python: str
) -> None:
    channel, output, _ = run(scratch, python, tests=MEAN_TESTS, lib=MEAN_LIB, forged=ABS_PUT_BACK)
    assert "JBFORGED abs swapped" in output, output  # the swap was made in the process
    if version_of(python) < (3, 8):
        # No audit hooks to give unittest builtins of its own: the lie takes, and the run
        # is signed `reduced`, which is what a verifier reads.
        assert "JBFORGED abs lied" in output, output
        assert channel.integrity == "reduced", channel
        return
    # unittest judged with Python's own `abs`: the lie was never asked.
    assert "JBFORGED abs lied" not in output, output
    assert channel.outcomes.get("tests.test_t.T.test_bug") == FAILED, (channel, output)
    assert channel.outcomes.get("tests.test_t.T.test_ok") == PASSED, (channel, output)


# The same lie told where unittest now looks `abs` up: its own builtins, found through
# the module's namespace, swapped and put back the same way.
FRAMEWORK_ABS_PUT_BACK = """
import unittest.case as _case
_theirs = _case.__dict__["__builtins__"]
_theirs = _theirs if isinstance(_theirs, dict) else vars(_theirs)
_real_abs = _theirs["abs"]


def _lying_abs(x):
    _theirs["abs"] = _real_abs
    print("JBFORGED abs lied", flush=True)
    return 0


_mean = mean


def mean(xs):
    _theirs["abs"] = _lying_abs
    print("JBFORGED abs swapped", flush=True)
    return _mean(xs)
"""


# `tags` keeps duplicates; the failing test compares through assertCountEqual, which
# counts both sides with the standard library's `collections.Counter`.
TAGS_LIB = "def tags(text):\n    return text.split(',')\n"
TAGS_TESTS = """\
import unittest

import lib


class T(unittest.TestCase):
    def test_ok(self):
        self.assertCountEqual(lib.tags("a"), ["a"])

    def test_bug(self):
        self.assertCountEqual(lib.tags("b,a,b"), ["a", "b"])
"""
# The library swaps the standard library's Counter, which unittest looks up as it
# judges, for one whose count equals any other, and puts it back at its first call.
# Neither unittest nor Python's builtins are touched.
COUNTER_PUT_BACK = """
import collections as _collections
_real_counter = _collections.Counter


class _Alike(dict):
    def __eq__(self, other):
        return True


def _alike(*args, **kwargs):
    import sys
    if sys._getframe(1).f_globals.get("__name__") != "unittest.case":
        return _real_counter(*args, **kwargs)  # someone else's count: a true one
    _collections.Counter = _real_counter
    print("JBFORGED counted alike", flush=True)
    return _Alike()


_tags = tags


def tags(text):
    import sys
    if "assertCountEqual" in sys._getframe(1).f_code.co_names:
        _collections.Counter = _alike
    return _tags(text)
"""


# Each put-back: (the tests, the library, what the patch appends to it, the line its
# lie prints, the namespace the monitor must name).
PUT_BACKS = {
    "unittest-global": (
        RAISES_TESTS,
        RAISES_LIB,
        RAISES_PUT_BACK,
        "JBFORGED swallowed",
        "unittest.case was written and put back",
    ),
    "framework-builtins": (
        MEAN_TESTS,
        MEAN_LIB,
        FRAMEWORK_ABS_PUT_BACK,
        "JBFORGED abs lied",
        "the test frameworks' builtins was written and put back",
    ),
    "standard-library": (
        TAGS_TESTS,
        TAGS_LIB,
        COUNTER_PUT_BACK,
        "JBFORGED counted alike",
        "collections was written and put back",
    ),
}


@pytest.mark.parametrize("route", list(PUT_BACKS))
@pytest.mark.parametrize("python", interpreters())
def test_a_value_swapped_for_one_judgement_and_put_back_is_caught(
    scratch: Path, python: str, route: str
) -> None:
    tests, lib, forged, lie, named = PUT_BACKS[route]
    channel, output, _ = run(scratch, python, tests=tests, lib=lib, forged=forged)
    # The lie was told and taken: the failing test was reported passed.
    assert lie in output, output
    assert channel.outcomes.get("tests.test_t.T.test_bug") == PASSED, (channel, output)
    version = version_of(python)
    if not (3, 8) <= version < (3, 14):
        # No dict version tag the monitor can read (before 3.8 it moves on every store;
        # 3.14 lays dicts out anew): such a run is signed `reduced`, what a verifier reads.
        assert channel.integrity == "reduced", channel
        return
    # 3.13 reads tags too, but is `reduced` for its writable frames (the test below).
    assert channel.integrity == ("monitor" if version < (3, 13) else "reduced"), channel
    assert any(named in why for why in channel.forged), channel


def double_tests(bug: str, imports: str = "") -> str:
    """A test module of two tests of `lib.double`: one it gets right, and `test_bug`, whose
    body (`bug`, one statement a line) the bug fails."""
    body = "".join(f"        {line}\n" for line in bug.splitlines())
    return (
        f"import unittest\n{imports}\nimport lib\n\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_ok(self):\n"
        "        self.assertEqual(lib.double(2), 4)\n\n"
        f"    def test_bug(self):\n{body}"
    )


ABS_TESTS = double_tests("got = lib.double(3)\nself.assertLess(abs(got - 6), 0.5)")
# The library swaps a builtin the test calls itself for a liar that puts the real one
# back as it answers: no framework value is touched, and nothing stays changed.
ABS_LIAR = abs_swapped_in("double")


@pytest.mark.parametrize("python", interpreters())
def test_a_builtin_the_test_calls_swapped_while_it_runs_is_not_the_one_it_calls(
    scratch: Path, python: str
) -> None:
    """Test modules run with builtins of their own, brought in line with Python's at each
    test's start: the liar is never asked (before 3.8, without audit hooks, it is, and
    the run says `reduced`)."""
    channel, output, _ = run(scratch, python, tests=ABS_TESTS, forged=ABS_LIAR)
    assert "JBFORGED abs swapped" in output, output  # the payload ran
    outcome = channel.outcomes.get("tests.test_t.T.test_bug")
    if version_of(python) < (3, 8):
        assert channel.integrity == "reduced", channel
        return
    assert "JBFORGED abs lied" not in output, output
    assert outcome == FAILED, (channel, output)
    assert any("builtins.abs was replaced by code from" in w for w in channel.forged), channel


# The same liar put into the test module's own builtins, reached through the module.
COPY_LIAR = """
import sys as _sys

_double = double


def double(x):
    copy = vars(_sys.modules["tests.test_t"])["__builtins__"]
    real = copy["abs"]

    def liar(value):
        copy["abs"] = real
        print("JBFORGED abs lied", flush=True)
        return 0

    copy["abs"] = liar
    print("JBFORGED abs swapped", flush=True)
    return _double(x)
"""


@pytest.mark.parametrize("python", interpreters())
def test_the_test_modules_own_builtins_written_is_tampering(scratch: Path, python: str) -> None:
    if version_of(python) < (3, 8):
        pytest.skip("no audit hooks: test modules run with Python's builtins")
    channel, output, _ = run(scratch, python, tests=ABS_TESTS, forged=COPY_LIAR)
    assert "JBFORGED abs lied" in output, output  # the payload ran, and the test took it
    assert any("test modules' builtins were written" in w for w in channel.forged), channel


# The test module's own name for a function it calls, swapped for the test's call and put
# back by the liar as it answers (only for the call the bug is in: the other test's call
# leaves nothing changed).
ISCLOSE_TESTS = double_tests(
    "got = lib.double(3)\nself.assertTrue(isclose(got, 6))", "from math import isclose\n"
)
ISCLOSE_LIAR = """
import sys as _sys

_double = double


def double(x):
    names = vars(_sys.modules["tests.test_t"])
    real = names["isclose"]

    def liar(*args, **kwargs):
        names["isclose"] = real
        print("JBFORGED isclose lied", flush=True)
        return True

    if x == 3:
        names["isclose"] = liar
    return _double(x)
"""


@pytest.mark.parametrize("python", interpreters())
def test_a_test_module_s_own_name_swapped_and_put_back_is_caught(
    scratch: Path, python: str
) -> None:
    channel, output, _ = run(scratch, python, tests=ISCLOSE_TESTS, forged=ISCLOSE_LIAR)
    assert "JBFORGED isclose lied" in output, output  # the payload ran, the test took it
    assert channel.outcomes.get("tests.test_t.T.test_bug") == PASSED, (channel, output)
    if not (3, 8) <= version_of(python) < (3, 14):
        assert channel.integrity == "reduced", channel  # no version tag to read
        return
    assert any("test module tests.test_t was written and put back" in w for w in channel.forged)


LOCALS_TESTS = double_tests("expected = 6\ngot = lib.double(3)\nself.assertEqual(got, expected)")
# The library rewrites the calling test's `expected` to what it returned: through the
# frame `sys._getframe` hands it, whose `f_locals` writes through from Python 3.13.
LOCALS_REWRITE = """
import sys as _sys

_double = double


def double(x):
    got = _double(x)
    test_locals = _sys._getframe(1).f_locals
    if "expected" in test_locals:
        test_locals["expected"] = got
        print("JBFORGED expected rewritten", flush=True)
    return got
"""


@pytest.mark.parametrize("python", interpreters())
def test_a_test_s_own_variables_rewritten_through_its_frame_are_never_signed_monitor(
    scratch: Path, python: str
) -> None:
    """No audit event sees a frame's locals written (PEP 667 made them write through in
    3.13), so a run on 3.13 or later cannot be signed `monitor`: the lie takes there and
    the run says `reduced`; before 3.13 the write never reaches the test."""
    channel, output, _ = run(scratch, python, tests=LOCALS_TESTS, forged=LOCALS_REWRITE)
    assert "JBFORGED expected rewritten" in output, output  # the payload ran
    outcome = channel.outcomes.get("tests.test_t.T.test_bug")
    version = version_of(python)
    if version >= (3, 13):
        assert outcome == PASSED, (channel, output)  # the lie took
        assert channel.integrity == "reduced", channel
    else:
        assert outcome == FAILED, (channel, output)
