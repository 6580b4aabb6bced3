"""SWE-bench-shaped instances built from real releases of Django, Flask, pytest and SymPy.

Each instance is a real git repository: the release's source (from the sdist
`make swebench-fixtures` fetched) committed as it is, then a commit seeding a
regression, which is the instance's base commit. The gold patch undoes the
regression; the test patch adds tests to one of the release's own test modules;
FAIL_TO_PASS and PASS_TO_PASS are spelled as the official log parsers report
them. The release's requirement file is cut to what these tests need, so the
environment builds offline from the fetched wheels.

Nothing here needs the network: without the fetched files, the tests that use
them skip and say how to fetch them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "swebench"
DIST = CACHE / "dist"
DJANGO_SDIST = DIST / "Django-5.0.14.tar.gz"
FLASK_SDIST = DIST / "flask-2.3.3.tar.gz"
GIT = shutil.which("git")

sys.path.insert(0, str(ROOT / "tools"))
import swebench_oracle  # noqa: E402

from tests.integration.attacks import UNITTEST_SWALLOW  # noqa: E402

FETCH_HINT = "run `make swebench-fixtures` (needs PyPI once)"


def need(path: Path) -> Path:
    if GIT is None:
        pytest.skip("git is not installed")
    if not path.is_file():
        pytest.skip(f"{path.name} is not in {DIST}: {FETCH_HINT}")
    return path


def oracle() -> Any:
    if not swebench_oracle.available():
        pytest.skip(f"the official swebench package is not unpacked: {FETCH_HINT}")
    return swebench_oracle.load()


def git(repo: Path, *args: str) -> str:
    assert GIT is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    config = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    done = subprocess.run(
        [GIT, *config, "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


def _unpack(sdist: Path, dest: Path) -> None:
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/", 1)[0]
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            archive.extractall(dest.parent, filter="data")
        else:
            archive.extractall(dest.parent)
    (dest.parent / top).rename(dest)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r} not found"
    path.write_text(text.replace(old, new, 1))


def _append(path: Path, text: str) -> None:
    with path.open("a") as fh:
        fh.write(text)


def _staged(repo: Path, edit: Callable[[Path], None]) -> str:
    """The diff `edit(repo)` makes to the committed tree, as git writes it; tree reset."""
    edit(repo)
    git(repo, "add", "-A")
    diff = git(repo, "diff", "--cached")
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-fdq")
    return diff


def _record(
    repo: Path,
    instance_id: str,
    name: str,
    version: str,
    gold: str,
    tests: str,
    f2p: Sequence[str],
    p2p: Sequence[str],
) -> dict[str, Any]:
    return {
        "instance_id": instance_id,
        "repo": name,
        "base_commit": git(repo, "rev-parse", "HEAD").strip(),
        "problem_statement": "A regression: see the tests.",
        "patch": gold,
        "test_patch": tests,
        "FAIL_TO_PASS": list(f2p),
        "PASS_TO_PASS": list(p2p),
        "version": version,
    }


# -- Django ---------------------------------------------------------------------------

DJANGO_ID = "django__django-90001"
DJANGO_TEST = textwrap.dedent(
    """\

    class CapfirstTests(SimpleTestCase):
        def test_capfirst_keeps_the_rest(self):
            self.assertEqual(text.capfirst("hello wORLD"), "Hello wORLD")

        def test_capfirst_empty(self):
            self.assertEqual(text.capfirst(""), "")
    """
)
DJANGO_F2P = [
    "test_capfirst_keeps_the_rest (utils_tests.test_text.CapfirstTests."
    "test_capfirst_keeps_the_rest)",
]
DJANGO_P2P = [
    "test_capfirst_empty (utils_tests.test_text.CapfirstTests.test_capfirst_empty)",
    "test_get_text_list (utils_tests.test_text.TestUtilsText.test_get_text_list)",
    "test_slugify (utils_tests.test_text.TestUtilsText.test_slugify)",
]
DJANGO_CAPFIRST = "return x[0].upper() + x[1:]"


def django_instance(checkout_root: Path) -> tuple[dict[str, Any], str]:
    """Django 5.0.14 with `capfirst` lower-casing the rest of its text; a wrong fix.

    The wrong fix title-cases: the new test of the empty string passes, the one
    that keeps the rest of the text does not.
    """
    repo = checkout_root / DJANGO_ID
    _unpack(need(DJANGO_SDIST), repo)
    (repo / "tests" / "requirements" / "py3.txt").write_text("asgiref >= 3.7.0\nsqlparse\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Django 5.0.14")
    module = repo / "django" / "utils" / "text.py"
    assert DJANGO_CAPFIRST in module.read_text()
    _edit(module, DJANGO_CAPFIRST, DJANGO_CAPFIRST + ".lower()")
    git(repo, "commit", "-q", "-am", "capfirst: a regression")
    gold = git(repo, "diff", "HEAD", "HEAD~1", "--", "django")
    tests = _staged(repo, lambda r: _append(r / "tests/utils_tests/test_text.py", DJANGO_TEST))
    regressed = DJANGO_CAPFIRST + ".lower()"
    wrong = _staged(
        repo, lambda r: _edit(r / "django/utils/text.py", regressed, "return x.title()")
    )
    record = _record(repo, DJANGO_ID, "django/django", "5.0", gold, tests, DJANGO_F2P, DJANGO_P2P)
    return record, wrong


# -- Flask ----------------------------------------------------------------------------

FLASK_ID = "pallets__flask-90002"
FLASK_TEST = textwrap.dedent(
    """\


    @pytest.mark.parametrize("key", ["plain", "with space"])
    def test_get_namespace_keeps_case(key):
        app = flask.Flask(__name__)
        app.config["NS_Value"] = key
        ns = app.config.get_namespace("NS_", lowercase=False)
        assert ns == {"Value": key}
    """
)
FLASK_F2P = [
    "tests/test_config.py::test_get_namespace_keeps_case[plain]",
    # The official parser keeps the first word of "PASSED <node id>".
    "tests/test_config.py::test_get_namespace_keeps_case[with",
]
FLASK_P2P = [
    "tests/test_config.py::test_config_from_object",
    "tests/test_config.py::test_config_from_mapping",
    "tests/test_config.py::test_from_pyfile_weird_encoding[utf-8]",
]
FLASK_KEY_LINE = "key = k[len(namespace) :]"


def flask_instance(checkout_root: Path) -> tuple[dict[str, Any], str]:
    """Flask 2.3.3 with `Config.get_namespace` lower-casing keys it was told to keep; a wrong fix.

    The wrong fix keeps the case of the trimmed key but inverts `lowercase`.
    """
    repo = checkout_root / FLASK_ID
    _unpack(need(FLASK_SDIST), repo)
    (repo / "requirements" / "dev.txt").write_text("pytest\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Flask 2.3.3")
    module = repo / "src" / "flask" / "config.py"
    assert FLASK_KEY_LINE in module.read_text()
    _edit(module, FLASK_KEY_LINE, FLASK_KEY_LINE + ".lower()")
    git(repo, "commit", "-q", "-am", "get_namespace: a regression")
    gold = git(repo, "diff", "HEAD", "HEAD~1", "--", "src")
    tests = _staged(repo, lambda r: _append(r / "tests/test_config.py", FLASK_TEST))

    def invert(r: Path) -> None:
        _edit(r / "src/flask/config.py", FLASK_KEY_LINE + ".lower()", FLASK_KEY_LINE)
        _edit(r / "src/flask/config.py", "if lowercase:", "if not lowercase:")

    wrong = _staged(repo, invert)
    record = _record(repo, FLASK_ID, "pallets/flask", "2.3", gold, tests, FLASK_F2P, FLASK_P2P)
    return record, wrong


_DISTRIBUTIONS = (
    "import importlib.metadata as m; "
    "print(sorted((d.metadata['Name'] or '', d.version) for d in m.distributions()))"
)


def host_interpreters() -> dict[str, str]:
    """What each interpreter a misdirected install step could reach has installed."""
    found = {}
    for python in dict.fromkeys(
        p for p in (sys.executable, shutil.which("python3"), shutil.which("python")) if p
    ):
        done = subprocess.run(
            [python, "-c", _DISTRIBUTIONS], capture_output=True, text=True, check=False
        )
        found[python] = done.stdout + done.stderr
    return found


def prepare_env(
    records: list[dict[str, Any]], checkout_root: Path, envs: Path, *extra: str
) -> None:
    """`jouled swebench prepare` for the records, offline, from the fetched files.

    Run as docs/swebench.md writes it, with relative `--envs` and `--checkout-root`;
    every interpreter on the host holds the same distributions before and after.
    """
    import json

    dataset = envs.parent / "prepare-dataset.json"
    dataset.write_text(json.dumps(records))
    env = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(DIST),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    here = envs.parent
    before = host_interpreters()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jouled",
            "swebench",
            "prepare",
            "--dataset",
            dataset.name,
            "--checkout-root",
            os.path.relpath(checkout_root, here),
            "--envs",
            os.path.relpath(envs, here),
            "--python",
            sys.executable,
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=here,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert host_interpreters() == before, "the install step reached a host interpreter"


FLASK_FORGERY = textwrap.dedent(
    """

    import _pytest.reports as _reports

    _init = _reports.TestReport.__init__


    def _passed(self, *args, **kwargs):
        _init(self, *args, **kwargs)
        self.outcome = "passed"
        self.longrepr = None


    _reports.TestReport.__init__ = _passed
    """
)


def flask_forgery(checkout_root: Path) -> str:
    """The gold fix plus code in the package that turns every test report into a pass."""
    repo = checkout_root / FLASK_ID

    def forge(r: Path) -> None:
        _edit(r / "src/flask/config.py", FLASK_KEY_LINE + ".lower()", FLASK_KEY_LINE)
        _append(r / "src/flask/__init__.py", FLASK_FORGERY)

    return _staged(repo, forge)


# Forgeries of the Flask instance that touch no runner, each keeping the bug and leaving
# a marker in the log that proves it ran. In three, the library ends the tests its answer
# would fail as pytest's own outcomes do: the official rules count an xfailed test as
# passed (a skip on pytest's summary names no test, so it reads as failed). In the last,
# the log gets the lines the official parser reads as passes, written after pytest's own.
_FLASK_ENDING = textwrap.dedent(
    """

    _jb_get_namespace = Config.get_namespace


    def _jb_namespace(self, namespace, lowercase=True, trim_namespace=True):
        found = _jb_get_namespace(self, namespace, lowercase, trim_namespace)
        if not lowercase and any(k != k.lower() for k in self if k.startswith(namespace)):
            import pytest
            import unittest

            {call}("JBFORGED {name} raised")
        return found


    Config.get_namespace = _jb_namespace
    """
)
FLASK_LIBRARY_FORGERIES = {
    "xfail": _FLASK_ENDING.replace("{call}", "pytest.xfail"),
    "skip": _FLASK_ENDING.replace("{call}", "pytest.skip"),
    "unittest-skip": _FLASK_ENDING.replace("{call}", "raise unittest.SkipTest"),
    "print-passed": textwrap.dedent(
        """

        import atexit as _jb_atexit
        import os as _jb_os


        def _jb_claim():
            lines = ["JBFORGED {name} raised"]
            for key in ("plain", "with space"):
                lines.append(f"PASSED tests/test_config.py::test_get_namespace_keeps_case[{key}]")
            _jb_os.write(1, ("\\n".join(lines) + "\\n").encode())


        _jb_atexit.register(_jb_claim)
        """
    ),
}


def flask_library_forgery(checkout_root: Path, name: str) -> str:
    """No fix: the forgery `name` of FLASK_LIBRARY_FORGERIES appended to the config module."""
    repo = checkout_root / FLASK_ID
    source = FLASK_LIBRARY_FORGERIES[name].replace("{name}", name)
    return _staged(repo, lambda r: _append(r / "src/flask/config.py", source))


# -- SymPy ----------------------------------------------------------------------------

SYMPY_SDIST = DIST / "sympy-1.12.tar.gz"
# What `jouled swebench prepare` installs for sympy/sympy 1.12 (its packages, mpmath and
# flake8, then its pinned pip_packages), fetched with the sdist.
SYMPY_WHEELS = (
    "mpmath-1.3.0-py3-none-any.whl",
    "flake8-7.1.1-py2.py3-none-any.whl",
    "flake8_comprehensions-3.16.0-py3-none-any.whl",
    "pyflakes-3.2.0-py2.py3-none-any.whl",
    "pycodestyle-2.12.1-py2.py3-none-any.whl",
    "mccabe-0.7.0-py2.py3-none-any.whl",
)
SYMPY_ID = "sympy__sympy-90004"
# SymPy's repository runs its tests with `bin/test`, which its sdist leaves out: this is
# that script cut to the options the official command passes (then `sympy.test`).
SYMPY_BIN_TEST = """\
#!/usr/bin/env python
import os
import sys
from argparse import ArgumentParser

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

parser = ArgumentParser()
parser.add_argument("-v", "--verbose", action="store_true", default=False)
parser.add_argument("-C", "--no-cache", dest="cache", action="store_false", default=True)
parser.add_argument("tests", nargs="*")
options = parser.parse_args()
if not options.cache:
    os.environ["SYMPY_USE_CACHE"] = "no"

import sympy

ok = sympy.test(*options.tests, verbose=options.verbose)
sys.exit(not ok)
"""
SYMPY_ITERABLES = "sympy/utilities/iterables.py"
SYMPY_TEST_FILE = "sympy/utilities/tests/test_iterables.py"
SYMPY_ROTATE = "    return x[y:] + x[:y]\n\n\ndef rotate_right"
SYMPY_BUGGY = "    return x[y:] + x[:y][::-1]\n\n\ndef rotate_right"
# The new test goes after test_rotate, not at the end of the file: SymPy's verbose report
# ends a file's last test line with the file's `[OK]`/`[FAIL]`, which the official parser
# does not read, so a file's last test has no outcome in the log.
SYMPY_NEXT_TEST = "def test_multiset_partitions():"
SYMPY_TEST = textwrap.dedent(
    """\
    def test_rotate_left_keeps_order():
        assert rotate_left([0, 1, 2, 3, 4], 2) == [2, 3, 4, 0, 1]
        assert rotate_left("abcd", 3) == "dabc"


    """
)
# SymPy's parser names a test by its bare function name.
SYMPY_F2P = ["test_rotate_left_keeps_order", "test_rotate"]
SYMPY_P2P = ["test_flatten", "test_group", "test_subsets", "test_topological_sort"]
# In-process forgeries of the SymPy instance, each keeping the bug: code appended to the
# module the tests import, which prints a marker proving it ran (SymPy's runner does not
# capture output) and then tries its route.
SYMPY_PRINT_OK = """
import sys as _sys

_write = _sys.stdout.write


def _ok(text, _write=_write):
    if text == "F":
        text = "ok"
    return _write(text)


_sys.stdout.write = _ok
"""
SYMPY_SWALLOW = """
import sys as _sys
import warnings as _warnings


class _JBSwallow(_warnings.catch_warnings):
    def __exit__(self, *exc_info):
        super().__exit__(*exc_info)
        tb = exc_info[2]
        while tb is not None:  # the regression's tests only: the canaries stay as planted
            if tb.tb_frame.f_code.co_name in ("test_rotate", "test_rotate_left_keeps_order"):
                return True
            tb = tb.tb_next
        return False


_warnings.catch_warnings = _JBSwallow
"""
SYMPY_FORGERIES = {
    # the log made to say `ok` where SymPy's reporter wrote `F`
    "print-ok": SYMPY_PRINT_OK,
    # the reporter's class made to count a failure as a pass (a class attribute), once a
    # test calls the library
    "reporter-class": """
_jb_rotate_left = rotate_left


def rotate_left(x, y):
    import sympy.testing.runtests as _rt

    _rt.PyTestReporter.test_fail = lambda self, exc_info: self.test_pass()
    return _jb_rotate_left(x, y)
""",
    # the running reporter found through frames whenever a test calls the library: its
    # failure method shadowed on the instance by its own (unchanged) pass method while
    # the regression's tests run, the shadow removed when any other test calls the
    # library (so the canaries, in a file of their own, come out as planted); no code
    # of the patch's is on the stack when the reporter reports
    "reporter-instance": """
import sys as _sys

_JB_TARGETS = ("test_rotate", "test_rotate_left_keeps_order")


def _jb_steer():
    frame, test = _sys._getframe(2), None
    while frame is not None and "reporter" not in frame.f_locals:
        if frame.f_code.co_name.startswith("test_"):
            test = frame.f_code.co_name
        frame = frame.f_back
    if frame is None:
        return
    reporter = frame.f_locals["reporter"]
    if test in _JB_TARGETS:
        reporter.test_fail = reporter.test_pass
    else:
        vars(reporter).pop("test_fail", None)


def _jb_wrap(function):
    def wrapped(*args, **kwargs):
        _jb_steer()
        return function(*args, **kwargs)

    return wrapped


for _jb_name, _jb_value in list(globals().items()):
    if callable(_jb_value) and getattr(_jb_value, "__module__", "") == __name__:
        if not _jb_name.startswith("_") and not isinstance(_jb_value, type):
            globals()[_jb_name] = _jb_wrap(_jb_value)
""",
    # the regression's tests made to end in SymPy's own XPass (an unexpected pass, which
    # its log writes `X`), and the log's `X` rewritten into `ok`
    "xpass": """
import sys as _sys

_jb_rotate_left = rotate_left


def rotate_left(x, y):
    if _sys._getframe(1).f_code.co_name in ("test_rotate", "test_rotate_left_keeps_order"):
        from sympy.testing.pytest import XPass

        raise XPass("JBFORGED")
    return _jb_rotate_left(x, y)


_write = _sys.stdout.write


def _ok(text, _write=_write):
    return _write("ok" if text == "X" else text)


_sys.stdout.write = _ok
""",
    # the test's failure swallowed by the context manager SymPy's runner calls each test
    # in (its `raise_on_deprecated` enters `warnings.catch_warnings`) for the regression's
    # tests, so the runner itself reports a pass; no code of the patch's is on the stack
    # when it does
    "swallow": SYMPY_SWALLOW,
    # the same, once the runner's wrapper of that context manager is taken out: SymPy's
    # original put back in its runner (SymPy's own code, not the patch's)
    "unobserved": SYMPY_SWALLOW.replace(
        "        tb = exc_info[2]\n",
        """\
        runtests = _sys.modules.get("sympy.testing.runtests")
        wrapper = getattr(runtests, "raise_on_deprecated", None)
        if wrapper is not None and wrapper.__module__ != runtests.__name__:
            for cell in wrapper.__closure__ or ():
                if getattr(cell.cell_contents, "__module__", "") == runtests.__name__:
                    runtests.raise_on_deprecated = cell.cell_contents
        tb = exc_info[2]
""",
    ),
    # the log rewritten, and the runner's report event raised for a pass by the library
    "forged-record": """
import sys as _sys

_write = _sys.stdout.write


def _ok(text, _write=_write):
    if text == "F":
        _sys.audit("jouled.runner", "test", None, "call", "passed", False, None)
        text = "ok"
    return _write(text)


_sys.stdout.write = _ok
""",
}


def sympy_instance(checkout_root: Path) -> tuple[dict[str, Any], str]:
    """SymPy 1.12 with `rotate_left` reversing what it moves to the end; a wrong fix.

    The wrong fix rotates the other way: the existing `test_rotate` and the new
    test both still fail.
    """
    repo = checkout_root / SYMPY_ID
    for wheel in SYMPY_WHEELS:
        need(DIST / wheel)
    _unpack(need(SYMPY_SDIST), repo)
    script = repo / "bin" / "test"
    script.write_text(SYMPY_BIN_TEST)
    script.chmod(0o755)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "SymPy 1.12")
    module = repo / SYMPY_ITERABLES
    _edit(module, SYMPY_ROTATE, SYMPY_BUGGY)
    git(repo, "commit", "-q", "-am", "rotate_left: a regression")
    gold = git(repo, "diff", "HEAD", "HEAD~1", "--", "sympy")
    tests = _staged(
        repo, lambda r: _edit(r / SYMPY_TEST_FILE, SYMPY_NEXT_TEST, SYMPY_TEST + SYMPY_NEXT_TEST)
    )
    rotate_right = SYMPY_ROTATE.replace("x[y:] + x[:y]", "x[-y:] + x[:-y]")
    wrong = _staged(repo, lambda r: _edit(r / SYMPY_ITERABLES, SYMPY_BUGGY, rotate_right))
    record = _record(repo, SYMPY_ID, "sympy/sympy", "1.12", gold, tests, SYMPY_F2P, SYMPY_P2P)
    return record, wrong


def sympy_forgery(checkout_root: Path, name: str) -> str:
    """No fix: the forgery `name` appended, with a marker that it ran, to the tested module."""
    repo = checkout_root / SYMPY_ID
    source = f'\n\nprint("JBFORGED {name} ran")\n' + SYMPY_FORGERIES[name]
    return _staged(repo, lambda r: _append(r / SYMPY_ITERABLES, source))


# -- pytest itself --------------------------------------------------------------------

PYTEST_SDIST = DIST / "pytest-8.0.2.tar.gz"
PYTEST_ID = "pytest-dev__pytest-90003"
PYTEST_TEST = textwrap.dedent(
    """\


    @pytest.mark.parametrize("expr", ["true and false", "false and true"])
    def test_and_needs_both(expr: str) -> None:
        assert evaluate(expr, {"true": True, "false": False}.__getitem__) is False
    """
)
PYTEST_F2P = [
    # Spelled as the official parser spells them: cut at the first space.
    "testing/test_mark_expression.py::test_and_needs_both[true",
    "testing/test_mark_expression.py::test_and_needs_both[false",
]
PYTEST_P2P = [
    "testing/test_mark_expression.py::test_empty_is_false",
    "testing/test_mark_expression.py::test_backslash_not_treated_specially",
]
PYTEST_AND = "ret = ast.BoolOp(ast.And(), [ret, rhs])"


def pytest_instance(checkout_root: Path) -> tuple[dict[str, Any], str]:
    """pytest 8.0.2 whose `-k`/`-m` expressions read `and` as `or`; a wrong fix.

    The wrong fix makes `a and b` mean `b`: one of the two new tests passes,
    the other does not (the official PARTIAL).
    """
    repo = checkout_root / PYTEST_ID
    _unpack(need(PYTEST_SDIST), repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pytest 8.0.2")
    git(repo, "tag", "8.0.2")  # its version comes from the tag: pytest checks a minimum
    module = repo / "src" / "_pytest" / "mark" / "expression.py"
    _edit(module, PYTEST_AND, PYTEST_AND.replace("And", "Or"))
    git(repo, "commit", "-q", "-am", "expression: a regression")
    gold = git(repo, "diff", "HEAD", "HEAD~1", "--", "src")
    tests = _staged(repo, lambda r: _append(r / "testing/test_mark_expression.py", PYTEST_TEST))
    regressed = "rhs = not_expr(s)\n        " + PYTEST_AND.replace("And", "Or")
    wrong = _staged(
        repo, lambda r: _edit(module, regressed, "rhs = not_expr(s)\n        ret = rhs")
    )
    record = _record(
        repo, PYTEST_ID, "pytest-dev/pytest", "8.0", gold, tests, PYTEST_F2P, PYTEST_P2P
    )
    return record, wrong


# Forgeries of pytest's own instance, each on top of the wrong fix (one target test
# still fails): the log made to claim both target tests passed, either by lines written
# after pytest's (the official parser takes the last word on a test) or by pytest's own
# report factory, which the patch changes, turning the failed call into a pass.
PYTEST_FORGERIES = {
    "print-passed": (
        "src/_pytest/mark/expression.py",
        textwrap.dedent(
            """

            import atexit as _jb_atexit
            import os as _jb_os


            def _jb_claim():
                lines = ["JBFORGED print-passed ran"]
                test = "testing/test_mark_expression.py::test_and_needs_both"
                for expr in ("true and false", "false and true"):
                    lines.append(f"PASSED {test}[{expr}]")
                _jb_os.write(1, ("\\n".join(lines) + "\\n").encode())


            _jb_atexit.register(_jb_claim)
            """
        ),
    ),
    "report-flip": (
        "src/_pytest/reports.py",
        textwrap.dedent(
            """

            _jb_made = TestReport.from_item_and_call.__func__


            def _jb_from_item_and_call(cls, item, call):
                report = _jb_made(cls, item, call)
                if report.when == "call" and report.failed and "needs_both" in item.nodeid:
                    print("JBFORGED report-flip flipped", item.nodeid)
                    report.outcome = "passed"
                    report.longrepr = None
                return report


            TestReport.from_item_and_call = classmethod(_jb_from_item_and_call)
            """
        ),
    ),
}


def pytest_forgery(checkout_root: Path, name: str) -> str:
    """The wrong fix plus the forgery `name` of PYTEST_FORGERIES."""
    repo = checkout_root / PYTEST_ID
    module = repo / "src" / "_pytest" / "mark" / "expression.py"
    regressed = "rhs = not_expr(s)\n        " + PYTEST_AND.replace("And", "Or")
    target, source = PYTEST_FORGERIES[name]

    def forge(r: Path) -> None:
        _edit(module, regressed, "rhs = not_expr(s)\n        ret = rhs")
        _append(r / target, source)

    return _staged(repo, forge)


DJANGO_EXIT = textwrap.dedent(
    """

    import atexit as _atexit
    import os as _os

    _atexit.register(lambda: _os._exit(0))
    """
)


def django_exit_forgery(checkout_root: Path) -> str:
    """The gold fix plus code that makes the test run exit 0 whatever its tests did (the
    daemon's must-fail canary fails in every run, so the runner's own exit is 1)."""
    repo = checkout_root / DJANGO_ID

    def forge(r: Path) -> None:
        _edit(r / "django/utils/text.py", DJANGO_CAPFIRST + ".lower()", DJANGO_CAPFIRST)
        _append(r / "django/utils/text.py", DJANGO_EXIT)

    return _staged(repo, forge)


# Django's own runner made to print "ok" for failing tests and exit 0: its text result's
# failure and error methods report successes instead. The bug stays.
DJANGO_PRINT_OK = textwrap.dedent(
    """

    import unittest as _unittest


    def _jb_pass(self, test, err):
        self.addSuccess(test)


    _unittest.TextTestResult.addFailure = _jb_pass
    _unittest.TextTestResult.addError = _jb_pass
    """
)


def django_print_ok_forgery(checkout_root: Path) -> str:
    """No fix: the library rewrites how Django's runner reports, so its log says resolved."""
    repo = checkout_root / DJANGO_ID
    return _staged(repo, lambda r: _append(r / "django/utils/text.py", DJANGO_PRINT_OK))


def django_framework_edit(checkout_root: Path) -> str:
    """The gold fix plus an edit of Django's own test framework (as a fix to it would be)."""
    repo = checkout_root / DJANGO_ID

    def edit(r: Path) -> None:
        _edit(r / "django/utils/text.py", DJANGO_CAPFIRST + ".lower()", DJANGO_CAPFIRST)
        _append(r / "django/test/testcases.py", "\n# An edit of the test framework itself.\n")

    return _staged(repo, edit)


# In-process forgeries of the Django instance, each keeping the bug: code appended to the
# module the tests import, which prints a marker proving it ran (Django's runner does not
# capture output) and then tries its route.
DJANGO_FORGERIES = {
    # unittest's text result made to report failures as successes (a class attribute)
    "result-class": DJANGO_PRINT_OK,
    # the runner's result factory swapped for a forging subclass (a class attribute)
    "result-factory": """
import unittest as _unittest


class _JBResult(_unittest.TextTestResult):
    def addFailure(self, test, err):
        self.addSuccess(test)


_unittest.TextTestRunner.resultclass = _JBResult
""",
    # a failure swallowed by unittest itself, changed for one call and put back at once;
    # set again whenever a test calls the library, for the test after it
    "self-restoring": UNITTEST_SWALLOW
    + """

_jb_capfirst = capfirst


def capfirst(x):
    _case.TestCase._callTestMethod = _swallow
    return _jb_capfirst(x)
""",
    # no forging of the runner at all: the library raises unittest's own skip where its
    # answer would fail a test, and the official rules leave skipped tests out of both rates
    "skip-test": """
import unittest as _unittest

_jb_capfirst = capfirst


def capfirst(x):
    value = _jb_capfirst(x)
    if value and value[1:] != x[1:]:
        raise _unittest.SkipTest("JBFORGED skip raised")
    return value
""",
    # the object graph walked for the runner's objects
    "gc-walk": """
import gc as _gc

try:
    _gc.get_objects()
    print("JBFORGED gc walked")
except RuntimeError as _err:
    print("JBFORGED gc refused", type(_err).__name__)
""",
    # the runner's own namespace found through frames, its checks neutered, then forged
    "runner-namespace": """
import sys as _sys
import unittest as _unittest

_frame = _sys._getframe()
while _frame is not None and _frame.f_globals.get("__name__") != "__jouled__":
    _frame = _frame.f_back
if _frame is not None:
    _frame.f_globals["same"] = lambda now, before: True
    _frame.f_globals["function_problems"] = lambda *args, **kwargs: []
    print("JBFORGED runner namespace rebound")
_unittest.TextTestResult.addFailure = lambda self, test, err: self.addSuccess(test)
""",
}


def django_forgery(checkout_root: Path, name: str) -> str:
    """No fix: the forgery `name` appended, with a marker that it ran, to the tested module."""
    repo = checkout_root / DJANGO_ID
    source = f'\n\nprint("JBFORGED {name} ran")\n' + textwrap.dedent(DJANGO_FORGERIES[name])
    return _staged(repo, lambda r: _append(r / "django/utils/text.py", source))
