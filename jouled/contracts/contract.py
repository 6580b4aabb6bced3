"""The contract: everything the daemon needs to grade a patch for one task.

Local task directories and SWE-bench records both compile to a Contract;
nothing downstream knows which one it came from.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from jouled.errors import UsageError

# Files that steer how tests are collected and run: restored to their pristine
# bytes wherever they appear, and deleted when a patch adds them.
TEST_CONFIG_NAMES = (
    "conftest.py",
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
    "setup.cfg",
)
ROOT_CONFIG_NAMES = ("pyproject.toml",)
# Never part of a task tree; skipped when seeding and hashing.
# .git is never needed in a workdir (patches may not touch it) and is large in real checkouts.
IGNORED_NAMES = (".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")


# Maps the ids a run reported onto the spellings a contract's expected ids use.
IdMatcher = Callable[[Mapping[str, str], Sequence[str]], dict[str, str]]


VERDICT_FAILED_IDS = 50  # how many failed ids a verdict lists


@dataclass(frozen=True)
class Verdict:
    """A verdict computed by rules a contract brings, from a run's captured output."""

    resolved: bool
    status: str  # the rules' own name for it ("RESOLVED_FULL")
    tests: Mapping[str, Mapping[str, Sequence[str]]]  # list -> {"success": [...], "failure": [...]}
    rules: str  # whose rules, which version

    def to_wire(self) -> dict[str, Any]:
        return {
            "resolved": self.resolved,
            "status": self.status,
            "rules": self.rules,
            "tests": {
                name: {k: len(v) for k, v in split.items()} for name, split in self.tests.items()
            },
            # The first ids that failed; every list's count is in `tests`.
            "failed": sorted({t for s in self.tests.values() for t in s.get("failure", ())})[
                :VERDICT_FAILED_IDS
            ],
        }


# (captured output, fail_to_pass, pass_to_pass) -> the verdict of record.
VerdictRules = Callable[[str, Sequence[str], Sequence[str]], Verdict]
# A plain run's captured output -> test id -> outcome.
OutputParser = Callable[[str], dict[str, str]]


@dataclass(frozen=True)
class Runtime:
    """The interpreter and installation a contract's tests run with, instead of the daemon's.

    Shown read-only in the sandbox where they are on the host; the workdir is
    at `/testbed`, where the environment's editable install expects the tree.
    """

    name: str  # names it in results ("django__django__5.0")
    python: str  # the interpreter, an absolute path
    paths: tuple[str, ...]  # what the interpreter needs to see (its prefix, its base prefix)
    env: Mapping[str, str] = field(default_factory=dict)  # PATH and the like, for the run
    version: str = ""  # the interpreter's "major.minor", when known
    # A container image to run the tests in instead (engine "docker" or "podman"): the
    # command runs as it is there, with the workdir mounted at /testbed.
    engine: str = ""
    image: str = ""

    @property
    def installed(self) -> bool:
        """Whether this is an environment of the contract's own (a prepared virtualenv
        shown read-only), whose installed pytest plugins load as they would there."""
        return bool(self.paths) and not self.image

    @property
    def version_tuple(self) -> tuple[int, int] | None:
        major, _, minor = self.version.partition(".")
        return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None

    def describe(self) -> dict[str, Any]:
        if self.image:
            return {"name": self.name, "engine": self.engine, "image": self.image}
        return {"name": self.name, "python": self.python}


@dataclass(frozen=True)
class GradingPolicy:
    """What grading needs to know about a contract beyond its test ids.

    The pipeline reads only this; it never asks where a contract came from.
    """

    # Observed ids -> outcomes keyed the way the expected ids are spelled; None: exact ids.
    match_ids: IdMatcher | None = None
    # Whether exit status 1 ("some test failed") is left to the ids: real test modules
    # hold tests that fail before and after a fix and are in neither list.
    failing_exit_judged_by_ids: bool = False
    # The aggregate memory bound of the contract's runs; None: the sandbox default.
    memory_bytes: int | None = None
    # Run the test command as it is, never through the daemon's pytest runner (a test
    # runner that is itself the code under test, or a runner other than pytest).
    plain: bool = False
    # A plain command's runner: "unittest" runs it through the daemon's unittest runner,
    # "sympy" through its SymPy runner (the integrity monitor and an authenticated report
    # beside the log); "" as it is.
    runner: str = ""
    # Directories of the tree that hold the test framework the command runs
    # (pytest-dev/pytest's own `src/_pytest/`): a patch that changes a file under them
    # makes that file the framework's for the integrity monitor, and the run `reduced`.
    framework: tuple[str, ...] = ()
    # Reads a plain run's output into outcomes; None: pytest's -rA summary.
    parse_output: OutputParser | None = None
    # The verdict of record, from the graded run's output; None: the strict grading is.
    # The strict grading is then recorded beside it, and only a forged run
    # (`tampered`) or a timeout overrides it.
    verdict: VerdictRules | None = None


@dataclass(frozen=True)
class Contract:
    task_id: str  # "suite/name"
    suite: str
    name: str
    kind: str  # "local" or "swebench"
    prompt: str
    digest: str  # content hash of everything that defines the task
    pristine: Path  # the buggy tree the workdir is seeded from
    test_cmd: tuple[str, ...]
    test_files: tuple[str, ...]  # globs relative to the tree
    timeout_s: int
    fail_to_pass: tuple[str, ...] | None  # None: derived from baseline and reference runs
    pass_to_pass: tuple[str, ...] | None
    reference_patch: bytes | None = None  # the known-good fix as a diff, when there is one
    test_patch: bytes | None = None  # applied after restoring protected paths (SWE-bench)
    source: str = ""
    license: str = ""
    # Test files kept from the solver: globs relative to the tree, always protected,
    # left out of the tree agents fetch and of the seeded workdir, copied in to grade.
    hidden: tuple[str, ...] = ()
    hidden_count: int = 0  # how many files of the pristine tree the globs match
    grading: GradingPolicy = field(default_factory=GradingPolicy)
    runtime: Runtime | None = None  # None: the daemon's own interpreter

    @property
    def has_expected_ids(self) -> bool:
        return self.fail_to_pass is not None

    def is_protected(self, rel: str) -> bool:
        """Whether a solver's change to `rel` is undone before grading."""
        name = rel.rsplit("/", 1)[-1]
        if name in TEST_CONFIG_NAMES or rel in ROOT_CONFIG_NAMES:
            return True
        return self.is_hidden(rel) or any(glob_match(rel, p) for p in self.test_files)

    def is_hidden(self, rel: str) -> bool:
        """Whether `rel` is a hidden test file: never shown, present only while grading."""
        return any(glob_match(rel, pattern) for pattern in self.hidden)

    def seed_ignore(self) -> Callable[[str, list[str]], set[str]]:
        """A `shutil.copytree` ignore for seeding: caches, bytecode and hidden files."""
        caches = shutil.ignore_patterns(*IGNORED_NAMES, "*.pyc")

        def ignore(directory: str, names: list[str]) -> set[str]:
            skipped = set(caches(directory, names))
            if self.hidden:
                where = Path(directory).relative_to(self.pristine).as_posix()
                prefix = "" if where == "." else where + "/"
                skipped.update(n for n in names if self.is_hidden(prefix + n))
            return skipped

        return ignore


@cache
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def glob_match(rel: str, pattern: str) -> bool:
    """Match a POSIX relative path against a glob where `**` spans directories.

    A pattern naming a directory ("tests" or "tests/") covers everything under it.
    """
    pattern = pattern.strip("/")
    if _glob_regex(pattern).match(rel):
        return True
    return rel.startswith(pattern + "/") and not any(c in pattern for c in "*?[")


def iter_tree(root: Path) -> Iterator[tuple[str, Path]]:
    """(relative POSIX path, path) of every regular file under root, sorted, caches skipped."""
    stack = [root]
    found: list[tuple[str, Path]] = []
    while stack:
        d = stack.pop()
        for entry in d.iterdir():
            if entry.name in IGNORED_NAMES or entry.suffix == ".pyc":
                continue
            if entry.is_symlink():
                found.append((entry.relative_to(root).as_posix(), entry))
            elif entry.is_dir():
                stack.append(entry)
            elif entry.is_file():
                found.append((entry.relative_to(root).as_posix(), entry))
    return iter(sorted(found))


def split_task_id(task_id: str) -> tuple[str, str]:
    suite, sep, name = task_id.partition("/")
    if not sep or not suite or not name or "/" in name:
        raise UsageError(
            f"task id {task_id!r} is not of the form SUITE/NAME",
            hint="list task ids with `jb-client tasks`",
        )
    return suite, name


def as_tuple(values: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if values is None else tuple(values)
