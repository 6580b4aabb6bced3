"""tox's environment made the prepared one's, for `tox --current-env` specifications."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jouled.swebench_tox import link, tox_env


@pytest.mark.parametrize(
    ("command", "env"),
    [
        ("tox --current-env -epy39 -v --", "py39"),
        ("tox --current-env -e py310 -v -- tests/x.py", "py310"),
        ("tox --current-env --env py39,lint -v --", "py39"),
        ("tox -epy39 -v --", None),  # tox builds its own environment: nothing to link
        ("pytest -rA", None),
        ("tox --current-env -v -- -epy39", None),  # after `--` it is the tests' argument
    ],
)
def test_the_tox_environment_is_read_from_the_command(command: str, env: str | None) -> None:
    assert tox_env(command) == env


def test_the_symlinked_interpreter_tox_makes_sees_the_environments_packages(
    tmp_path: Path,
) -> None:
    """What tox-current-env does (`.tox/py/bin/python` a symlink to the environment's
    python) starts the base interpreter without the environment's packages, unless the
    checkout's `.tox/py` is linked first."""
    venv, checkout = tmp_path / "venv", tmp_path / "checkout"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "jb_only_here").mkdir()
    (site / "jb_only_here" / "__init__.py").write_text("")
    (site / "jb_editable.pth").write_text(str(tmp_path / "src") + "\n")  # a nested .pth
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "jb_from_src.py").write_text("")
    bin_dir = checkout / ".tox" / "py" / "bin"
    bin_dir.mkdir(parents=True)
    os.symlink(venv / "bin" / "python", bin_dir / "python")
    probe = ["-c", "import sys, jb_only_here, jb_from_src; print(sys.prefix)"]
    before = subprocess.run(
        [str(bin_dir / "python"), *probe], capture_output=True, text=True, check=False
    )
    assert before.returncode != 0 and "No module named 'jb_only_here'" in before.stderr
    written = link(checkout, venv, "py")
    assert all(p.is_file() and checkout in p.parents for p in written) and len(written) == 2
    after = subprocess.run(
        [str(bin_dir / "python"), *probe], capture_output=True, text=True, check=False
    )
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == str(checkout / ".tox" / "py")


def test_an_environment_that_is_not_a_virtualenv_is_left_alone(tmp_path: Path) -> None:
    assert link(tmp_path / "checkout", tmp_path / "adopted", "py39") == []
    assert not (tmp_path / "checkout").exists()
