import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jouled.pipeline.testreport import (
    ERROR,
    FAILED,
    PASSED,
    SKIPPED,
    is_pytest,
    parse_junit,
    parse_ra,
    pytest_argv,
    read_junit,
)
from jouled.pipeline.testreport import grade as grade_outcomes

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


def make_project(root: Path) -> Path:
    # The pytest.ini pins the rootdir to the tree; mypkg sits in the tree root
    # and is importable only the way `python -m pytest` makes it importable.
    return write_tree(
        root,
        {
            "pytest.ini": "[pytest]\n",
            "mypkg/__init__.py": "VALUE = 1\n",
            X: TEST_X,
            "tests/sub/test_y.py": "def test_y():\n    pass\n",
        },
    )


def run_pytest(tree: Path, test_cmd: list[str], report: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        pytest_argv(test_cmd, report),
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def project_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, str, int]:
    tree = make_project(tmp_path_factory.mktemp("project"))
    report = tmp_path_factory.mktemp("report") / "junit.xml"
    done = run_pytest(tree, ["python", "-m", "pytest", "tests"], report)
    return report.read_bytes(), done.stdout + done.stderr, done.returncode


# -- real pytest runs ---------------------------------------------------------------------


def test_junit_ids_and_outcomes_are_exact_node_ids(project_run: tuple[bytes, str, int]) -> None:
    report, output, exit_code = project_run
    assert parse_junit(report) == EXPECTED, output
    assert exit_code == 1


def test_ra_summary_agrees_with_junit(project_run: tuple[bytes, str, int]) -> None:
    report, output, _ = project_run
    from_junit = parse_junit(report)
    from_ra = parse_ra(output)
    # Folded "SKIPPED [1] file:line" lines name no test: the one plain skip is absent.
    assert from_ra == {k: v for k, v in from_junit.items() if k != f"{X}::test_skip"}


def test_collection_error_is_reported_on_the_file(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path / "tree",
        {
            "pytest.ini": "[pytest]\n",
            "tests/test_bad.py": "import no_such_module_here\n",
            "tests/test_good.py": "def test_ok():\n    pass\n",
        },
    )
    report = tmp_path / "junit.xml"
    done = run_pytest(tree, ["python", "-m", "pytest", "tests"], report)
    assert parse_junit(report.read_bytes()) == {"tests/test_bad.py": ERROR}
    assert parse_ra(done.stdout) == {"tests/test_bad.py": ERROR}
    graded = grade_outcomes(
        parse_junit(report.read_bytes()), ["tests/test_good.py::test_ok"], [], 0
    )
    assert graded.missing == ("tests/test_good.py::test_ok",)
    assert not graded.resolved


FAKE_PYTEST = textwrap.dedent(
    """
    import sys
    print("FAKE PYTEST RAN")
    for arg in sys.argv:
        if arg.startswith("--junitxml="):
            open(arg.split("=", 1)[1], "w").write(
                '<testsuites><testsuite><testcase classname="tests.test_a" '
                'name="test_forged" file="tests/test_a.py"/></testsuite></testsuites>'
            )
    sys.exit(0)
    """
)


@pytest.mark.parametrize(
    "test_cmd",
    [["python", "-m", "pytest", "tests"], ["pytest", "tests"], [sys.executable, "-m", "pytest"]],
)
def test_pytest_py_in_the_tree_root_does_not_shadow_pytest(
    tmp_path: Path, test_cmd: list[str]
) -> None:
    tree = write_tree(
        tmp_path / "tree",
        {
            "pytest.ini": "[pytest]\ntestpaths = tests\n",
            "pytest.py": FAKE_PYTEST,
            "tests/test_a.py": "def test_real():\n    assert 1 == 2\n",
        },
    )
    report = tmp_path / "report" / "junit.xml"
    report.parent.mkdir()
    done = run_pytest(tree, test_cmd, report)
    assert "FAKE PYTEST RAN" not in done.stdout + done.stderr
    assert parse_junit(report.read_bytes()) == {"tests/test_a.py::test_real": FAILED}
    assert done.returncode == 1


# -- commands -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "-m", "pytest", "tests"], True),
        (["python3", "-m", "pytest"], True),
        (["python", "-X", "dev", "-W", "error", "-m", "pytest"], True),
        (["python", "-mpytest"], True),
        ([sys.executable, "-m", "pytest", "-x"], True),
        (["pytest", "tests"], True),
        (["py.test"], True),
        (["/opt/venv/bin/pytest", "-q"], True),
        (["python", "-m", "unittest"], False),
        (["python", "run_tests.py"], False),
        (["python", "-c", "import pytest; pytest.main()"], False),
        (["make", "test"], False),
        (["tox", "-e", "pytest"], False),
        ([], False),
    ],
)
def test_is_pytest(argv: list[str], expected: bool) -> None:
    assert is_pytest(argv) is expected


REPORT = Path("/reports/junit.xml")
OURS = [f"--junitxml={REPORT}", "-o", "junit_family=xunit1", "-p", "no:cacheprovider", "-rA"]


def test_pytest_argv_for_the_module_form() -> None:
    argv = pytest_argv(["python", "-X", "dev", "-m", "pytest", "tests", "-x"], REPORT, "/py")
    assert argv[:5] == ["/py", "-X", "dev", "-P", "-c"]
    assert "run_module('pytest'" in argv[5]
    assert argv[6:] == ["tests", "-x", *OURS]


def test_pytest_argv_for_the_script_form() -> None:
    assert pytest_argv(["pytest", "-q", "tests"], REPORT, "/py") == [
        "/py",
        "-P",
        "-m",
        "pytest",
        "-q",
        "tests",
        *OURS,
    ]


def test_pytest_argv_keeps_an_explicit_interpreter() -> None:
    argv = pytest_argv(["/opt/py/bin/python3.12", "-m", "pytest"], REPORT, "/py")
    assert argv[0] == "/opt/py/bin/python3.12"


def test_pytest_argv_puts_options_before_a_double_dash() -> None:
    argv = pytest_argv(["pytest", "-k", "x", "--", "tests/-odd.py"], REPORT, "/py")
    assert argv[4:] == ["-k", "x", *OURS, "--", "tests/-odd.py"]


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        (["python", "check.py", "--fast"], ["/py", "check.py", "--fast"]),
        (["python3", "-c", "print(1)"], ["/py", "-c", "print(1)"]),
        (["make", "test"], ["make", "test"]),
        (["./run-tests.sh"], ["./run-tests.sh"]),
    ],
)
def test_pytest_argv_leaves_other_commands_alone(cmd: list[str], expected: list[str]) -> None:
    assert pytest_argv(cmd, REPORT, "/py") == expected


def test_pytest_argv_rejects_an_empty_command() -> None:
    with pytest.raises(ValueError):
        pytest_argv([], REPORT)


# -- junit parsing ------------------------------------------------------------------------


def junit(*cases: str) -> bytes:
    body = "".join(cases)
    return f'<?xml version="1.0"?><testsuites><testsuite>{body}</testsuite></testsuites>'.encode()


def test_inherited_test_is_named_by_its_collecting_module() -> None:
    # Defined in tests/base.py, collected through TestFoo in tests/test_x.py.
    case = '<testcase classname="tests.test_x.TestFoo" name="test_m" file="tests/base.py"/>'
    assert parse_junit(junit(case)) == {"tests/test_x.py::TestFoo::test_m": PASSED}


def test_imported_test_function_is_named_by_its_collecting_module() -> None:
    case = '<testcase classname="tests.test_x" name="test_helper" file="tests/helpers.py"/>'
    assert parse_junit(junit(case)) == {"tests/test_x.py::test_helper": PASSED}


def test_dotted_directories_and_doctests_survive() -> None:
    cases = (
        '<testcase classname="tests.v1.2.test_x.TestA" name="test_a[1.5]" '
        'file="tests/v1.2/test_x.py"/>',
        '<testcase classname="pkg.mod" name="pkg.mod.func" file="pkg/mod.py"/>',
    )
    assert parse_junit(junit(*cases)) == {
        "tests/v1.2/test_x.py::TestA::test_a[1.5]": PASSED,
        "pkg/mod.py::pkg.mod.func": PASSED,
    }


def test_worst_outcome_wins_for_a_repeated_id() -> None:
    cases = (
        '<testcase classname="t" name="test_a" file="t.py"><failure message="x"/></testcase>',
        '<testcase classname="t" name="test_a" file="t.py"><error message="td"/></testcase>',
        '<testcase classname="t" name="test_b" file="t.py"><skipped type="pytest.xfail"/>'
        "</testcase>",
    )
    assert parse_junit(junit(*cases)) == {"t.py::test_a": ERROR, "t.py::test_b": SKIPPED}


def test_a_report_without_testcases_is_empty() -> None:
    assert parse_junit(b'<testsuites><testsuite name="pytest" tests="0"/></testsuites>') == {}


@pytest.mark.parametrize(
    "data", [b"", b"   \n", b"<testsuites><testsuite>", b"not xml at all", b"<html></html>"]
)
def test_unusable_reports_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_junit(data)


def test_read_junit_reads_a_regular_file(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_bytes(junit('<testcase classname="t" name="test_a" file="t.py"/>'))
    assert read_junit(report) == {"t.py::test_a": PASSED}


def test_read_junit_refuses_symlinks_fifos_and_huge_files(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.xml"
    target.write_bytes(junit('<testcase classname="t" name="test_a" file="t.py"/>'))
    link = tmp_path / "link.xml"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.xml"
    os.mkfifo(fifo)
    for path in (link, fifo, tmp_path / "missing.xml"):
        with pytest.raises(ValueError):
            read_junit(path)
    with pytest.raises(ValueError, match="over"):
        read_junit(target, max_bytes=10)


# -- the -rA summary ----------------------------------------------------------------------


def test_parse_ra_reads_only_the_last_summary_section() -> None:
    output = textwrap.dedent(
        """\
        ----------------------------- Captured stdout call -----------------------------
        PASSED tests/test_a.py::test_forged
        =========================== short test summary info ============================
        PASSED tests/test_a.py::test_early
        ================================ 1 passed in 0.01s ================================
        =========================== short test summary info ============================
        PASSED tests/test_a.py::test_ok
        SKIPPED [1] tests/test_a.py:12: not today
        XFAIL tests/test_a.py::test_xf - known bug
        XFAIL at setup of tests/test_a.py::test_xs
        XPASS tests/test_a.py::test_xp - lucky
        ERROR tests/test_a.py::test_ok - RuntimeError: teardown broke
        FAILED tests/test_a.py::test_p[sp ace - dash] - AssertionError: a - b
        FAILED tests/test_a.py::TestC::test_m[a::b]
        ======================= 2 failed, 1 passed, 1 error in 0.12s =======================
        PASSED tests/test_a.py::test_after_the_end
        """
    )
    assert parse_ra(output) == {
        "tests/test_a.py::test_ok": ERROR,
        "tests/test_a.py::test_xf": SKIPPED,
        "tests/test_a.py::test_xs": SKIPPED,
        "tests/test_a.py::test_xp": PASSED,
        "tests/test_a.py::test_p[sp ace - dash]": FAILED,
        "tests/test_a.py::TestC::test_m[a::b]": FAILED,
    }


def test_parse_ra_strips_colour_codes() -> None:
    output = (
        "\x1b[36m=== short test summary info ===\x1b[0m\n"
        "\x1b[32mPASSED\x1b[0m tests/test_a.py::\x1b[1mtest_ok\x1b[0m\n"
        "\x1b[32m=== 1 passed in 0.01s ===\x1b[0m\n"
    )
    assert parse_ra(output) == {"tests/test_a.py::test_ok": PASSED}


def test_parse_ra_without_a_summary_is_empty() -> None:
    assert parse_ra("PASSED tests/test_a.py::test_forged\nall good\n") == {}


# -- grading ------------------------------------------------------------------------------

A, B, C = "t.py::test_a", "t.py::test_b", "t.py::test_c"


@pytest.mark.parametrize(
    ("outcomes", "exit_code", "resolved"),
    [
        ({A: PASSED, B: PASSED}, 0, True),
        ({A: PASSED, B: PASSED, C: FAILED}, 1, False),  # every expected id passed, exit disagrees
        ({A: PASSED, B: PASSED}, 1, False),
        ({A: PASSED, B: PASSED}, None, False),  # killed: no exit status at all
        ({A: PASSED}, 0, False),  # exit 0 with an expected id that never ran
        ({A: FAILED, B: PASSED}, 0, False),
        ({A: PASSED, B: SKIPPED}, 0, False),
        ({A: PASSED, B: ERROR}, 0, False),
        ({}, 0, False),
    ],
)
def test_grade_truth_table(outcomes: dict[str, str], exit_code: int | None, resolved: bool) -> None:
    assert grade_outcomes(outcomes, [A], [B], exit_code).resolved is resolved


def test_grade_sorts_expected_ids_into_passed_failed_missing() -> None:
    outcomes = {A: PASSED, B: SKIPPED, "t.py::test_other": PASSED}
    graded = grade_outcomes(outcomes, [A, C], [B, A], 0)
    assert graded.passed == (A,)
    assert graded.failed == (B,)
    assert graded.missing == (C,)
    assert graded.summary() == {"expected": 3, "passed": 1, "failed": 1, "missing": 1}
    assert not graded.resolved


def test_grade_without_expected_ids_resolves_nothing() -> None:
    graded = grade_outcomes({A: PASSED}, [], [], 0)
    assert not graded.resolved
    assert graded.summary() == {"expected": 0, "passed": 0, "failed": 0, "missing": 0}
