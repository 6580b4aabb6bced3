"""The tree a check runs on: a fresh copy of the pristine tree, the patch applied, the
protected paths put back, the task's test patch added, and what of it the run is shown
read-only (the tests, and a compiled checkout's native files)."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from jouled.contracts.contract import Contract, iter_tree
from jouled.patch import Patch, parse_patch
from jouled.patch_apply import apply_patch

# Reference fixes and SWE-bench test patches come with the task, not from a
# solver, so they get a far larger bound than submissions.
TRUSTED_PATCH_BYTES = 64 << 20


def parse_trusted(raw: bytes) -> Patch:
    return parse_patch(raw, max_bytes=TRUSTED_PATCH_BYTES)


def seed(contract: Contract, dest: Path) -> Path:
    """A fresh copy of the pristine tree; symlinks are copied as links, never followed.

    Hidden test files are left out: `restore_protected` copies them in to grade.
    """
    shutil.copytree(contract.pristine, dest, symlinks=True, ignore=contract.seed_ignore())
    return dest


def restore_protected(contract: Contract, tree: Path) -> list[str]:
    """Undo every change to protected paths; returns the paths restored or deleted."""
    pristine = dict(iter_tree(contract.pristine))
    touched: list[str] = []
    for rel, path in iter_tree(tree):
        if not contract.is_protected(rel):
            continue
        original = pristine.get(rel)
        if original is None:
            path.unlink()
            touched.append(rel)
        elif path.is_symlink() or path.read_bytes() != original.read_bytes():
            path.unlink()
            shutil.copy2(original, path)
            touched.append(rel)
    for rel, original in pristine.items():
        target = tree / rel
        if contract.is_protected(rel) and not target.exists() and not target.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(original, target)
            if not contract.is_hidden(rel):  # hidden tests were never there to be undone
                touched.append(rel)
    return sorted(set(touched))


def prepare_tree(contract: Contract, tree: Path, patch: Patch | None) -> list[str]:
    """Apply a candidate patch, undo its changes to protected paths, add the test patch.

    Every run of the check goes through here (baseline, reference, attempt), so
    the tests that grade are identical whatever the patch did to them. Returns
    the protected paths that were restored or deleted.
    """
    if patch is not None:
        apply_patch(patch, tree)
    restored = restore_protected(contract, tree)
    if contract.test_patch:
        apply_patch(parse_trusted(contract.test_patch), tree)
    return restored


MAX_READ_ONLY_FILES = 512


def read_only_tests(contract: Contract, tree: Path, protected: Sequence[str]) -> dict[str, Path]:
    """The protected paths shown read-only over themselves while the tests run.

    Code under test then cannot rewrite a test module before pytest imports
    it. A pattern naming a whole directory (`tests/**`) is one mount; other
    protected files are mounted one by one, up to MAX_READ_ONLY_FILES.
    """
    overlays: dict[str, Path] = {}
    for pattern in contract.test_files:
        base = pattern.strip("/").removesuffix("/**").strip("/")
        directory = tree / base
        plain = base and not any(c in "*?[" for c in base)
        if plain and directory.is_dir() and not directory.is_symlink():
            overlays[base] = directory
    covered = tuple(f"{d}/" for d in overlays)
    rest = [rel for rel in protected if not rel.startswith(covered)]
    for rel in rest[:MAX_READ_ONLY_FILES]:
        path = tree / rel
        if path.is_file() and not path.is_symlink():
            overlays[rel] = path
    return overlays


NATIVE_SUFFIXES = (".so", ".pyd")


def read_only_native(tree: Path, pristine: Path) -> dict[str, Path]:
    """The tree's native extension modules (a compiled checkout's), shown read-only over
    themselves: the monitor loads native code only from files no process of the run
    could have written. They are the pristine tree's (a patch never carries one:
    jouled.pipeline.guard), listed once per pristine tree."""
    overlays: dict[str, Path] = {}
    for rel in _native_files(str(pristine.resolve()), pristine.stat().st_mtime_ns):
        path = tree / rel
        if path.is_file() and not path.is_symlink():
            overlays[rel] = path
    return overlays


@functools.lru_cache(maxsize=64)
def _native_files(pristine: str, mtime_ns: int) -> tuple[str, ...]:
    found: list[str] = []
    for top, dirs, files in os.walk(pristine):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        for name in files:
            if name.endswith(NATIVE_SUFFIXES) or ".so." in name:
                found.append(os.path.relpath(os.path.join(top, name), pristine))
                if len(found) >= MAX_READ_ONLY_FILES:
                    return tuple(found)
    return tuple(found)


def secret_tests(
    contract: Contract, protected: Sequence[str], expected: Sequence[str] = ()
) -> list[str]:
    """The protected test modules an agent is never shown: hidden test files and those the
    task's test patch writes (`test*.py`, `*_test.py`, `tests.py`; where every expected id
    names its file, as pytest's do, only the files of expected tests). A graded run keeps
    them sealed: no process of the run reads them from disk (`runners.seal_tests`)."""
    named = {t.split("::", 1)[0] for t in expected if "::" in t}
    if any("::" not in t for t in expected):
        named = set()
    patched: set[str] = set()
    if contract.test_patch:
        patched = {f.new_path for f in parse_trusted(contract.test_patch).files if f.new_path}
    found = []
    for rel in protected:
        name = rel.rpartition("/")[2]
        module = name.endswith(".py") and (
            name.startswith("test") or name.endswith("_test.py") or name == "tests.py"
        )
        if module and (rel in patched or contract.is_hidden(rel)) and (not named or rel in named):
            found.append(rel)
    return found
