"""Local task directories: tasks/<suite>/<name>/{task.toml, before/, reference/}."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from jouled.contracts.contract import IGNORED_NAMES, Contract, as_tuple, glob_match, iter_tree
from jouled.errors import TaskError

REQUIRED_KEYS = ("name", "prompt", "test_cmd")


def tree_digest(paths: list[tuple[str, Path]]) -> str:
    """SHA-256 over (path, mode-independent bytes) pairs, framed so no two trees collide."""
    h = hashlib.sha256()
    for rel, path in paths:
        data = path.read_bytes() if not path.is_symlink() else b"->" + str(path.readlink()).encode()
        h.update(b"%d:%s%d:" % (len(rel.encode()), rel.encode(), len(data)))
        h.update(data)
    return h.hexdigest()


def task_digest(task_dir: Path) -> str:
    entries = [("task.toml", task_dir / "task.toml")]
    for sub in ("before", "reference"):
        if (task_dir / sub).is_dir():
            entries += [(f"{sub}/{rel}", p) for rel, p in iter_tree(task_dir / sub)]
    return tree_digest(entries)


def _str_list(meta: dict[str, Any], key: str, where: Path) -> tuple[str, ...] | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskError(f"{where}: {key} must be a list of strings")
    return tuple(value)


def load_task(task_dir: Path, suite: str | None = None) -> Contract:
    toml_path = task_dir / "task.toml"
    try:
        meta = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise TaskError(f"{task_dir}: no task.toml") from err
    except tomllib.TOMLDecodeError as err:
        raise TaskError(f"{toml_path}: not valid TOML: {err}") from err
    missing = [k for k in REQUIRED_KEYS if k not in meta]
    if missing:
        raise TaskError(f"{toml_path}: missing {', '.join(missing)}")
    if meta["name"] != task_dir.name:
        raise TaskError(
            f"{toml_path}: name {meta['name']!r} differs from its directory {task_dir.name!r}"
        )
    before = task_dir / "before"
    if not before.is_dir():
        raise TaskError(f"{task_dir}: no before/ tree (the pristine buggy sources and tests)")
    test_cmd = _str_list(meta, "test_cmd", toml_path)
    if not test_cmd:
        raise TaskError(f"{toml_path}: test_cmd must be a non-empty argv list")
    timeout = meta.get("timeout_s", 120)
    if not isinstance(timeout, int) or timeout <= 0:
        raise TaskError(f"{toml_path}: timeout_s must be a positive integer")
    f2p = _str_list(meta, "fail_to_pass", toml_path)
    p2p = _str_list(meta, "pass_to_pass", toml_path)
    if (f2p is None) != (p2p is None):
        raise TaskError(f"{toml_path}: give both fail_to_pass and pass_to_pass, or neither")
    suite = suite or task_dir.parent.name
    reference = task_dir / "reference"
    hidden = _str_list(meta, "hidden_files", toml_path) or ()
    return Contract(
        task_id=f"{suite}/{task_dir.name}",
        suite=suite,
        name=task_dir.name,
        kind="local",
        prompt=str(meta["prompt"]).strip(),
        digest=task_digest(task_dir),
        pristine=before,
        test_cmd=test_cmd,
        test_files=_str_list(meta, "test_files", toml_path) or (),
        timeout_s=timeout,
        fail_to_pass=as_tuple(f2p),
        pass_to_pass=as_tuple(p2p),
        reference_patch=reference_patch(before, reference) if reference.is_dir() else None,
        source=str(meta.get("source", "")),
        license=str(meta.get("license", "")),
        hidden=hidden,
        hidden_count=_count_hidden(before, hidden, toml_path),
    )


def _count_hidden(before: Path, hidden: tuple[str, ...], where: Path) -> int:
    """How many files of before/ the hidden globs match; each glob must match one at least."""
    if not hidden:
        return 0
    files = [rel for rel, _ in iter_tree(before)]
    for pattern in hidden:
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise TaskError(f"{where}: hidden_files pattern {pattern!r} is not inside the tree")
        if not any(glob_match(rel, pattern) for rel in files):
            raise TaskError(
                f"{where}: hidden_files pattern {pattern!r} matches no file of before/",
                hint="hidden test files live in before/ like the others; check the glob",
            )
    return sum(any(glob_match(rel, p) for p in hidden) for rel in files)


def reference_patch(before: Path, reference: Path) -> bytes | None:
    """The reference fix as a diff, so the reference solver takes the same path as any patch."""
    from jouled.patch_diff import diff_trees

    with tempfile.TemporaryDirectory(prefix="jouled-ref-") as tmp:
        fixed = Path(tmp) / "fixed"
        pristine = Path(tmp) / "before"
        shutil.copytree(before, pristine, ignore=shutil.ignore_patterns(*IGNORED_NAMES, "*.pyc"))
        shutil.copytree(pristine, fixed)
        for rel, path in iter_tree(reference):
            target = fixed / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        # A reference identical to before/ fixes nothing: treat it as absent.
        return diff_trees(pristine, fixed) or None


def discover(root: Path) -> list[Contract]:
    """Every task under root, which is a tasks/ dir, one suite dir, or one task dir."""
    if (root / "task.toml").is_file():
        return [load_task(root)]
    if not root.is_dir():
        raise TaskError(f"task directory {root} does not exist")
    suites = (
        [root]
        if any((d / "task.toml").is_file() for d in root.iterdir())
        else sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    )
    found = []
    for suite_dir in suites:
        for task_dir in sorted(suite_dir.iterdir()):
            if (task_dir / "task.toml").is_file():
                found.append(load_task(task_dir, suite_dir.name))
    return found
