"""The descriptions unittest prints for tests with a docstring, read from their sources.

Run verbosely, unittest (and Django's runner) names a test that has a
docstring by the docstring's first line: `test_x (pkg.mod.Class)` on one line,
then `First line of the docstring ... ok`. A log parser keys that outcome by
the description, which names no test by itself; this module maps each
description back to the tests the runner's channel names, reading the test
modules' sources (protected files, restored to their pristine bytes before the
run) with `ast`, never importing them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from pathlib import Path

MAX_SOURCE_BYTES = 4 * 1024 * 1024  # a test module larger than this is not read


def _module_file(tree: Path, bases: Sequence[str], dotted: str) -> Path | None:
    rel = Path(*dotted.split("."))
    for base in bases:
        for candidate in (tree / base / rel.with_suffix(".py"), tree / base / rel / "__init__.py"):
            if candidate.is_file() and not candidate.is_symlink():
                return candidate
    return None


def _parse(path: Path, cache: dict[Path, ast.Module | None]) -> ast.Module | None:
    if path not in cache:
        try:
            if path.stat().st_size > MAX_SOURCE_BYTES:
                raise ValueError("too large")
            cache[path] = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            cache[path] = None
    return cache[path]


def _classes(body: Iterable[ast.stmt]) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in body if isinstance(node, ast.ClassDef)}


def _method_doc(module: ast.Module, class_path: Sequence[str], method: str) -> str | None:
    """The first line of the method's docstring, as unittest's shortDescription reads it,
    looked up in the class and then in its bases defined in the same module."""
    scope: dict[str, ast.ClassDef] = _classes(module.body)
    top = scope
    node: ast.ClassDef | None = None
    for name in class_path:
        node = scope.get(name)
        if node is None:
            return None
        scope = _classes(node.body)
    todo, seen = [node], set()
    while todo:
        cls = todo.pop(0)
        if cls is None or cls.name in seen:
            continue
        seen.add(cls.name)
        for item in cls.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == method:
                doc = ast.get_docstring(item, clean=False)
                return doc.strip().split("\n")[0].strip() if doc else None
        todo += [top.get(base.id) for base in cls.bases if isinstance(base, ast.Name)]
    return None


def descriptions(tree: Path, bases: Sequence[str], test_ids: Iterable[str]) -> dict[str, set[str]]:
    """Docstring first line -> the unittest ids ("pkg.mod.Class.test_x") it describes.

    `bases` are the tree's directories test labels are resolved from (the
    script's directory for Django's `runtests.py`, then the tree's root).
    """
    cache: dict[Path, ast.Module | None] = {}
    found: dict[str, set[str]] = {}
    for test_id in test_ids:
        parts = test_id.split(".")
        for k in range(len(parts) - 2, 0, -1):  # the longest module path that is a file
            path = _module_file(tree, bases, ".".join(parts[:k]))
            if path is None:
                continue
            module = _parse(path, cache)
            doc = _method_doc(module, parts[k:-1], parts[-1]) if module is not None else None
            if doc:
                found.setdefault(doc, set()).add(test_id)
            break
    return found
