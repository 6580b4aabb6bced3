"""The daemon's pytest runner, run for real in the sandbox: ids, channel, config, canaries."""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
import textwrap
from pathlib import Path

import pytest

from jouled.pipeline import pytest_run
from jouled.pipeline.limits import Limits, RunResult
from jouled.pipeline.pytest_run import Canaries, Channel, forgery, read_channel, split_pytest
from jouled.pipeline.runners import MONITOR
from jouled.pipeline.sandbox import Sandbox
from jouled.pipeline.testreport import ERROR, FAILED, PASSED, SKIPPED, parse_ra
from tests.integration.attacks import UNITTEST_SWALLOW

X = "tests/test_x.py"

TEST_X = textwrap.dedent(
    """
    import pytest

    from mypkg import VALUE


    @pytest.mark.parametrize(
        "v", [1, 2, 3, 4, 5], ids=["a::b", "c/d.e", "[x.y]", "sp ace - dash", "1.5"]
    )
    def test_p(v):
        assert v != 2


    class TestC:
        @pytest.mark.parametrize("w", ["x.y"])
        def test_m(self, w):
            assert VALUE == 1

        class TestInner:
            def test_n(self):
                pass


    def test_fail():
        assert VALUE == 2, "boom"


    @pytest.mark.skip(reason="not today")
    def test_skip():
        pass


    @pytest.mark.xfail(reason="known bug")
    def test_xf():
        assert 0


    @pytest.fixture
    def broken_teardown():
        yield
        raise RuntimeError("teardown broke")


    def test_td(broken_teardown):
        pass


    def test_td_fail(broken_teardown):
        assert 0


    @pytest.fixture
    def broken_setup():
        raise RuntimeError("setup broke")


    def test_setup_err(broken_setup):
        pass
    """
)

EXPECTED = {
    f"{X}::test_p[a::b]": PASSED,
    f"{X}::test_p[c/d.e]": FAILED,
    f"{X}::test_p[[x.y]]": PASSED,
    f"{X}::test_p[sp ace - dash]": PASSED,
    f"{X}::test_p[1.5]": PASSED,
    f"{X}::TestC::test_m[x.y]": PASSED,
    f"{X}::TestC::TestInner::test_n": PASSED,
    f"{X}::test_fail": FAILED,
    f"{X}::test_skip": SKIPPED,
    f"{X}::test_xf": SKIPPED,
    f"{X}::test_td": ERROR,
    f"{X}::test_td_fail": ERROR,
    f"{X}::test_setup_err": ERROR,
    "tests/sub/test_y.py::test_y": PASSED,
}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def run_tree(
    tree: Path,
    ro: Path,
    test_cmd: list[str],
    expected: list[str] | None = None,
    pristine: Path | None = None,
    read_only: dict[str, Path] | None = None,
    memory_modules: str = "withhold",
    environment: Path | None = None,
    installed_plugins: bool = False,
) -> tuple[pytest_run.Plan, RunResult, Channel]:
    """Plan and run a pytest command on `tree` the way the evaluator does (`read_only`:
    more of the tree's paths shown read-only over themselves; `environment`: a virtual
    environment whose python runs the tests, shown read-only; `installed_plugins`: its
    pytest plugins load)."""
    ro.mkdir()
    box = Sandbox()
    layout = box.layout(tree, ro)
    tests = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*.py"))
    protected = [rel for rel in tests if rel.startswith("tests/")]
    plan = pytest_run.plan(
        test_cmd,
        tree,
        ro,
        layout,
        expected or [],
        pristine=pristine,
        protected=protected,
        python=str(environment / "bin" / "python") if environment else sys.executable,
        memory_modules=memory_modules,
        installed_plugins=installed_plugins,
    )
    assert plan is not None
    result = box.run(
        plan.argv,
        tree,
        limits=Limits(timeout_s=300),
        env=plan.env,
        ro_dir=ro,
        overlays={**(read_only or {}), **plan.overlays},
        channel_in=plan.setup,
        channel_out=True,
        read_only=[environment] if environment else [],
    )
    return plan, result, read_channel(result.channel or b"", plan.key)


def run_plan(
    scratch: Path,
    files: dict[str, str],
    test_cmd: list[str],
    expected: list[str] | None = None,
    added: dict[str, str] | None = None,
    memory_modules: str = "withhold",
) -> tuple[pytest_run.Plan, RunResult, Channel]:
    """Run on a tree written from `files` plus `added` (what a patch would add)."""
    pristine = write_tree(scratch / "pristine", files)
    tree = write_tree(scratch / "tree", {**files, **(added or {})})
    return run_tree(
        tree, scratch / "ro", test_cmd, expected, pristine, memory_modules=memory_modules
    )


PROJECT = {
    "pytest.ini": "[pytest]\n",
    "mypkg/__init__.py": "VALUE = 1\n",
    X: TEST_X,
    "tests/sub/test_y.py": "def test_y():\n    pass\n",
}


# -- the channel carries exact node ids ---------------------------------------------------


@pytest.mark.parametrize(
    "test_cmd", [["python", "-m", "pytest", "tests"], [sys.executable, "-m", "pytest", "tests"]]
)
def test_outcomes_are_exact_node_ids(scratch: Path, test_cmd: list[str]) -> None:
    plan, result, channel = run_plan(scratch, PROJECT, test_cmd)
    assert not channel.forged and channel.started and channel.finished
    assert pytest_run.without_canaries(channel.outcomes, plan.canaries) == EXPECTED, result.output
    assert forgery(channel, plan.canaries, result.exit_code, list(EXPECTED)) == ""
    # The -rA summary stays in the output for people; it agrees where it names a test.
    from_ra = pytest_run.without_canaries(parse_ra(result.output), plan.canaries)
    assert from_ra == {k: v for k, v in EXPECTED.items() if k != f"{X}::test_skip"}


def test_canaries_come_out_as_planted(scratch: Path) -> None:
    plan, result, channel = run_plan(scratch, PROJECT, ["python", "-m", "pytest", "tests"], [X])
    assert plan.canaries.must_pass and plan.canaries.must_fail
    assert all(channel.outcomes[t] == PASSED for t in plan.canaries.must_pass)
    assert all(channel.outcomes[t] == FAILED for t in plan.canaries.must_fail)
    assert all(t.startswith("tests/test_") for t in plan.canaries.ids)
    assert result.exit_code == 1


def test_canary_names_are_fresh_each_run(scratch: Path) -> None:
    first = run_plan(scratch / "a", PROJECT, ["python", "-m", "pytest", "tests"])[0].canaries
    second = run_plan(scratch / "b", PROJECT, ["python", "-m", "pytest", "tests"])[0].canaries
    assert not first.ids & second.ids


def test_a_clean_run_discounts_only_the_canaries(scratch: Path) -> None:
    files = {"pytest.ini": "[pytest]\n", "tests/test_a.py": "def test_ok():\n    pass\n"}
    plan, result, channel = run_plan(scratch, files, ["pytest", "tests"])
    assert result.exit_code == 1  # the planted failures
    assert pytest_run.effective_exit(channel, plan.canaries, 1, others_may_fail=False) == 0


def test_a_collection_error_is_reported_on_the_file(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "tests/test_bad.py": "import no_such_module\n",
        "tests/test_good.py": "def test_ok():\n    pass\n",
    }
    _, _, channel = run_plan(scratch, files, ["python", "-m", "pytest", "tests"])
    assert channel.outcomes["tests/test_bad.py"] == ERROR
    assert "tests/test_good.py::test_ok" not in channel.outcomes  # collection was interrupted


# -- what the tree cannot steer ----------------------------------------------------------

FORCE_PASS_PLUGIN = textwrap.dedent(
    """
    import pytest

    print("JB-PLUGIN-LOADED")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        report = outcome.get_result()
        report.outcome = "passed"
    """
)


@pytest.mark.parametrize(
    "extra",
    [
        {"pytest.toml": '[pytest]\naddopts = ["-p", "evil"]\n', "evil.py": FORCE_PASS_PLUGIN},
        {"tests/pytest.ini": "[pytest]\naddopts = -p evil\n", "evil.py": FORCE_PASS_PLUGIN},
        {
            "evil.py": FORCE_PASS_PLUGIN,
            "evil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
            "evil-1.0.dist-info/entry_points.txt": "[pytest11]\nevil = evil\n",
        },
        {"sitecustomize.py": "print('JB-PLUGIN-LOADED')\n"},
        {"usercustomize.py": "print('JB-PLUGIN-LOADED')\n"},
    ],
    ids=["pytest.toml", "subdir-ini", "pytest11-entry-point", "sitecustomize", "usercustomize"],
)
def test_configuration_and_plugins_in_the_tree_are_not_read(
    scratch: Path, extra: dict[str, str]
) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "tests/test_a.py": "def test_real():\n    assert 1 == 2\n",
    }
    cmd = ["python", "-m", "pytest", "tests"]
    plan, result, channel = run_plan(scratch, files, cmd, added=extra)
    assert "JB-PLUGIN-LOADED" not in result.output
    assert channel.outcomes["tests/test_a.py::test_real"] == FAILED
    assert plan.config == "pytest.ini"


def test_a_fake_pytest_in_the_tree_root_does_not_shadow_the_runner(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "pytest.py": "print('FAKE PYTEST RAN')\nimport sys\nsys.exit(0)\n",
        "tests/test_a.py": "def test_real():\n    assert 1 == 2\n",
    }
    for cmd in (["python", "-m", "pytest", "tests"], ["pytest", "tests"]):
        _, result, channel = run_plan(scratch / cmd[0], files, cmd)
        assert "FAKE PYTEST RAN" not in result.output
        assert channel.outcomes["tests/test_a.py::test_real"] == FAILED


def test_stale_bytecode_in_the_tree_is_never_loaded(scratch: Path) -> None:
    """An unchecked hash-based .pyc beside the source would run instead of it."""
    import importlib.util
    import py_compile

    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "VALUE = 1\n",
        "tests/test_a.py": "from mypkg import VALUE\n\ndef test_v():\n    assert VALUE == 2\n",
    }
    tree = write_tree(scratch / "tree", files)
    evil = scratch / "evil.py"
    evil.write_text("VALUE = 2\n")
    cache = tree / "mypkg" / "__pycache__"
    cache.mkdir()
    tag = sys.implementation.cache_tag
    py_compile.compile(
        str(evil),
        cfile=str(cache / f"__init__.{tag}.pyc"),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    assert importlib.util.cache_from_source(str(tree / "mypkg" / "__init__.py")).endswith(
        f"__init__.{tag}.pyc"
    )
    _, result, channel = run_tree(tree, scratch / "ro", ["python", "-m", "pytest", "tests"])
    assert channel.outcomes["tests/test_a.py::test_v"] == FAILED, result.output


def test_the_runner_report_cannot_be_forged_without_the_key(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": textwrap.dedent(
            """
            import json, os
            line = json.dumps({"event": "test", "id": "tests/test_a.py::test_real",
                               "when": "call", "outcome": "passed", "xfail": False, "n": 1})
            os.write(4, (line + " " + "0" * 64 + "\\n").encode())
            """
        ),
        "tests/test_a.py": "import mypkg\n\ndef test_real():\n    assert 1 == 2\n",
    }
    plan, result, channel = run_plan(
        scratch, files, ["python", "-m", "pytest", "tests"], ["tests/test_a.py::test_real"]
    )
    assert channel.forged, result.output
    assert "bad authenticator" in forgery(channel, plan.canaries, result.exit_code, [])


@pytest.mark.parametrize("style", ["function", "unittest"])
def test_a_failure_swallowed_and_put_back_before_any_check_is_found(
    scratch: Path, style: str
) -> None:
    """The library makes the failing call pass and undoes its change at once: nothing stays
    changed for a snapshot, but the test function itself told the monitor it raised."""
    if style == "unittest":
        test = (
            "import unittest\nimport mypkg\n\n\nclass T(unittest.TestCase):\n"
            "    def test_real(self):\n        self.assertEqual(mypkg.VALUE, 2)\n"
        )
        library, test_id = UNITTEST_SWALLOW, "tests/test_a.py::T::test_real"
    else:
        test = "import mypkg\n\n\ndef test_real():\n    assert mypkg.VALUE == 2\n"
        test_id = "tests/test_a.py::test_real"
        library = textwrap.dedent(
            """
            import _pytest.runner as _runner
            _original = _runner.CallInfo.from_call.__func__


            def _from_call(cls, func, when, reraise=None):
                _runner.CallInfo.from_call = classmethod(_original)  # put back at once
                info = _original(cls, func, when, reraise)
                if when == "call" and info.excinfo is not None:
                    print("JBFORGED swallowed")
                    return _original(cls, lambda: None, when, reraise)
                _runner.CallInfo.from_call = classmethod(_from_call)
                return info


            _runner.CallInfo.from_call = classmethod(_from_call)
            """
        )
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "VALUE = 1\n",
        "tests/test_a.py": test,
    }
    patched = {"mypkg/__init__.py": "VALUE = 1\n" + library}  # what the patch made
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    _, result, channel = run_plan(scratch, files, cmd, added=patched)
    assert "JBFORGED swallowed" in result.output, result.output  # the forgery ran
    assert channel.outcomes.get(test_id) == "passed", channel  # ... and took
    assert any("but the test raised AssertionError" in why for why in channel.forged), channel


BORROWED_NAME = """
import ast as _ast
import _pytest.runner as _runner

_tree = _ast.parse(
    "def check_interactive_exception(call, report):\\n    return False\\n"
)
# A syntax tree compiled under pytest's own file name (an audit event does not show it),
# then run into pytest's module: its function would look like pytest's.
try:
    exec(compile(_tree, _runner.__file__, "exec"), _runner.__dict__)
    print("JBFORGED borrowed name ran")
except RuntimeError as _err:
    print("JBFORGED borrowed name refused", type(_err).__name__)
"""


def test_code_compiled_under_a_borrowed_file_name_is_refused(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "VALUE = 1\n",
        "tests/test_a.py": "import mypkg\n\n\ndef test_real():\n    assert mypkg.VALUE == 2\n",
    }
    patched = {"mypkg/__init__.py": "VALUE = 1\n" + BORROWED_NAME}  # what the patch made
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    _, result, channel = run_plan(scratch, files, cmd, added=patched)
    assert "JBFORGED borrowed name refused Refused" in result.output, result.output
    assert any("code claiming to be" in why for why in channel.forged), channel


REDIRECT = """
import _pytest.unittest as _unittest_plugin
_original = _unittest_plugin.TestCaseFunction.runtest


def _runtest(self):
    _unittest_plugin.TestCaseFunction.runtest = _original  # put back at once
    observer = self.obj
    cells, names = observer.__closure__, observer.__code__.co_freevars
    cells[names.index("function")].cell_contents = lambda *args, **kwargs: None
    print("JBFORGED redirected", self.nodeid)
    return _original(self)


_unittest_plugin.TestCaseFunction.runtest = _runtest
"""


def test_an_observer_redirected_to_a_function_that_returns_is_found(scratch: Path) -> None:
    """pytest's unittest cases count only a raise their observer reports; an observer made to
    call something else instead of the test is found at the report."""
    test = (
        "import unittest\nimport mypkg\n\n\nclass T(unittest.TestCase):\n"
        "    def test_real(self):\n        self.assertEqual(mypkg.VALUE, 2)\n"
    )
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "VALUE = 1\n",
        "tests/test_a.py": test,
    }
    patched = {"mypkg/__init__.py": "VALUE = 1\n" + REDIRECT}
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    _, result, channel = run_plan(scratch, files, cmd, added=patched)
    assert "JBFORGED redirected tests/test_a.py::T::test_real" in result.output, result.output
    assert channel.outcomes.get("tests/test_a.py::T::test_real") == "passed", channel
    assert any("observer no longer calls" in why for why in channel.forged), channel


# The test's own failure raised as an exception of a class named "" (from a metaclass that
# answers any name it is asked), then the report rewritten to passed as pytest makes it.
NAMELESS = r"""
import _pytest.reports as _reports


class _Anonymous(type):
    __name__ = property(lambda cls: "")


class Nameless(AssertionError, metaclass=_Anonymous):
    pass


_Nameless = type("", (AssertionError,), {})


def check(value):
    if value != 2:
        print("JBFORGED nameless raised")
        raise (Nameless if value == 1 else _Nameless)("wrong")


_made = _reports.TestReport.__dict__["from_item_and_call"].__func__
"""
NAMELESS_TEST = (
    "import mypkg\n\n\ndef test_meta():\n    mypkg.check(1)\n\n\n"
    "def test_empty():\n    mypkg.check(0)\n"
)
NAMELESS_CONFTEST = r"""
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        report.outcome = "passed"
"""
# A builtin class replaced by one that says it is the builtin's own.
BUILTIN_SWAP = r"""
import builtins as _builtins

_builtins.KeyError = type("KeyError", (LookupError,), {"__module__": "builtins"})
print("JBFORGED builtin swapped")
"""


def test_a_raise_of_a_nameless_class_is_still_a_raise(scratch: Path) -> None:
    """The observer names what the test raised by the class's own name: a class named ""
    (or one whose metaclass answers "") cannot pass for a return."""
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "def check(value):\n    assert value == 2\n",
        "tests/test_a.py": NAMELESS_TEST,
    }
    patched = {"mypkg/__init__.py": NAMELESS, "tests/conftest.py": NAMELESS_CONFTEST}
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    # The conftest stands in for any route to the report (the tree's conftests are never
    # read, so it is made a protected file of the pristine tree here).
    pristine = write_tree(scratch / "pristine", {**files, **patched})
    pristine_pkg = pristine / "mypkg" / "__init__.py"
    pristine_pkg.write_text(files["mypkg/__init__.py"])
    tree = write_tree(scratch / "tree", {**files, **patched})
    _, result, channel = run_tree(tree, scratch / "ro", cmd, None, pristine)
    assert result.output.count("JBFORGED nameless raised") == 2, result.output
    for test in ("tests/test_a.py::test_meta", "tests/test_a.py::test_empty"):
        assert channel.outcomes.get(test) == "passed", channel  # the report was rewritten
    forged = " ".join(channel.forged)
    # read past the metaclass: the class's own name, and for a class named "", a raise
    assert "the test raised Nameless (tests/test_a.py::test_meta)" in forged, forged
    assert "the test raised an exception (tests/test_a.py::test_empty)" in forged, forged


def test_a_builtin_class_replaced_is_found(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "VALUE = 1\n",
        "tests/test_a.py": "import mypkg\n\n\ndef test_v():\n    assert mypkg.VALUE == 1\n",
    }
    patched = {"mypkg/__init__.py": "VALUE = 1\n" + BUILTIN_SWAP}
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    _, result, channel = run_plan(scratch, files, cmd, added=patched)
    assert "JBFORGED builtin swapped" in result.output, result.output
    assert any("builtins.KeyError, a class, was replaced" in w for w in channel.forged), channel


# The code under test reaches the runner's namespace through a function of its plugin
# and writes a builtin there: the runner's builtins are a copy of its own, all compared.
RUNNER_BUILTINS = (
    "import sys\n"
    "def _plugins():\n"
    "    frame = sys._getframe(1)\n"
    "    while frame is not None:\n"
    "        config = getattr(frame.f_locals.get('item'), 'config', None)\n"
    "        if config is not None:\n"
    "            return config.pluginmanager.get_plugins()\n"
    "        frame = frame.f_back\n"
    "def double(x):\n"
    "    runner = [p for p in _plugins() if 'pytest_runtest_logreport' in type(p).__dict__\n"
    "              and not type(p).__module__.startswith(('_pytest', 'pytest'))]\n"
    "    copy = type(runner[0]).__dict__['pytest_runtest_logreport'].__globals__['__builtins__']\n"
    "    real = copy['min']\n"
    "    copy['min'] = lambda *args: real(*args)\n"
    "    private = copy is not vars(__import__('builtins'))\n"
    "    print('JBFORGED runner builtins written, a copy:', private, flush=True)\n"
    "    return x * 2\n"
)


def test_the_runner_s_builtins_written_is_tampering(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "def double(x):\n    return x * 2\n",
        "tests/test_a.py": "import mypkg\n\n\ndef test_v():\n    assert mypkg.double(3) == 6\n",
    }
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    _, result, channel = run_plan(scratch, files, cmd, added={"mypkg/__init__.py": RUNNER_BUILTINS})
    assert "JBFORGED runner builtins written, a copy: True" in result.output, result.output
    assert any("the runner's own code or the builtins" in w for w in channel.forged), channel.forged


# A test suite's own patches of what it runs on, made and undone within a test or
# around it: none of them is the patch's, and none may read as tampering.
SUITE_PATCHES = """\
import builtins
import unittest
import unittest.mock

import _pytest.outcomes


def ask():
    return input("name? ")


def test_open_within_the_test():
    with unittest.mock.patch("builtins.open", unittest.mock.mock_open(read_data="x")):
        assert open("f").read() == "x"


def test_main_within_the_test():
    with unittest.mock.patch("unittest.main") as main:
        unittest.main()
    main.assert_called_once()


def test_input(monkeypatch):
    monkeypatch.setattr(builtins, "input", lambda prompt: "ann")
    assert ask() == "ann"


def test_a_framework_global_around_the_test(monkeypatch):
    monkeypatch.setattr(_pytest.outcomes, "importorskip", lambda name: name)
    assert _pytest.outcomes.importorskip("x") == "x"


def test_after():
    assert True
"""


def test_a_suite_s_own_patches_made_and_undone_are_not_tampering(scratch: Path) -> None:
    files = {"pytest.ini": "[pytest]\n", "tests/test_a.py": SUITE_PATCHES}
    _, result, channel = run_plan(scratch, files, ["python", "-m", "pytest", "tests"])
    assert not channel.forged, channel
    assert channel.integrity == "monitor", channel
    outcomes = {k: v for k, v in channel.outcomes.items() if k.startswith("tests/test_a.py")}
    assert set(outcomes.values()) == {PASSED} and len(outcomes) == 5, result.output


# A fixture of the suite's conftest patches builtins around each test; the tests call the
# patched builtins themselves (as a fake file system's tests do), never naming `builtins`.
FIXTURE_PATCHES = {
    "pytest.ini": "[pytest]\n",
    "tests/conftest.py": (
        "import builtins\nimport io\n\nimport pytest\n\n_open = builtins.open\n\n\n"
        "def fake_open(name, *args, **kwargs):  # a fake file system's\n"
        "    if name == 'virtual.txt':\n"
        "        return io.StringIO('fake')\n"
        "    return _open(name, *args, **kwargs)\n\n\n"
        "@pytest.fixture\n"
        "def answers(monkeypatch):\n"
        "    monkeypatch.setattr(builtins, 'input', lambda prompt='': 'yes')\n"
        "    monkeypatch.setattr(builtins, 'round', lambda value: 42)\n"
        "    monkeypatch.setattr(builtins, 'open', fake_open)\n"
    ),
    "tests/test_a.py": (
        "def test_patched(answers):\n"
        "    assert input() == 'yes' and round(2.5) == 42\n"
        "    assert open('virtual.txt').read() == 'fake'\n\n\n"
        "def test_after_the_fixture_is_undone():\n"
        "    assert round(2.25) == 2\n\n\n"
        "def test_patched_again(answers):\n"
        "    assert round(0.5) == 42\n"
    ),
}


# A test module's own writes to its namespace: a cache its functions declare global, and
# the registry a warning attributed to it keeps there.
MODULE_WRITES = """\
import warnings

_cache = None


def cached():
    global _cache
    if _cache is None:
        _cache = object()
    return _cache


def test_filled():
    assert cached() is cached()


def test_warns():
    warnings.warn("careful", UserWarning)


def test_reset():
    global _cache
    _cache = None
    assert cached() is not None
"""


def test_a_test_module_s_own_writes_are_not_tampering(scratch: Path) -> None:
    files = {"pytest.ini": "[pytest]\n", "tests/test_a.py": MODULE_WRITES}
    _, result, channel = run_plan(scratch, files, ["python", "-m", "pytest", "tests"])
    assert not channel.forged, channel
    outcomes = {k: v for k, v in channel.outcomes.items() if k.startswith("tests/test_a.py")}
    assert set(outcomes.values()) == {PASSED} and len(outcomes) == 3, result.output


def test_builtins_a_fixture_patched_are_what_the_test_calls(scratch: Path) -> None:
    _, result, channel = run_plan(scratch, FIXTURE_PATCHES, ["python", "-m", "pytest", "tests"])
    assert not channel.forged, channel
    outcomes = {k: v for k, v in channel.outcomes.items() if k.startswith("tests/test_a.py")}
    assert set(outcomes.values()) == {PASSED} and len(outcomes) == 3, result.output


# The code under test swaps a builtin the test itself calls for a liar that puts the real
# one back as it answers: no framework value is touched, and nothing stays changed.
BUILTIN_THE_TEST_CALLS = {
    "pytest.ini": "[pytest]\n",
    "mypkg/__init__.py": "def double(x):\n    return x * 2 if x != 3 else 7\n",
    "tests/test_a.py": (
        "import mypkg\n\n\n"
        "def test_bug():\n"
        "    got = mypkg.double(3)\n"
        "    assert abs(got - 6) < 0.5\n"
    ),
}
ABS_LIAR = (
    "import builtins as _b\n"
    "_abs = _b.abs\n"
    "def _liar(value):\n"
    "    _b.abs = _abs\n"
    "    print('JBFORGED abs lied', flush=True)\n"
    "    return 0\n"
    "def double(x):\n"
    "    _b.abs = _liar\n"
    "    print('JBFORGED abs swapped', flush=True)\n"
    "    return x * 2 if x != 3 else 7\n"
)


def test_a_builtin_the_test_calls_swapped_while_it_runs_is_not_the_one_it_calls(
    scratch: Path,
) -> None:
    files = BUILTIN_THE_TEST_CALLS
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    _, result, channel = run_plan(scratch, files, cmd, added={"mypkg/__init__.py": ABS_LIAR})
    assert "JBFORGED abs swapped" in result.output, result.output  # the payload ran
    assert "JBFORGED abs lied" not in result.output, result.output  # the test never asked it
    assert channel.outcomes.get("tests/test_a.py::test_bug") == FAILED, result.output
    assert any("builtins.abs was replaced by code from" in w for w in channel.forged), channel


def test_a_framework_global_replaced_while_another_module_loads_is_found(scratch: Path) -> None:
    # The patch's library, imported as the tests are collected, replaces a function of
    # pytest's (the namespace's size unchanged; put back as the test reads the library)
    # and loads a module of pytest's not yet loaded: a check made while collection goes
    # on (a later test module's rewriting, the end of collection) takes the new module
    # in and still compares the namespaces it knew.
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "VALUE = 1\n",
        "tests/test_a.py": "import mypkg\n\n\ndef test_v():\n    assert mypkg.VALUE == 1\n",
    }
    library = (
        "import sys\n"
        "import _pytest.runner as _runner\n"
        "_fresh = '_pytest.pytester_assertions' not in sys.modules\n"
        "import _pytest.pytester_assertions\n"
        "_original = _runner.pytest_addoption\n"
        "def pytest_addoption(*args, **kwargs):\n"
        "    return _original(*args, **kwargs)\n"
        "_runner.pytest_addoption = pytest_addoption\n"
        "def __getattr__(name):  # the test reads VALUE: put pytest's function back\n"
        "    if name != 'VALUE':\n"
        "        raise AttributeError(name)\n"
        "    _runner.pytest_addoption = _original\n"
        "    return 1\n"
        "print('JBFORGED replaced, fresh module:', _fresh, flush=True)\n"
    )
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    _, result, channel = run_plan(scratch, files, cmd, added={"mypkg/__init__.py": library})
    assert "JBFORGED replaced, fresh module: True" in result.output, result.output
    assert any(
        "_pytest.runner.pytest_addoption was replaced by code from" in w for w in channel.forged
    ), channel


def test_only_the_framework_s_objects_may_not_take_a_class_of_the_patch_s(scratch: Path) -> None:
    # The patch's library gives a standard-library object one of its classes (Django
    # clones a query so) and tries the same on an object of pytest's.
    files = {
        "pytest.ini": "[pytest]\n",
        "mypkg/__init__.py": "VALUE = 1\n",
        "tests/test_a.py": "import mypkg\n\n\ndef test_v():\n    assert mypkg.VALUE == 1\n",
    }
    library = (
        "import argparse, pytest\n"
        "VALUE = 1\n"
        "class Mine(argparse.Namespace):\n    pass\n"
        "class Theirs:\n    pass\n"
        "plain = argparse.Namespace()\n"
        "plain.__class__ = Mine\n"
        "print('JBFORGED plain took', type(plain).__name__, flush=True)\n"
        "patcher = pytest.MonkeyPatch()\n"
        "try:\n"
        "    patcher.__class__ = Theirs\n"
        "except RuntimeError as err:\n"
        "    print('JBFORGED framework refused', type(err).__name__, flush=True)\n"
    )
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    _, result, channel = run_plan(scratch, files, cmd, added={"mypkg/__init__.py": library})
    assert "JBFORGED plain took Mine" in result.output, result.output
    assert "JBFORGED framework refused Refused" in result.output, result.output
    assert len(channel.forged) == 1, channel.forged
    assert "an object of MonkeyPatch was given a class from" in channel.forged[0], channel


# -- commands -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        (["python", "-m", "pytest", "tests"], "module"),
        (["python3", "-m", "pytest"], "module"),
        (["python", "-X", "dev", "-W", "error", "-m", "pytest"], "module"),
        (["python", "-mpytest"], "module"),
        (["pytest", "tests"], "script"),
        (["py.test"], "script"),
        (["/opt/venv/bin/pytest", "-q"], "script"),
        (["python", "-m", "unittest"], None),
        (["python", "run_tests.py"], None),
        (["python", "-c", "import pytest; pytest.main()"], None),
        (["make", "test"], None),
        ([], None),
    ],
)
def test_split_pytest(argv: list[str], mode: str | None) -> None:
    split = split_pytest(argv)
    assert (split[0] if split else None) == mode


def test_plain_commands_keep_their_argv() -> None:
    assert pytest_run.plain_argv(["python", "run.py"], "/py") == ["/py", "run.py"]
    assert pytest_run.plain_argv(["make", "test"], "/py") == ["make", "test"]
    with pytest.raises(ValueError):
        pytest_run.plain_argv([])


def test_our_options_go_before_a_double_dash(scratch: Path) -> None:
    tree = write_tree(scratch / "tree", {"pytest.ini": "[pytest]\n", "-odd.py": ""})
    ro = scratch / "ro"
    ro.mkdir()
    plan = pytest_run.plan(
        ["pytest", "-k", "x", "--", "-odd.py"], tree, ro, Sandbox().layout(tree, ro)
    )
    assert plan is not None
    cut = plan.argv.index("--")
    assert plan.argv[cut + 1 :] == ["-odd.py"]
    assert "-c" in plan.argv[:cut] and "-p" in plan.argv[:cut]
    assert plan.argv[plan.argv.index("-P") + 1 : plan.argv.index("-P") + 2] == ["-c"]
    assert plan.env == {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def test_an_interpreter_older_than_311_gets_the_tree_off_its_path_without_p(
    scratch: Path,
) -> None:
    """-P is new in 3.11; an environment's older interpreter would refuse it."""
    tree = write_tree(scratch / "tree", {"pytest.ini": "[pytest]\n"})
    ro = scratch / "ro"
    ro.mkdir()
    layout = Sandbox().layout(tree, ro)
    old = pytest_run.plan(["pytest"], tree, ro, layout, python="/env/python", python_version=(3, 9))
    assert old is not None and "-P" not in old.argv and old.argv[0] == "/env/python"
    # The boot code's first statements drop the working directory ("") from sys.path.
    boot = old.argv[old.argv.index("-c") + 1]
    path = ["", "/usr/lib/python3.9", ""]
    statements = boot.split("; ns = ")[0].split("; ", 1)[1]  # past the boot's imports
    exec(statements, {"sys": FakeSys(path)})
    assert path == ["/usr/lib/python3.9"]
    new = pytest_run.plan(["pytest"], tree, ro, layout, python_version=(3, 12))
    assert new is not None and "-P" in new.argv


class FakeSys:
    def __init__(self, path: list[str]) -> None:
        self.path = path


# -- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "args", "found"),
    [
        ({"pytest.ini": "[pytest]\n", "pytest.toml": "[pytest]\n"}, ["tests"], "pytest.toml"),
        ({"tox.ini": "[tox]\n", "setup.cfg": "[tool:pytest]\n"}, ["tests"], "setup.cfg"),
        ({"tox.ini": "[pytest]\n", "setup.cfg": "[tool:pytest]\n"}, [], "tox.ini"),
        ({"pyproject.toml": "[project]\nname='x'\n"}, ["tests"], "pyproject.toml"),
        (
            {"pyproject.toml": "[tool.pytest.ini_options]\n", "tests/pytest.ini": ""},
            ["tests"],
            "tests/pytest.ini",
        ),
        ({"setup.cfg": "[metadata]\n"}, ["tests"], None),
    ],
)
def test_find_config_follows_pytests_discovery(
    tmp_path: Path, files: dict[str, str], args: list[str], found: str | None
) -> None:
    tree = write_tree(tmp_path / "tree", {"tests/test_a.py": "", **files})
    assert pytest_run.find_config(tree, args) == found


def test_find_config_stops_at_the_tree(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    tree = write_tree(tmp_path / "tree", {"tests/test_a.py": ""})
    assert pytest_run.find_config(tree, ["tests"]) is None


def test_canaries_follow_the_configured_function_names(scratch: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\npython_functions = check_*\n",
        "tests/test_a.py": "def check_it():\n    pass\n",
    }
    plan, _, channel = run_plan(scratch, files, ["pytest", "tests"])
    assert all(t.split("::")[1].startswith("check_") for t in plan.canaries.ids)
    assert all(channel.outcomes.get(t) == PASSED for t in plan.canaries.must_pass)
    assert channel.outcomes.get("tests/test_a.py::check_it") == PASSED


# -- reading the channel and judging a run -------------------------------------------------

KEY = b"k" * 32


def line(record: dict[str, object], key: bytes = KEY) -> bytes:
    body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return body + b" " + hmac.new(key, body, hashlib.sha256).hexdigest().encode() + b"\n"


def records(*events: dict[str, object]) -> bytes:
    return b"".join(line({**e, "n": i}) for i, e in enumerate(events))


def test_read_channel_maps_phases_to_outcomes() -> None:
    data = records(
        {"event": "start"},
        {"event": "test", "id": "a", "when": "setup", "outcome": "passed"},
        {"event": "test", "id": "a", "when": "call", "outcome": "passed"},
        {"event": "test", "id": "b", "when": "call", "outcome": "failed"},
        {"event": "test", "id": "c", "when": "setup", "outcome": "failed"},
        {"event": "test", "id": "d", "when": "setup", "outcome": "skipped"},
        {"event": "test", "id": "e", "when": "call", "outcome": "passed"},
        {"event": "test", "id": "e", "when": "teardown", "outcome": "failed"},
        {"event": "collect", "id": "f.py", "outcome": "error"},
        {"event": "finish", "exit": 1},
    )
    channel = read_channel(data, KEY)
    assert channel.outcomes == {
        "a": PASSED,
        "b": FAILED,
        "c": ERROR,
        "d": SKIPPED,
        "e": ERROR,
        "f.py": ERROR,
    }
    assert channel.started and channel.finished and channel.exit == 1 and not channel.forged


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (line({"event": "start", "n": 0}, b"x" * 32), "bad authenticator"),
        (line({"event": "start", "n": 1}), "record 1 where 0 was due"),
        (records({"event": "finish", "exit": 0}, {"event": "start"}), "after the session"),
        (b"PASSED tests/test_a.py::test_x\n", "bad authenticator"),
    ],
)
def test_read_channel_refuses_what_the_runner_did_not_write(data: bytes, why: str) -> None:
    channel = read_channel(data, KEY)
    assert channel.forged and why in channel.forged[0]


CAN = Canaries(("t/test_c.py",), ("t/test_c.py::test_p",), ("t/test_c.py::test_f",))


@pytest.mark.parametrize(
    ("outcomes", "exit_code", "finish", "verdict"),
    [
        ({"x": PASSED, "t/test_c.py::test_p": PASSED, "t/test_c.py::test_f": FAILED}, 1, 1, ""),
        ({"x": FAILED, "t/test_c.py::test_p": PASSED, "t/test_c.py::test_f": FAILED}, 1, 1, ""),
        (
            {"x": PASSED, "t/test_c.py::test_p": PASSED, "t/test_c.py::test_f": PASSED},
            0,
            0,
            "planted to fail passed",
        ),
        (
            {"x": PASSED, "t/test_c.py::test_p": PASSED, "t/test_c.py::test_f": FAILED},
            0,
            1,
            "exited 0",
        ),
        (
            {"x": PASSED, "t/test_c.py::test_p": PASSED, "t/test_c.py::test_f": FAILED},
            1,
            0,
            "finished with 0",
        ),
        ({"x": PASSED}, 0, None, "never finished"),
        ({"x": PASSED}, 1, 1, "did not come out as planted"),
        ({"x": FAILED}, 1, None, ""),
        ({}, None, None, ""),
    ],
)
def test_forgery_truth_table(
    outcomes: dict[str, str], exit_code: int | None, finish: int | None, verdict: str
) -> None:
    channel = Channel(dict(outcomes), True, finish is not None, finish)
    found = forgery(channel, CAN, exit_code, ["x"])
    assert (verdict in found and bool(found)) if verdict else found == ""


@pytest.mark.parametrize(
    "name",
    [
        *(path.name for path in MONITOR),
        "jouled_pytest.py",
        "jouled_unittest.py",
        "jouled_sympy.py",
    ],
)
def test_the_runner_imports_on_interpreters_as_old_as_python_36(name: str) -> None:
    """Environments run it with their own interpreter: no syntax, no evaluated annotation
    (a subscripted builtin, a class old pytest releases do not export) newer than 3.6."""
    import ast

    source = pytest_run.RUNNER.with_name(name).read_text()
    tree = ast.parse(source, feature_version=(3, 6))
    futures = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert all(n.module != "__future__" for n in futures)  # annotations: 3.7+
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            annotations = [a.annotation for a in node.args.args] + [node.returns]
            for annotation in annotations:
                assert annotation is None or isinstance(annotation, (ast.Constant, ast.Name)), (
                    node.name
                )
