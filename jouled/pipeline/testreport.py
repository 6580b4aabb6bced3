"""Test ids, test outcomes and the resolution verdict.

A task writes its test command the way a person would; `pytest_argv` turns a
pytest command into one that also writes a junit XML report. Outcomes are read
from that report (`parse_junit`, preferred) or from pytest's `-rA` short summary
(`parse_ra`, the fallback when no usable report exists). Either way a test id is
exactly pytest's node id, e.g. `tests/test_x.py::TestClass::test_m[param-1]`.

Both sources are written by the process under test, so they are evidence, not
proof: code the patch changes runs inside that process and could forge either.
What `grade` adds is that the exit status and the expected ids must all agree.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PASSED, FAILED, SKIPPED, ERROR = "passed", "failed", "skipped", "error"

# When one id is reported more than once (a failing call plus an erroring
# teardown), the worst outcome wins.
_SEVERITY = {PASSED: 0, SKIPPED: 1, FAILED: 2, ERROR: 3}

# Options the daemon adds to every pytest run. Appended after the task's own
# options so that, for options where the last one wins, ours do.
_REPORT_OPTIONS = ("-o", "junit_family=xunit1", "-p", "no:cacheprovider", "-rA")

# `python -m pytest` puts the working directory first on sys.path; that is how
# a task's tests import the package under test. `-P` keeps it off while the real
# pytest is imported (so a `pytest.py` in the tree cannot stand in for it), and
# this puts it back before pytest starts collecting.
_PYTEST_MODULE_BOOT = (
    "import os, runpy, sys, pytest; sys.path.insert(0, os.getcwd()); "
    "runpy.run_module('pytest', run_name='__main__', alter_sys=True)"
)

_PYTEST_SCRIPTS = frozenset({"pytest", "py.test"})
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*)?")
# Interpreter options that consume the next argument.
_PYTHON_OPTS_WITH_ARG = frozenset({"-W", "-X", "--check-hash-based-pycs"})
# The names a task uses for "the interpreter the daemon runs under".
_PORTABLE_PYTHON = frozenset({"python", "python3"})


# -- commands -----------------------------------------------------------------------------


def _is_python(program: str) -> bool:
    return (
        program == sys.executable or _PYTHON_NAME.fullmatch(os.path.basename(program)) is not None
    )


def _split_python(argv: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """Split `python [opts] -m pytest args` into (opts, args); None if not that shape."""
    opts: list[str] = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            if i + 1 < len(argv) and argv[i + 1] == "pytest":
                return opts, list(argv[i + 2 :])
            return None
        if arg == "-mpytest":
            return opts, list(argv[i + 1 :])
        if not arg.startswith("-") or arg in ("-", "-c") or arg.startswith("-c"):
            return None  # a script, stdin or -c code: not pytest as a module
        opts.append(arg)
        if arg in _PYTHON_OPTS_WITH_ARG and i + 1 < len(argv):
            opts.append(argv[i + 1])
            i += 1
        i += 1
    return None


def is_pytest(argv: Sequence[str]) -> bool:
    """True for `pytest ...`, `py.test ...` and `<python> [opts] -m pytest ...`."""
    if not argv:
        return False
    if os.path.basename(argv[0]) in _PYTEST_SCRIPTS:
        return True
    return _is_python(argv[0]) and _split_python(argv) is not None


def _interpreter(program: str, python: str) -> str:
    return python if program in _PORTABLE_PYTHON else program


def _with_report_options(args: Sequence[str], report_path: Path) -> list[str]:
    ours = [f"--junitxml={report_path}", *_REPORT_OPTIONS]
    if "--" in args:  # after "--" everything is a path, so ours go before it
        cut = list(args).index("--")
        return [*args[:cut], *ours, *args[cut:]]
    return [*args, *ours]


def pytest_argv(
    test_cmd: Sequence[str], report_path: Path, python: str = sys.executable
) -> list[str]:
    """The argv the daemon runs for a task's test command.

    A leading `python` (or `python3`) becomes `python`, the daemon's interpreter.
    A pytest command also gets a junit XML report at `report_path`, the `-rA`
    short summary and no cache, and runs with `-P` so a module the patch drops in
    the tree root cannot shadow pytest. `python -m pytest` keeps its usual import
    semantics (the working directory importable, once pytest itself is loaded);
    the `pytest` script form keeps its own (the working directory not on sys.path).
    `-P` needs Python 3.11 or newer, which `python` must be.
    """
    if not test_cmd:
        raise ValueError("empty test command")
    if os.path.basename(test_cmd[0]) in _PYTEST_SCRIPTS:
        args = _with_report_options(test_cmd[1:], report_path)
        return [python, "-P", "-m", "pytest", *args]
    split = _split_python(test_cmd) if _is_python(test_cmd[0]) else None
    if split is None:
        return [_interpreter(test_cmd[0], python), *test_cmd[1:]]
    opts, args = split
    interpreter = _interpreter(test_cmd[0], python)
    safe_opts = [o for o in opts if o != "-P"]
    boot = [interpreter, *safe_opts, "-P", "-c", _PYTEST_MODULE_BOOT]
    return [*boot, *_with_report_options(args, report_path)]


# -- junit XML ----------------------------------------------------------------------------


def read_junit(path: Path, *, max_bytes: int = 64 << 20) -> dict[str, str]:
    """Read and parse a junit report the command under test may have tampered with.

    The report directory is writable by that command, so the report may be a
    symlink, a FIFO or huge: refuse all three rather than follow, block or
    exhaust memory. Raises ValueError when there is no usable report.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise ValueError(f"no junit report at {path}: {err.strerror}") from err
    with os.fdopen(fd, "rb") as report:
        info = os.fstat(report.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"junit report {path} is not a regular file")
        if info.st_size > max_bytes:
            raise ValueError(f"junit report {path} is {info.st_size} bytes, over {max_bytes}")
        data = report.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"junit report {path} grew past {max_bytes} bytes")
    return parse_junit(data)


def _module_of(file: str) -> str:
    return file.removesuffix(".py").replace("/", ".")


def _split_classname(classname: str, file: str) -> tuple[str, list[str]]:
    """The test file and the class path of a junit `classname`.

    `classname` is the node id's file as a dotted path plus its classes. The
    `file` attribute names where the function is defined, which is the node's
    file except for tests inherited or imported from another module.
    """
    module = _module_of(file)
    if classname == module or classname.startswith(module + "."):
        rest = classname[len(module) + 1 :]
        return file, rest.split(".") if rest else []
    # The definition lives elsewhere: recover the file from classname alone,
    # taking the first capitalised part as the first class (module names are
    # lower case by convention, test classes are `Test*` by default).
    parts = classname.split(".")
    first_class = next((i for i, p in enumerate(parts) if i > 0 and p[:1].isupper()), len(parts))
    return "/".join(parts[:first_class]) + ".py", parts[first_class:]


def _node_id(case: ET.Element) -> str:
    classname = case.get("classname", "")
    name = case.get("name", "")
    file = case.get("file", "")
    if not classname:
        # A collection error: the node is the file itself, named as a dotted module.
        return file if file and _module_of(file) == name else name
    if not file:
        file = classname.split(".", 1)[0] + ".py"  # never for xunit1; keeps xunit2 usable
    path, classes = _split_classname(classname, file)
    return "::".join([path, *classes, name])


def _outcome(case: ET.Element) -> str:
    tags = {child.tag for child in case}
    if "error" in tags:
        return ERROR
    if "failure" in tags:
        return FAILED
    if "skipped" in tags:
        return SKIPPED  # xfail included: an expected failure is not a pass
    return PASSED


def _record(outcomes: dict[str, str], test_id: str, outcome: str) -> None:
    previous = outcomes.get(test_id)
    if previous is None or _SEVERITY[outcome] > _SEVERITY[previous]:
        outcomes[test_id] = outcome


def parse_junit(xml_bytes: bytes) -> dict[str, str]:
    """Test id -> outcome from a pytest junit report (xunit1 family).

    Raises ValueError when the bytes are not a junit report, so the caller can
    fall back to `parse_ra`. A report with no test cases parses to {}.
    """
    if not xml_bytes.strip():
        raise ValueError("empty junit report")
    try:
        root = ET.fromstring(xml_bytes)
    except ET.ParseError as err:
        raise ValueError(f"malformed junit report: {err}") from err
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError(f"not a junit report: root element is <{root.tag}>")
    outcomes: dict[str, str] = {}
    for case in root.iter("testcase"):
        _record(outcomes, _node_id(case), _outcome(case))
    return outcomes


# -- the -rA short summary ----------------------------------------------------------------

_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+$")
_FINAL_LINE = re.compile(r"^=+ .* =+$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SUMMARY_WORDS = {
    "PASSED": PASSED,
    "FAILED": FAILED,
    "ERROR": ERROR,
    "SKIPPED": SKIPPED,
    "XFAIL": SKIPPED,
    "XPASS": PASSED,
}
_PHASE_PREFIX = re.compile(r"^at (setup|call|teardown) of ")


def _summary_lines(output: str) -> list[str]:
    """The lines of the last short test summary section, [] when there is none.

    Only that section counts: captured output printed elsewhere can contain
    lines that look like summary lines.
    """
    lines = _ANSI.sub("", output).splitlines()
    starts = [i for i, line in enumerate(lines) if _SUMMARY_HEADER.match(line)]
    if not starts:
        return []
    section: list[str] = []
    for line in lines[starts[-1] + 1 :]:
        if _FINAL_LINE.match(line):
            break
        section.append(line)
    return section


def _summary_id(rest: str) -> str | None:
    """The node id at the start of a summary line's remainder ("<id>" or "<id> - <message>")."""
    rest = _PHASE_PREFIX.sub("", rest)
    if not rest or rest.startswith("["):  # "SKIPPED [1] file:line: reason" names no test
        return None
    # The message follows " - ", which a parameter id may contain too: take the
    # shortest prefix whose brackets are complete.
    pieces = rest.split(" - ")
    for n in range(1, len(pieces) + 1):
        candidate = " - ".join(pieces[:n])
        if "[" not in candidate or candidate.endswith("]"):
            return candidate.rstrip()
    return rest.rstrip()


def parse_ra(output: str) -> dict[str, str]:
    """Test id -> outcome from pytest's `-rA` short test summary in `output`.

    Lines without a test id (folded `SKIPPED [n] file:line` lines) are ignored,
    so skipped tests are absent here, not "skipped". Ids are relative to the
    directory pytest ran in, which equals the junit ids when that is the rootdir.
    """
    outcomes: dict[str, str] = {}
    for line in _summary_lines(output):
        word, _, rest = line.partition(" ")
        outcome = _SUMMARY_WORDS.get(word)
        test_id = _summary_id(rest) if outcome else None
        if outcome and test_id:
            _record(outcomes, test_id, outcome)
    return outcomes


# -- grading ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grade:
    resolved: bool
    expected: int
    passed: tuple[str, ...]  # expected ids that ran and passed
    failed: tuple[str, ...]  # expected ids that ran and did not pass
    missing: tuple[str, ...]  # expected ids that never ran (deselected, not collected, renamed)

    def summary(self) -> dict[str, int]:
        return {
            "expected": self.expected,
            "passed": len(self.passed),
            "failed": len(self.failed),
            "missing": len(self.missing),
        }


def grade(
    outcomes: Mapping[str, str],
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    exit_code: int | None,
) -> Grade:
    """Resolved iff every expected id ran and passed and the command exited 0.

    Neither signal is trusted alone: exit 0 with an expected id missing is
    unresolved, and so is every id passing under a nonzero (or no) exit status.
    With no expected ids at all nothing is resolved: there is nothing to check.
    Skipped and xfailed tests did not pass.
    """
    expected = list(dict.fromkeys([*fail_to_pass, *pass_to_pass]))
    passed = tuple(t for t in expected if outcomes.get(t) == PASSED)
    failed = tuple(t for t in expected if t in outcomes and outcomes[t] != PASSED)
    missing = tuple(t for t in expected if t not in outcomes)
    resolved = bool(expected) and not failed and not missing and exit_code == 0
    return Grade(resolved, len(expected), passed, failed, missing)
