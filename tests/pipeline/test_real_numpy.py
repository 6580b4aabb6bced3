"""A real NumPy under a graded run: ctypes withheld from it, its tests still pass.

NumPy loads ctypes at import, and once anything has, every line of the process may
use it. Graded runs withhold it: NumPy's import goes on without it (it was written to),
its arrays and linear algebra work, the run is graded at `monitor`, and code the patch
wrote, importing NumPy, finds no ctypes to write memory with. Built offline from the
NumPy wheel `make swebench-fixtures` fetched into an environment of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jouled.pipeline.testreport import PASSED
from tests.pipeline.test_pytest_run import run_tree, write_tree
from tests.swebench_real import DIST, FETCH_HINT

pytestmark = pytest.mark.slow

LIBRARY = """
import sys

import numpy as np

print("JBDOOR ctypes", "absent" if sys.modules.get("ctypes") is None else "present", flush=True)


def total(values):
    return int(np.asarray(values).sum())
"""
TESTS = """
import numpy as np

from mylib import total


def test_total():
    assert total([1, 2, 3]) == 6


def test_linear_algebra():
    a = np.array([[2.0, 0.0], [0.0, 4.0]])
    assert np.allclose(np.linalg.inv(a) @ a, np.eye(2))
"""
FILES = {"pytest.ini": "[pytest]\n", "mylib/__init__.py": "", "tests/test_np.py": TESTS}


@pytest.fixture(scope="module")
def numpy_env() -> Iterator[Path]:
    wheels = sorted(DIST.glob("numpy-*.whl"))
    if not wheels:
        pytest.skip(f"no NumPy wheel in {DIST} for this interpreter: {FETCH_HINT}")
    with tempfile.TemporaryDirectory(prefix="numpy-env-") as tmp:
        env = Path(tmp) / "env"
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        offline = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(DIST)}
        subprocess.run(
            [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet",
             "--disable-pip-version-check", str(wheels[-1]), "pytest==8.3.4"],
            check=True,
            env=offline,
        )  # fmt: skip
        yield env


def test_numpy_runs_graded_without_ctypes(numpy_env: Path, tmp_path: Path) -> None:
    pristine = write_tree(tmp_path / "pristine", FILES)
    tree = write_tree(tmp_path / "tree", {**FILES, "mylib/__init__.py": LIBRARY})
    cmd = ["python", "-m", "pytest", "-s", "tests"]
    expected = ["tests/test_np.py::test_total"]
    _, result, channel = run_tree(
        tree, tmp_path / "ro", cmd, expected, pristine, environment=numpy_env
    )
    assert "JBDOOR ctypes absent" in result.output, result.output  # the patch's code ran
    assert channel.outcomes.get("tests/test_np.py::test_total") == PASSED, result.output
    assert channel.outcomes.get("tests/test_np.py::test_linear_algebra") == PASSED, result.output
    assert not channel.forged, channel.forged
    assert any(w.startswith("_ctypes (asked for by ") and "numpy" in w for w in channel.withheld)
    if result.isolation.get("memory") == "sealed":
        assert channel.integrity == "monitor", channel
