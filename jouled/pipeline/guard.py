"""What a submitted patch may not add: files the interpreter or pytest would load first.

CPython imports a module by name from the first sys.path entry that has it;
`python -m pytest` puts the working directory on sys.path, and pytest's default
import mode puts every test directory without an `__init__.py` there too. A
module there named like the standard library or the test runner (`unittest.py`,
`pytest.py`, `sitecustomize.py`) would run in place of the real one. (A
`conftest.py` the patch adds is not refused: it is deleted with the other
protected paths before the tests run.) Bytecode
(`.pyc`, `__pycache__`) would run without its source ever being read, and
native extensions and `.pth` files are not source at all. Such a patch is
rejected with a clear error before anything runs.

Everything else the start-up could read from the tree is switched off where
the test command is built (`pytest_run`): configuration files, plugins,
user site-packages, bytecode caches.
"""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath

from jouled.errors import PatchError
from jouled.patch import Patch

# Top-level names the test run imports before, or instead of, the tree's own code.
RUNNER_MODULES = frozenset(
    {
        "pytest",
        "_pytest",
        "py",
        "pluggy",
        "iniconfig",
        "packaging",
        "jouled_pytest",
        "sitecustomize",
        "usercustomize",
    }
)
SHADOWED = frozenset(sys.stdlib_module_names) | RUNNER_MODULES
_NOT_SOURCE = (".pyc", ".pyo", ".so", ".pyd", ".pth", ".dylib", ".dll")


def _top_name(path: PurePosixPath) -> str | None:
    """The module name a file or package directory entry defines, if it is one."""
    name = path.name
    if name.endswith(".py"):
        return name[:-3]
    return None


def check_patch(patch: Patch, tree: Path) -> None:
    """Raise PatchError when `patch` (already applied to `tree`) adds a start-up hazard.

    Files it adds or renames are judged; edits to files the tree already holds are not.
    """
    for file in patch.files:
        # Only what the patch brings in: a file the task's own tree already has
        # is the task's, whatever its name.
        if file.new_path is None or not (file.is_new or file.is_rename):
            continue
        path = PurePosixPath(file.new_path)
        if "__pycache__" in path.parts or path.suffix in _NOT_SOURCE or ".pth" in path.suffixes:
            raise PatchError(
                f"adds {path.suffix or '__pycache__'} content, which would run without source",
                path=file.new_path,
                hint="submit source changes only; bytecode, native modules and .pth files "
                "are never accepted",
            )
        _check_shadowing(file.new_path, tree)


def _check_shadowing(rel: str, tree: Path) -> None:
    """A module whose directory may be on sys.path must not shadow a start-up module.

    Such directories are the tree root and any directory without an
    `__init__.py` (pytest's rootdir-relative import puts them on sys.path).
    A package directory counts by its first component in such a directory.
    """
    parts = PurePosixPath(rel).parts
    for depth in range(len(parts)):
        directory = tree.joinpath(*parts[:depth])
        if depth > 0 and (directory / "__init__.py").exists():
            continue  # inside a regular package: a submodule, not a top-level name
        entry = parts[depth]
        name = _top_name(PurePosixPath(entry)) if depth == len(parts) - 1 else entry
        if name is not None and name in SHADOWED:
            raise PatchError(
                f"adds a module named {name!r} where it would shadow the standard library "
                "or the test runner",
                path=rel,
                hint="rename the module; names of the standard library, pytest and its "
                "plugins, sitecustomize and usercustomize are reserved",
            )
