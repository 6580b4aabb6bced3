"""Load the official `swebench` package's specifications, log parsers and grading.

The package (pinned: ORACLE_VERSION) is unpacked, without its dependencies, into
ORACLE_DIR by `make swebench-fixtures`. Importing `swebench` itself pulls in
datasets, docker, modal and more; this loader imports only the modules that
hold the specification tables, the log parsers, the test directives and the
grading functions, with stand-ins for the few imports they make that are not
used on those paths (the dataset loader, `requests`, the Docker test spec).

Used by `tools/swebench_specs.py` (to generate jouled's table of specifications)
and by the tests (as the oracle jouled's own parsing and grading must agree with).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ORACLE_VERSION = "4.1.0"
ORACLE_DIR = Path(__file__).resolve().parent.parent / ".cache" / "swebench" / "oracle"


@dataclass
class _TestSpec:
    """The fields of the official TestSpec that its grading reads."""

    instance_id: str
    repo: str
    version: str
    FAIL_TO_PASS: list[str] = field(default_factory=list)
    PASS_TO_PASS: list[str] = field(default_factory=list)


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def _package(name: str, path: Path) -> None:
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module


def _function(path: Path, name: str) -> Any:
    """One top-level function of a module, taken from its source without importing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"re": re}
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)
    return namespace[name]


def available(root: Path = ORACLE_DIR) -> bool:
    return (root / "swebench" / "harness" / "grading.py").is_file()


def load(root: Path = ORACLE_DIR) -> types.SimpleNamespace:
    """The oracle's modules: constants, python_constants, log_parsers, grading, test_spec."""
    if not available(root):
        raise FileNotFoundError(
            f"the official swebench {ORACLE_VERSION} package is not unpacked in {root}: "
            "run `make swebench-fixtures`"
        )
    pkg = root / "swebench"
    if "swebench.harness.grading" not in sys.modules:
        _package("swebench", pkg)
        _package("swebench.harness", pkg / "harness")
        _package("swebench.harness.test_spec", pkg / "harness" / "test_spec")
        _stub("swebench.harness.test_spec.test_spec", TestSpec=_TestSpec)
        _stub(
            "swebench.harness.utils",
            get_modified_files=lambda patch: [],
            load_cached_environment_yml=lambda instance_id: "",
            ansi_escape=_function(pkg / "harness" / "utils.py", "ansi_escape"),
        )
        sys.modules.setdefault("requests", _stub("requests"))
    python_spec = pkg / "harness" / "test_spec" / "python.py"
    name = "swebench.harness.test_spec.python"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, python_spec)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return types.SimpleNamespace(
        constants=importlib.import_module("swebench.harness.constants"),
        python_constants=importlib.import_module("swebench.harness.constants.python"),
        log_parsers=importlib.import_module("swebench.harness.log_parsers"),
        grading=importlib.import_module("swebench.harness.grading"),
        test_spec=sys.modules[name],
        TestSpec=_TestSpec,
    )
