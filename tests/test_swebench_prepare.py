"""`jouled swebench prepare` and `adopt`, where they refuse and what they write.

Building real environments is exercised by tests/test_swebench_official.py; these
check the cases that need neither the network nor the fetched releases.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jouled import swebench_preinstall, swebench_pythons
from jouled.contracts import swebench_env
from jouled.contracts import swebench_harness as harness
from jouled.contracts.swebench import to_contract
from jouled.contracts.swebench_records import SweBenchRecord
from jouled.errors import ConfigError, SandboxError, TaskError
from jouled.pipeline.bwrap import bwrap
from jouled.swebench_prepare import (
    REFUSED_EXIT,
    _at_testbed,
    adopt,
    build_tool_pins,
    guarded,
    pip_pin,
    prepare,
)
from jouled.swebench_prepare import report as prepare_report
from tests.test_swebench import GIT, INSTANCE, git, make_instance


def hide_interpreters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A host with no interpreter anywhere prepare looks: PATH, pyenv, uv, conda."""
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("PYENV_ROOT", "UV_PYTHON_INSTALL_DIR", "CONDA_PREFIX", "CONDA_EXE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def record(tmp_path: Path) -> tuple[SweBenchRecord, Path]:
    if GIT is None:
        pytest.skip("git is not installed")
    root = tmp_path / "checkouts"
    raw = make_instance(root) | {"repo": "pallets/flask", "version": "2.0"}
    return SweBenchRecord.from_dict(raw, "test"), root


def test_an_instance_without_a_specification_or_its_python_is_not_prepared(
    record: tuple[SweBenchRecord, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec, root = record
    envs = tmp_path / "envs"
    unknown = prepare(dataclasses.replace(rec, version="0.0"), root, envs)
    assert not unknown.ok and "no official spec" in unknown.message
    hide_interpreters(monkeypatch, tmp_path)  # flask 2.0 wants python3.9
    missing = prepare(rec, root, envs)
    assert not missing.ok and "needs Python 3.9" in missing.message
    assert "--pythons" in missing.message or "pyenv" in missing.message
    nowhere = prepare(rec, tmp_path / "elsewhere", envs, python=sys.executable)
    assert not nowhere.ok and "no checkout" in nowhere.message
    assert not envs.exists()  # nothing half-built is left to be found


def test_an_adopted_environment_is_found_and_runs_the_tests(
    record: tuple[SweBenchRecord, Path], tmp_path: Path
) -> None:
    rec, root = record
    envs = tmp_path / "envs"
    manifest = adopt(envs / "pallets__flask__2.0", sys.executable)
    assert manifest.how == "adopted" and manifest.python == sys.executable
    saved = json.loads((envs / "pallets__flask__2.0" / swebench_env.MANIFEST).read_text())
    assert saved["testbed"] == "/testbed"
    contract = to_contract(rec, root, environments=envs)
    assert contract.runtime is not None and contract.runtime.name == "pallets__flask__2.0"
    assert contract.runtime.version == f"{sys.version_info[0]}.{sys.version_info[1]}"
    # A per-instance environment wins over the version's.
    adopt(envs / INSTANCE, sys.executable)
    own = to_contract(rec, root, environments=envs).runtime
    assert own is not None and own.name == INSTANCE
    # The environment is part of what the digest covers.
    assert to_contract(rec, root).digest != contract.digest


def test_a_manifest_for_another_tree_path_is_refused(
    record: tuple[SweBenchRecord, Path], tmp_path: Path
) -> None:
    rec, root = record
    envs = tmp_path / "envs"
    adopt(envs / INSTANCE, sys.executable)
    path = envs / INSTANCE / swebench_env.MANIFEST
    path.write_text(json.dumps(json.loads(path.read_text()) | {"testbed": "/work/repo"}))
    with pytest.raises(TaskError, match="expects the tree at /work/repo"):
        to_contract(rec, root, environments=envs)


# -- interpreters ------------------------------------------------------------------------

HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
REAL = os.path.realpath(sys.executable)


def test_an_interpreter_is_found_in_a_map_uv_or_conda_layout_and_never_assumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_interpreters(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match=f"needs Python {HERE}") as missing:
        swebench_pythons.find(HERE)
    assert f"pyenv install {HERE}" in missing.value.diagnostics()
    # A --pythons file: relative paths against the file, the real binary returned.
    table = tmp_path / "pythons.toml"
    table.write_text(f"# interpreters\n{HERE} = {sys.executable}\n3.1 = {sys.executable}\n")
    mapping = swebench_pythons.read_map(table)
    assert swebench_pythons.find(HERE, mapping=mapping) == REAL
    with pytest.raises(ConfigError, match=r"does not run as Python 3\.1"):
        swebench_pythons.find("3.1", mapping=mapping)
    table.write_text("three = /usr/bin/python3\n")
    with pytest.raises(ConfigError, match="not `VERSION = PATH`"):
        swebench_pythons.read_map(table)
    # uv's and conda's layouts hold the real interpreter (a link, as they install it).
    uv = tmp_path / "uv" / f"cpython-{HERE}.99-linux-x86_64-gnu" / "bin"
    uv.mkdir(parents=True)
    (uv / f"python{HERE}").symlink_to(REAL)
    monkeypatch.setenv("UV_PYTHON_INSTALL_DIR", str(tmp_path / "uv"))
    assert swebench_pythons.find(HERE) == REAL
    monkeypatch.delenv("UV_PYTHON_INSTALL_DIR")
    conda = tmp_path / "conda"
    (conda / "envs" / "py" / "bin").mkdir(parents=True)
    (conda / "envs" / "py" / "bin" / f"python{HERE}").symlink_to(REAL)
    monkeypatch.setenv("CONDA_EXE", str(conda / "bin" / "conda"))
    assert swebench_pythons.find(HERE) == REAL
    # One that is there but is another version is not taken for this one.
    (conda / "envs" / "py" / "bin" / "python3.1").symlink_to(REAL)
    with pytest.raises(ConfigError, match=r"did not run as 3\.1"):
        swebench_pythons.find("3.1")


def test_pyenv_shims_are_resolved_to_the_real_interpreter() -> None:
    """`pyenv versions` names what is installed; the shim on PATH is never what runs."""
    root = swebench_pythons.pyenv_root(os.environ)
    installed = sorted(root.glob("versions/3.*/bin/python3.*[0-9]")) if root else []
    if root is None or not installed:
        pytest.skip("pyenv with a Python 3 version is not installed here")
    exe = installed[0]
    version = exe.name.removeprefix("python")
    found = swebench_pythons.find(version)
    assert "/shims/" not in found, found
    assert found == os.path.realpath(found)
    if shutil.which(f"python{version}") and "/shims/" in str(shutil.which(f"python{version}")):
        assert found.startswith(str(root / "versions")), found


def test_pip_is_pinned_per_interpreter_and_build_tools_per_specification() -> None:
    # The newest pip each old Python supports: 20.3.4 (3.5), 21.3.1 (3.6), 24.0 (3.7),
    # 25.0.1 (3.8); older pips cannot install current manylinux wheels.
    assert pip_pin("3.6") == "pip<22" and pip_pin("3.5") == "pip<21"
    assert pip_pin("3.7") == "pip<24.1" and pip_pin("3.11") == "pip"
    flask = harness.spec_for("pallets/flask", "2.3")
    astropy = harness.spec_for("astropy/astropy", "1.3")
    django = harness.spec_for("django/django", "2.2")
    assert flask is not None and astropy is not None and django is not None
    assert build_tool_pins(flask) == ["setuptools==70.0.0"]
    assert build_tool_pins(astropy) == ["setuptools==38.2.4"]
    assert build_tool_pins(django) == ["setuptools"]


# -- pre_install -----------------------------------------------------------------------


def test_pre_install_steps_are_edits_of_the_checkout_or_host_requirements() -> None:
    sphinx = harness.spec_for("sphinx-doc/sphinx", "7.2")
    django = harness.spec_for("django/django", "2.2")
    assert sphinx is not None and django is not None
    edits, host = swebench_preinstall.plan(sphinx.pre_install)
    assert "sed -i 's/pytest/pytest -rA/' tox.ini" in [e.command for e in edits]
    assert {f for e in edits for f in e.files} <= {"tox.ini", "setup.py"}
    assert host == ["apt-get update && apt-get install -y graphviz"]
    edits, host = swebench_preinstall.plan(django.pre_install)
    assert edits == [] and len(host) == 3 and any("locale-gen" in h for h in host)
    # Nothing outside the checkout is ever an edit.
    assert not swebench_preinstall.classify("sed -i 's/a/b/' /etc/locale.gen").edits_checkout
    assert not swebench_preinstall.classify("sed -i 's/a/b/' ../outside.cfg").edits_checkout


def test_pre_install_edits_are_applied_once_and_host_requirements_reported(
    record: tuple[SweBenchRecord, Path], tmp_path: Path
) -> None:
    """Sphinx's `-rA` edit of tox.ini is what makes its log name tests at all."""
    rec, root = record
    checkout = root / rec.instance_id
    (checkout / "tox.ini").write_text("[testenv]\ncommands=\n    pytest --durations 25 {posargs}\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "tox")
    sphinx = dataclasses.replace(rec, repo="sphinx-doc/sphinx", version="7.2")
    # The edits come first, whatever fails after them (here: no Python 3.9 at that path).
    nowhere = {"3.9": str(tmp_path / "no-such" / "python3.9")}
    done = prepare(sphinx, root, tmp_path / "envs", pythons=nowhere)
    assert not done.ok and "does not run as Python 3.9" in done.message, done.message
    assert done.host_requirements == ["apt-get update && apt-get install -y graphviz"]
    assert done.applied == ["sed -i 's/pytest/pytest -rA/' tox.ini"]
    tox = (checkout / "tox.ini").read_text()
    assert "pytest -rA --durations 25" in tox
    prepare(sphinx, root, tmp_path / "envs", pythons=nowhere)
    assert (checkout / "tox.ini").read_text() == tox  # from the committed bytes: once


# -- the install step never reaches another interpreter -----------------------------------


def test_the_install_step_is_refused_unless_python_is_the_environments(
    record: tuple[SweBenchRecord, Path], tmp_path: Path
) -> None:
    """The attack: an environment whose bin holds no python, so `python` on PATH is the
    host's; the install step (here one that leaves a mark) must never run."""
    try:
        bwrap()
    except SandboxError as err:
        pytest.skip(f"no bwrap to run the install step in: {err.message}")
    _, root = record
    checkout = root / INSTANCE
    hollow = tmp_path / "envs" / "hollow" / "venv"
    (hollow / "bin").mkdir(parents=True)
    argv = _at_testbed(checkout, hollow / "bin", guarded(hollow, "touch /testbed/RAN"))
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == REFUSED_EXIT, done.stderr
    assert "the install step is refused" in done.stderr and "python resolves to" in done.stderr
    assert not (checkout / "RAN").exists()
    # A real environment passes the preamble, and its command runs there.
    venv = tmp_path / "envs" / "real" / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    argv = _at_testbed(
        checkout,
        venv / "bin",
        guarded(venv, "python -c 'import sys; print(sys.prefix)' > /testbed/RAN"),
    )
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (checkout / "RAN").read_text().strip() == str(venv)


def test_every_attempts_log_is_kept(record: tuple[SweBenchRecord, Path], tmp_path: Path) -> None:
    """Two failed attempts (no requirement file in the checkout): both logs are there."""
    rec, root = record
    envs = tmp_path / "envs"
    for _ in range(2):
        done = prepare(rec, root, envs, python=sys.executable, force=True)
        assert not done.ok and "no requirement file" in done.message
    directory = envs / "pallets__flask__2.0"
    logs = sorted(p.name for p in directory.glob("prepare-*.log"))
    assert logs == ["prepare-1.log", "prepare-2.log"]
    assert "prepare attempt 1" in (directory / "prepare-1.log").read_text()
    assert "prepare attempt 2" in (directory / "prepare.log").read_text()


# -- what a host can grade, before anything is built ------------------------------------


def _spec_on(python: str) -> tuple[str, str] | None:
    """A repository version whose specification builds a virtualenv of `python`."""
    for repo in ("pallets/flask", "psf/requests", "pytest-dev/pytest", "django/django"):
        for version in ("2.3", "2.26", "8.0", "5.0", "4.2", "2.0", "3.0"):
            spec = harness.spec_for(repo, version)
            if spec and spec.python == python and spec.packages != "environment.yml":
                return repo, version
    return None


def test_the_report_says_per_version_what_builds_here_and_builds_nothing(
    record: tuple[SweBenchRecord, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec, root = record
    here = _spec_on(HERE)
    if here is None:
        pytest.skip(f"no specification in the table builds on Python {HERE}")
    hide_interpreters(monkeypatch, tmp_path)
    records = [
        dataclasses.replace(rec, repo=here[0], version=here[1]),
        dataclasses.replace(rec, instance_id="m-1", repo="matplotlib/matplotlib", version="3.5"),
        dataclasses.replace(rec, instance_id="s-1", repo="sphinx-doc/sphinx", version="7.2"),
        dataclasses.replace(rec, instance_id="a-1", repo="acme/calc", version="0.1"),
    ]
    envs = tmp_path / "envs"
    doc = prepare_report(records, root, envs, pythons={HERE: sys.executable})
    rows = {(r["repo"], r["version"]): r for r in doc["versions"]}
    assert rows[here]["builds"] and rows[here]["interpreter"] == REAL
    assert rows[here]["checkouts"] == 1
    conda = rows[("matplotlib/matplotlib", "3.5")]
    assert not conda["builds"] and "conda" in conda["reason"]
    sphinx = rows[("sphinx-doc/sphinx", "7.2")]
    assert not sphinx["builds"] and "needs Python 3.9" in sphinx["reason"]
    assert sphinx["host_requirements"] == ["apt-get update && apt-get install -y graphviz"]
    assert "no official specification" in rows[("acme/calc", "0.1")]["reason"]
    assert doc["instances"] == 4 and doc["buildable_instances"] == 1
    assert not envs.exists()  # nothing was built


def test_check_takes_the_memory_module_policy_the_daemon_grades_with(
    record: tuple[SweBenchRecord, Path], tmp_path: Path
) -> None:
    """`prepare --check --memory-modules` names a policy `jouled serve` knows, or nothing is
    prepared; the check then grades under it (tests/test_swebench_verified.py: astropy)."""
    rec, root = record
    dataset = tmp_path / "dataset.json"
    fields = {k: v for k, v in dataclasses.asdict(rec).items() if v is not None}
    dataset.write_text(json.dumps([fields]))
    paths = [
        "--dataset",
        str(dataset),
        "--checkout-root",
        str(root),
        "--envs",
        str(tmp_path / "envs"),
    ]
    check = ["--check", "--memory-modules", "sometimes"]
    done = subprocess.run(
        [sys.executable, "-m", "jouled", "swebench", "prepare", *paths, *check],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "--memory-modules 'sometimes' is not one of withhold, allow" in done.stderr
    assert not (tmp_path / "envs").exists()
