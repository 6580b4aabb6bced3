"""How the official SWE-bench harness runs an instance's tests and reads their verdict.

Everything an instance's grading needs that the dataset record does not
carry: the per-repository, per-version specification (interpreter, install
steps, test command) from `swebench_specs.json`, the test directives the
official harness derives from the test patch, the repository's log parser,
and the official grading of a parsed log.

`swebench_specs.json` is generated from the official `swebench` package
(`tools/swebench_specs.py`; the version is in its `source` field), and the
tests hold the parsers, the directives and the grading here to that package's
own on the same logs. This module re-implements them; it does not import the
package, which is never a dependency of jouled.

Official semantics kept exactly, differences from jouled's own strict
grading included:

- a test id is whatever the repository's parser makes of a log line: the
  first whitespace-delimited word of a pytest `-rA` line (so parameters with
  spaces are cut), Django's `test_name (module.Class)` text, SymPy's bare
  function name;
- XFAIL counts as passed; a test the log does not mention is failed; a
  SKIPPED test is neither passed nor failed and is left out of both rates;
- FULL: every FAIL_TO_PASS and PASS_TO_PASS test that counts passed (a rate
  with nothing to count is 1); PARTIAL: some but not all FAIL_TO_PASS passed
  and every PASS_TO_PASS did; NO otherwise. Only FULL is resolved;
- the test command's exit status is not read.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from jouled.contracts.contract import Verdict
from jouled.documents.vocabulary import Outcome

__all__ = [
    "FULL",
    "NO",
    "PARSERS",
    "PARTIAL",
    "Spec",
    "official_verdict",
    "outcomes",
    "parse_log",
    "resolution",
    "spec_for",
    "specs_source",
    "test_command",
    "test_directives",
]

# The official test statuses and resolution statuses, spelled as the harness spells them.
PASSED, FAILED, SKIPPED, ERROR, XFAIL = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"
STATUSES = (FAILED, PASSED, SKIPPED, ERROR, XFAIL)
FULL, PARTIAL, NO = "RESOLVED_FULL", "RESOLVED_PARTIAL", "RESOLVED_NO"

# How a status reads in jouled's own (strict) outcomes: XFAIL did not pass.
_OUTCOME = {
    PASSED: Outcome.PASSED.value,
    FAILED: Outcome.FAILED.value,
    SKIPPED: Outcome.SKIPPED.value,
    ERROR: Outcome.ERROR.value,
    XFAIL: Outcome.SKIPPED.value,
}


# -- specifications -------------------------------------------------------------------


@cache
def _table() -> dict[str, Any]:
    text = resources.files("jouled.contracts").joinpath("swebench_specs.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def specs_source() -> str:
    """Which official package the specification table was generated from."""
    return str(_table()["source"])


@dataclass(frozen=True)
class Spec:
    """One repository version's official specification."""

    repo: str
    version: str
    python: str  # the interpreter version, "3.11"
    test_cmd: str  # a shell command line: leading NAME=value words set the environment
    parser: str  # a key of PARSERS
    install: str = ""
    packages: str = ""  # "requirements.txt", "environment.yml" or package names
    pip_packages: tuple[str, ...] = ()
    pre_install: tuple[str, ...] = ()
    eval_commands: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()  # where "requirements.txt" is, relative to the tree

    def describe(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "version": self.version,
            "python": self.python,
            "test_cmd": self.test_cmd,
            "parser": self.parser,
            "source": specs_source(),
        }


def spec_for(repo: str, version: str | None) -> Spec | None:
    """The official specification of `repo` at `version`, None when there is none."""
    entry = _table()["repos"].get(repo)
    if entry is None or version is None or entry.get("parser") not in PARSERS:
        return None
    raw = entry["versions"].get(version)
    if raw is None:
        return None
    test_cmd = raw["test_cmd"]
    if isinstance(test_cmd, list):  # the harness runs the last one
        test_cmd = test_cmd[-1]
    return Spec(
        repo=repo,
        version=version,
        python=str(raw["python"]),
        test_cmd=str(test_cmd),
        parser=str(entry["parser"]),
        install=str(raw.get("install", "")),
        packages=str(raw.get("packages", "")),
        pip_packages=tuple(raw.get("pip_packages", ())),
        pre_install=tuple(raw.get("pre_install", ())),
        eval_commands=tuple(raw.get("eval_commands", ())),
        requirements=tuple(entry.get("requirements", ())),
    )


_DIFF_TARGET = re.compile(r"diff --git a/.* b/(.*)")


def test_directives(repo: str, test_patch: str) -> tuple[str, ...]:
    """What the official harness names on the test command line for a test patch.

    Every file the patch's `diff --git` lines name, less data files (by
    extension); for Django, as a dotted module path relative to `tests/`.
    """
    exts = tuple(_table()["non_test_exts"])
    found = [p for p in _DIFF_TARGET.findall(test_patch) if not p.endswith(exts)]
    if repo != "django/django":
        return tuple(found)
    dotted = []
    for path in found:
        path = path.removesuffix(".py")
        path = path.removeprefix("tests/")
        dotted.append(path.replace("/", "."))
    return tuple(dotted)


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def test_command(spec: Spec, test_patch: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """(argv, environment) of the official test command for this test patch.

    The specification's command line is split as a shell would split it; its
    leading NAME=value words become the environment, after the variables its
    `eval_commands` export (`export LANG=en_US.UTF-8`). Its other eval commands
    (generating locales) are the host's business.
    """
    env: dict[str, str] = {}
    for line in spec.eval_commands:
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and _ASSIGNMENT.match(words[1]):
            name, _, value = words[1].partition("=")
            env[name] = value
    words = shlex.split(spec.test_cmd)
    while words and _ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return (*words, *test_directives(spec.repo, test_patch)), env


# -- log parsers ----------------------------------------------------------------------


def _starts_with_status(line: str) -> bool:
    return line.startswith(STATUSES)


def _pytest_lines(log: str) -> Iterator[tuple[str, str]]:
    """(status, id) of each line of a log that starts with a status word."""
    for line in log.split("\n"):
        if not _starts_with_status(line):
            continue
        if line.startswith(FAILED):
            line = line.replace(" - ", " ")
        words = line.split()
        if len(words) > 1:
            yield words[0], words[1]


def _pytest(log: str) -> dict[str, str]:
    return {name: status for status, name in _pytest_lines(log)}


def _matplotlib(log: str) -> dict[str, str]:
    buttons = log.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3")
    return _pytest(buttons)


_OPTION = re.compile(r"(.*?)\[(.*)\]")


def _pytest_options(log: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for status, name in _pytest_lines(log):
        match = _OPTION.search(name)
        if match is not None:
            main, option = match.groups()
            if option.startswith("/") and not option.startswith("//") and "*" not in option:
                option = "/" + option.split("/")[-1]
            name = f"{main}[{option}]"
        found[name] = status
    return found


_COLOUR = re.compile(r"\[(\d+)m")
_CONTROL = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))


def _pytest_v2(log: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in log.split("\n"):
        line = _COLOUR.sub("", line).translate(_CONTROL)
        if _starts_with_status(line):
            if line.startswith(FAILED):
                line = line.replace(" - ", " ")
            words = line.split()
            if len(words) >= 2:
                found[words[1]] = words[0]
        elif line.endswith(STATUSES):
            words = line.split()
            if len(words) >= 2:
                found[words[0]] = words[1]
    return found


def _seaborn(log: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in log.split("\n"):
        words = line.split()
        if len(words) < 2:  # the official parser fails on such a line; none names a test
            continue
        if line.startswith(FAILED):
            found[words[1]] = FAILED
        elif f" {PASSED} " in line:
            if words[1] == PASSED:
                found[words[0]] = PASSED
        elif line.startswith(PASSED):
            found[words[1]] = PASSED
    return found


_SYMPY_FAILURE = re.compile(r"(_*) (.*)\.py:(.*) (_*)")


def _sympy(log: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for _, path, name, _ in _SYMPY_FAILURE.findall(log):
        found[f"{path}.py:{name}"] = FAILED
    for line in log.split("\n"):
        line = line.strip()
        if not line.startswith("test_"):
            continue
        for suffix, status in ((" E", ERROR), (" F", FAILED), (" ok", PASSED)):
            if line.endswith(suffix):
                found[line.split()[0]] = status
    return found


_DJANGO_PASS = (" ... ok", " ... OK", " ...  OK")
# Output printed in the middle of a test's line pushes its "ok" onto a line of its own.
_DJANGO_INTERRUPTED = (
    r"^(.*?)\s\.\.\.\sTesting\ against\ Django\ installed\ in\ ((?s:.*?))\ silenced\)\.\nok$",
    r"^(.*?)\s\.\.\.\sInternal\ Server\ Error:\ \/(.*)\/\nok$",
    r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$",
)
_DJANGO_MIGRATION_PREFIX = "Applying sites.0002_alter_domain_unique...test_no_migrations"


def _django(log: str) -> dict[str, str]:
    found: dict[str, str] = {}
    last: str | None = None
    for raw in log.split("\n"):
        line = raw.strip()
        if "--version is equivalent to version" in line:
            found["--version is equivalent to version"] = PASSED
        if " ... " in line:
            last = line.split(" ... ")[0]
        for suffix in _DJANGO_PASS:
            if line.endswith(suffix):
                if line.startswith(_DJANGO_MIGRATION_PREFIX):
                    line = line.split("...", 1)[-1].strip()
                found[line.rsplit(suffix, 1)[0]] = PASSED
                break
        if " ... skipped" in line:
            found[line.split(" ... skipped")[0]] = SKIPPED
        if line.endswith(" ... FAIL"):
            found[line.split(" ... FAIL")[0]] = FAILED
        if line.startswith("FAIL:"):
            found[line.split()[1].strip()] = FAILED
        if line.endswith(" ... ERROR"):
            found[line.split(" ... ERROR")[0]] = ERROR
        if line.startswith("ERROR:"):
            found[line.split()[1].strip()] = ERROR
        if line.startswith("ok") and last is not None:
            found[last] = PASSED
    for pattern in _DJANGO_INTERRUPTED:
        for match in re.finditer(pattern, log, re.MULTILINE):
            found[match.group(1)] = PASSED
    return found


PARSERS: Mapping[str, Callable[[str], dict[str, str]]] = {
    "pytest": _pytest,
    "pytest_options": _pytest_options,
    "pytest_v2": _pytest_v2,
    "matplotlib": _matplotlib,
    "seaborn": _seaborn,
    "sympy": _sympy,
    "django": _django,
}


def parse_log(parser: str, log: str) -> dict[str, str]:
    """Test id -> official status (PASSED, FAILED, SKIPPED, ERROR, XFAIL) from a run's log."""
    return PARSERS[parser](log)


def outcomes(parser: str, log: str) -> dict[str, str]:
    """The same ids with jouled's outcomes (passed, failed, skipped, error): XFAIL is skipped.

    A line that only starts with a status word (pytest's `ERROR: file or directory not
    found: ...`) is read by the official parser as a test named by its second word with that
    first word (`ERROR:`) as its status, which the official grading counts neither passed
    nor failed; here it is an error.
    """
    return {
        name: _OUTCOME.get(status, Outcome.ERROR.value)
        for name, status in parse_log(parser, log).items()
    }


# -- the official grading -------------------------------------------------------------


def _split(ids: Sequence[str], statuses: Mapping[str, str]) -> tuple[list[str], list[str]]:
    success, failure = [], []
    for test in ids:
        status = statuses.get(test)
        if status in (PASSED, XFAIL):
            success.append(test)
        elif status is None or status in (FAILED, ERROR):
            failure.append(test)
    return success, failure


def _rate(success: Sequence[str], failure: Sequence[str]) -> float:
    total = len(success) + len(failure)
    return 1.0 if total == 0 else len(success) / total


def resolution(
    statuses: Mapping[str, str], fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]
) -> tuple[str, dict[str, dict[str, list[str]]]]:
    """The official resolution status of a status map, and which tests succeeded or failed."""
    f2p_ok, f2p_bad = _split(fail_to_pass, statuses)
    p2p_ok, p2p_bad = _split(pass_to_pass, statuses)
    f2p, p2p = _rate(f2p_ok, f2p_bad), _rate(p2p_ok, p2p_bad)
    if f2p == 1 and p2p == 1:
        status = FULL
    elif 0 < f2p < 1 and p2p == 1:
        status = PARTIAL
    else:
        status = NO
    tests = {
        "FAIL_TO_PASS": {"success": f2p_ok, "failure": f2p_bad},
        "PASS_TO_PASS": {"success": p2p_ok, "failure": p2p_bad},
    }
    return status, tests


def official_verdict(
    parser: str, log: str, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]
) -> Verdict:
    """The official resolution of a run from its log: FULL (resolved), PARTIAL or NO."""
    status, tests = resolution(parse_log(parser, log), fail_to_pass, pass_to_pass)
    return Verdict(
        resolved=status == FULL,
        status=status,
        tests=tests,
        rules=f"{specs_source()} grading, {parser} log parser",
    )
