"""The monitor's files and each runner run into one namespace (`runners.boot`): a name one
file binds at its top level and a later one binds again replaces the first file's, and
every function of the first that uses it then runs on the other's (a constant of the
same name, a helper with other arguments). Each top-level name is bound by one file."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from jouled.pipeline import pytest_run, sympy_run, unittest_run
from jouled.pipeline.runners import MONITOR


def _bound(path: Path) -> set[str]:
    """The names `path` binds at its top level, but for modules and names it imports
    (imports under `TYPE_CHECKING` bind none at run time): an import binds the same
    object whichever file makes it."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@pytest.mark.parametrize("runner", [pytest_run.RUNNER, unittest_run.RUNNER, sympy_run.RUNNER])
def test_no_two_files_of_a_run_bind_the_same_name(runner: Path) -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in (*MONITOR, runner):
        for name in _bound(path):
            where[name].append(path.name)
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert twice == {}, twice
