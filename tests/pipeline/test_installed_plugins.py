"""The test environment's pytest plugins load in a graded run; a plugin the patch adds never.

pytest loads every `pytest11` entry point it finds (autoloading), and projects
rely on it: astropy's configuration passes `--doctest-rst`, an option of a plugin
its environment installs. The daemon's runner switches autoloading off, so a
dist-info the patch writes into the tree is never a plugin; for a task with an
environment of its own it loads that environment's entry points itself, from
distributions in directories the run cannot write.

The environment here is a real virtualenv of a real interpreter, with pytest and
its dependencies unpacked from the wheels `make swebench-fixtures` fetched, the
way pip lays out a pure-Python wheel; the plugins are written beside them.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jouled.pipeline import pytest_run
from jouled.pipeline.pytest_run import Channel
from jouled.pipeline.sandbox import RunResult, Sandbox
from jouled.pipeline.testreport import FAILED, PASSED
from tests.pipeline.test_pytest_run import run_tree, write_tree
from tests.swebench_real import DIST, FETCH_HINT

WHEELS = ("pytest-8.3.4", "pluggy-1.5.0", "iniconfig-2.0.0", "packaging-24.2")

# A plugin as a project's environment installs one: an option the configuration
# passes and a fixture the tests use.
HELPER = """
def pytest_addoption(parser):
    parser.addoption("--env-flag", action="store_true")


import pytest


@pytest.fixture
def env_value(request):
    assert request.config.getoption("--env-flag")
    return 42
"""
HELPER_TESTS = {
    "pytest.ini": "[pytest]\naddopts = --env-flag\n",
    "tests/test_env.py": "def test_uses_the_plugin(env_value):\n    assert env_value == 42\n",
}

# A forging plugin: at load it leaves a marker in the working directory (proof it ran),
# then reports every test call as passed.
FORGER = """
import os

import pytest

open(os.path.join(os.getcwd(), "FORGER-LOADED"), "w").close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
FAILING_TESTS = {
    "pytest.ini": "[pytest]\n",
    "tests/test_bug.py": "def test_bug():\n    assert 1 + 1 == 3\n",
}
BUG = "tests/test_bug.py::test_bug"


def dist_info(where: Path, name: str, module: str, source: str) -> None:
    """A distribution `name` with one pytest11 entry point, to module `module`."""
    info = where / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\n{name} = {module}\n")
    (where / f"{module}.py").write_text(source)


def site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python3*/site-packages"))


@pytest.fixture(scope="module")
def base_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheels = [next(iter(DIST.glob(f"{stem}-*.whl")), None) for stem in WHEELS]
    if None in wheels:
        pytest.skip(f"the pytest wheels are not in {DIST}: {FETCH_HINT}")
    env = tmp_path_factory.mktemp("plugins") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    for wheel in wheels:
        assert wheel is not None
        zipfile.ZipFile(wheel).extractall(site_packages(env))
    return env


@pytest.fixture
def env(base_env: Path, tmp_path: Path) -> Iterator[Path]:
    """A copy of the base environment this test may add distributions to."""
    copy = tmp_path / "env"
    subprocess.run(["cp", "-a", str(base_env), str(copy)], check=True)
    yield copy


def run_in(
    env: Path,
    tmp_path: Path,
    files: dict[str, str],
    added: dict[str, str] | None = None,
    installed_plugins: bool = True,
) -> tuple[Path, pytest_run.Plan, RunResult, Channel]:
    pristine = write_tree(tmp_path / "pristine", files)
    tree = write_tree(tmp_path / "tree", {**files, **(added or {})})
    cmd = ["python", "-m", "pytest", "tests"]
    plan, result, channel = run_tree(
        tree,
        tmp_path / "ro",
        cmd,
        None,
        pristine,
        environment=env,
        installed_plugins=installed_plugins,
    )
    return tree, plan, result, channel


def test_the_environment_s_plugin_loads(env: Path, tmp_path: Path) -> None:
    dist_info(site_packages(env), "envhelper", "envhelper_plugin", HELPER)
    _, plan, result, channel = run_in(env, tmp_path, HELPER_TESTS)
    outcomes = pytest_run.without_canaries(channel.outcomes, plan.canaries)
    assert outcomes == {"tests/test_env.py::test_uses_the_plugin": PASSED}, result.output
    assert not channel.forged


def test_without_an_environment_of_its_own_no_plugin_loads(env: Path, tmp_path: Path) -> None:
    dist_info(site_packages(env), "envhelper", "envhelper_plugin", HELPER)
    _, _, result, channel = run_in(env, tmp_path, HELPER_TESTS, installed_plugins=False)
    assert "--env-flag" in result.output and not channel.outcomes


def test_a_plugin_in_the_environment_runs_which_is_what_the_patch_would_want(
    env: Path, tmp_path: Path
) -> None:
    """The forging plugin works where it is the environment's: it is loaded, and its
    reports are caught by the canaries (what follows shows the patch cannot get it loaded)."""
    dist_info(site_packages(env), "forger", "forger_plugin", FORGER)
    tree, plan, result, channel = run_in(env, tmp_path, FAILING_TESTS)
    assert (tree / "FORGER-LOADED").exists(), result.output
    assert pytest_run.forgery(channel, plan.canaries, result.exit_code, [BUG])


# The tree's own test of what autoloading would find: the patch's entry point is
# visible to importlib.metadata from inside the run.
VISIBLE = """
from importlib.metadata import entry_points


def test_bug():
    assert 1 + 1 == 3


def test_the_patch_s_entry_point_is_visible():
    assert "forger" in {point.name for point in entry_points(group="pytest11")}
"""
VISIBLE_ID = "tests/test_bug.py::test_the_patch_s_entry_point_is_visible"


@pytest.mark.parametrize("place", ["", "src"])
def test_a_plugin_the_patch_adds_to_an_editable_tree_does_not_load(
    env: Path, tmp_path: Path, place: str
) -> None:
    """As `pip install -e .` leaves it, the tree is on sys.path from a .pth file of the
    environment's; a dist-info the patch adds there is what autoloading would find."""
    workdir = Sandbox().layout(tmp_path / "tree", tmp_path / "ro").workdir
    (site_packages(env) / "__editable__.tree.pth").write_text(
        (f"{workdir}/{place}" if place else workdir) + "\n"
    )
    prefix = f"{place}/" if place else ""
    added = {
        f"{prefix}forger-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: forger\n"
        "Version: 1.0\n",
        f"{prefix}forger-1.0.dist-info/entry_points.txt": "[pytest11]\nforger = forger_plugin\n",
        f"{prefix}forger_plugin.py": FORGER,
    }
    files = {**FAILING_TESTS, "tests/test_bug.py": VISIBLE}
    tree, plan, result, channel = run_in(env, tmp_path, files, added)
    outcomes = pytest_run.without_canaries(channel.outcomes, plan.canaries)
    assert outcomes == {BUG: FAILED, VISIBLE_ID: PASSED}, result.output
    assert not (tree / "FORGER-LOADED").exists()
    assert not pytest_run.forgery(channel, plan.canaries, result.exit_code, [BUG])
