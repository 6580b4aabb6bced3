"""Reading one parsed Python file for the patch audit: names, strings and constants.

What a dotted name refers to once the file's imports are resolved, which rule
(`jouled.pipeline.audit_rules`) a name or a string constant falls under, and
the constants that are prose (docstrings) or probes (`"pytest" in sys.modules`).
"""

from __future__ import annotations

import ast

from jouled.pipeline.audit_rules import (
    JUNIT_RE,
    NAME_RULES,
    PROBES,
    PROC_RE,
    PYTEST_ENV,
    RUNNER_NAMES,
    RUNNER_RE,
    STARTUP_FILES,
    SUMMARY_RE,
    TEST_ENV,
)


def dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None when the chain does not start at a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


class Names:
    """Local names bound by imports, mapped to what they import."""

    def __init__(self, tree: ast.AST, *, assume_modules: bool) -> None:
        self.aliases: dict[str, str] = {}
        # Without the whole file (added lines only) `sys.x` is taken to be the module sys.
        self.assume_modules = assume_modules
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def resolve(self, parts: list[str], *, bare: bool) -> str | None:
        """The dotted name a chain refers to, or None when its first name is no import."""
        head = self.aliases.get(parts[0])
        if head is None:
            if parts[0] == "__builtins__":
                head = "__builtins__"
            elif self.assume_modules and not bare:
                head = parts[0]
            else:
                return None
        return ".".join([head, *parts[1:]])


def rule_match(name: str) -> tuple[str, str] | None:
    """(code, detail) of the first rule `name` falls under."""
    for code, patterns in NAME_RULES:
        for pattern in patterns:
            if pattern.endswith("*"):
                if name.startswith(pattern[:-1]):
                    return code, ".".join(name.split(".")[: pattern.count(".") + 1])
            elif name == pattern or name.startswith(pattern + "."):
                return code, ".".join(name.split(".")[: pattern.count(".") + 2])
    return None


def string_flag(value: str, probed: bool) -> tuple[str, str] | None:
    if RUNNER_RE.search(value):
        return "runner", clip(value)
    if PROC_RE.match(value):
        return "procfs", value[:40]
    if JUNIT_RE.search(value):
        return "report-file", clip(value)
    if SUMMARY_RE.search(value):
        return "report-forgery", clip(value)
    # Code that writes these files at run time plants what a patch may not add.
    name = value.rsplit("/", 1)[-1]
    if name == "conftest.py":
        return "conftest", clip(value)
    if name in STARTUP_FILES or (name.endswith(".pth") and len(name) > 4):
        return "startup-hook", clip(value)
    if "pytest11" in value:
        return "entry-points", "pytest11"
    if value in PYTEST_ENV:
        return "pytest-env", value
    if value in TEST_ENV or (probed and value in RUNNER_NAMES):
        return "test-detection", repr(value)
    return None


def probed_ids(tree: ast.AST) -> set[int]:
    """ids of the constants code compares or searches with: `"pytest" in sys.modules`."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found.update(id(n) for n in (node.left, *node.comparators))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in PROBES
        ):
            found.update(id(n) for n in node.args)
    return found


def clip(text: str, width: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def docstring_ids(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are docstrings: prose, not code."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def always_returns(func: ast.FunctionDef | ast.AsyncFunctionDef) -> object:
    """The constant a function always returns, when its body is only `return CONSTANT`."""
    body = func.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    if (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and isinstance(body[0].value, ast.Constant)
    ):
        return body[0].value.value
    return None
