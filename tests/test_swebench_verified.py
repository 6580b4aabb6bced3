"""Real SWE-bench Verified instances, graded by jouled and by the official package.

Each instance (see `tests/swebench_verified.py`) is the published record, its
checkout rebuilt at the real `base_commit` from a PyPI sdist and a committed
delta, and its environment built by `jouled swebench prepare` from the official
specification (its packages come from PyPI, or from `.cache/swebench/dist/`
where they are there). The gold patch must be `resolved`, the empty and a wrong
patch `unresolved`, and every verdict must be the official package's grading of
the very log jouled captured.

Slow (an environment per repository version): marked `slow`. Skips, saying why,
where an sdist is not fetched (`make swebench-fixtures`), the specification's
Python version is not installed, or PyPI cannot be reached to build an
environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from jouled.contracts import swebench_harness as harness
from jouled.contracts.swebench_records import SweBenchRecord
from jouled.errors import ConfigError
from jouled.swebench_pythons import find
from tests import swebench_real as real
from tests import swebench_verified as verified
from tests.test_swebench_official import check_against_the_oracle, grade_all

INSTANCES = [p.name.removesuffix(".json.xz") for p in verified.fixture_paths()]

Instance = tuple[SweBenchRecord, str, Path, Path]  # record, wrong patch, checkouts, envs


def _fixture(instance_id: str) -> dict[str, Any]:
    return verified.load(verified.FIXTURES / f"{instance_id}.json.xz")


def _checkout(instance_id: str, root: Path) -> Path:
    if real.GIT is None:
        pytest.skip("git is not installed")
    try:
        return verified.build_checkout(
            verified.FIXTURES / f"{instance_id}.json.xz", verified.DIST, root
        )
    except verified.MissingSource as err:
        pytest.skip(f"{err}: {real.FETCH_HINT}")


@pytest.mark.parametrize("instance_id", INSTANCES)
def test_a_rebuilt_checkout_is_the_real_base_commit(instance_id: str, tmp_path: Path) -> None:
    """The sdist plus the committed delta hash to the base commit's tree; HEAD is that commit."""
    record = _fixture(instance_id)["record"]
    tree = _checkout(instance_id, tmp_path)
    assert real.git(tree, "rev-parse", "HEAD").strip() == record["base_commit"]
    assert real.git(tree, "status", "--porcelain") == ""
    # The record's test patch and gold patch apply to it as they do to the real checkout.
    for name in ("test_patch", "patch"):
        (tmp_path / f"{name}.diff").write_text(record[name])
        real.git(tree, "apply", "--check", str(tmp_path / f"{name}.diff"))


def test_the_fixtures_cover_the_repositories_they_claim() -> None:
    records = [_fixture(i)["record"] for i in INSTANCES]
    assert records, "no fixture under tests/fixtures/swebench_verified/"
    for record in records:
        assert record["instance_id"].startswith(record["repo"].replace("/", "__") + "-")
        assert harness.spec_for(record["repo"], record["version"]) is not None, record["repo"]
        assert record["FAIL_TO_PASS"] and isinstance(record["PASS_TO_PASS"], list)


_PYPI: dict[str, str | None] = {}


def pypi_reason() -> str | None:
    """Why PyPI cannot be reached (None when it can), asked once: pip downloads a small wheel."""
    if "reason" not in _PYPI:
        with_index = {k: v for k, v in os.environ.items() if k != "PIP_NO_INDEX"}
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--no-cache-dir",
                    "--only-binary",
                    ":all:",
                    "-d",
                    tmp,
                    "iniconfig==2.0.0",
                ],
                capture_output=True,
                text=True,
                env=with_index,
                check=False,
                timeout=120,
            )
        _PYPI["reason"] = (
            None if done.returncode == 0 else (done.stderr.strip()[-300:] or "pip failed")
        )
    return _PYPI["reason"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("verified")
    (base / "checkouts").mkdir()
    return base / "checkouts", base / "envs"


def _prepare(fixture: dict[str, Any], checkouts: Path, envs: Path) -> None:
    """`jouled swebench prepare` for one record, run as docs/swebench.md writes it (relative
    paths), its interpreter found by version; every host interpreter is left as it was.

    A repository versioned by setuptools-scm is told the version its base commit has in the
    full repository (the rebuilt checkout has no tags: its history is not there), as an
    operator with a shallow clone would tell it. A fixture's `constraints` hold back a
    dependency whose later releases the official images predate (docutils 0.21 and later
    break Sphinx 3.5's LaTeX builder), through pip's own PIP_CONSTRAINT.
    """
    record = fixture["record"]
    spec = harness.spec_for(record["repo"], record["version"])
    assert spec is not None
    try:
        find(spec.python)
    except ConfigError as err:
        pytest.skip(err.message)
    here = envs.parent
    dataset = here / f"{record['instance_id']}.json"
    dataset.write_text(json.dumps([record]))
    env = {k: v for k, v in os.environ.items() if k != "PIP_NO_INDEX"}
    env.update(PIP_FIND_LINKS=str(verified.DIST), PIP_DISABLE_PIP_VERSION_CHECK="1")
    # PyPI and the cached files only: a host's pip configuration (an extra local index whose
    # pages carry no Requires-Python) kept pip 23 on Python 3.9 backtracking for over fifteen
    # minutes over Django's unpinned requirements
    env.update(PIP_CONFIG_FILE=os.devnull)
    env.update(fixture.get("env", {}))
    if "constraints" in fixture:  # a dependency's release the official images predate
        constraints = here / f"{record['instance_id']}.constraints.txt"
        constraints.write_text(fixture["constraints"])
        env["PIP_CONSTRAINT"] = str(constraints)
    before = real.host_interpreters()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jouled",
            "swebench",
            "prepare",
            "--dataset",
            dataset.name,
            "--checkout-root",
            os.path.relpath(checkouts, here),
            "--envs",
            os.path.relpath(envs, here),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=here,
        check=False,
        timeout=1500,
    )
    assert real.host_interpreters() == before, "the install step reached a host interpreter"
    if done.returncode != 0:
        reason = pypi_reason()
        if reason is not None:
            pytest.skip(f"PyPI cannot be reached to build the environment: {reason}")
        raise AssertionError(done.stdout + done.stderr)


@pytest.fixture(scope="module", params=INSTANCES)
def instance(request: pytest.FixtureRequest, workspace: tuple[Path, Path]) -> Instance:
    real.oracle()
    fixture = _fixture(request.param)
    checkouts, envs = workspace
    _checkout(request.param, checkouts)
    _prepare(fixture, checkouts, envs)
    record = SweBenchRecord.from_dict(fixture["record"], request.param)
    return record, fixture["wrong"], checkouts, envs


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_real_instances_are_graded_as_the_official_harness_grades_them(
    instance: Instance, tmp_path: Path
) -> None:
    """Gold resolved, empty and wrong unresolved, each verdict the official one on its log.

    An instance whose tests import ctypes (astropy: `astropy.table` imports `astropy.io.fits`,
    whose compressed-image module imports ctypes) is graded as `jouled serve --memory-modules
    allow` grades it, its runs signed `reduced`."""
    record = instance[0]
    memory = _fixture(record.instance_id).get("memory_modules", "withhold")
    graded = grade_all(instance, tmp_path, memory_modules=memory)
    check_against_the_oracle(record, graded, tmp_path)
    gold = graded["gold"][0]["verdict"]
    assert gold["tests"]["FAIL_TO_PASS"] == {"success": len(record.FAIL_TO_PASS), "failure": 0}
    assert gold["tests"]["PASS_TO_PASS"] == {"success": len(record.PASS_TO_PASS), "failure": 0}
    if record.repo == "pytest-dev/pytest":  # pytest's own suite, through the daemon's runner
        integrity = graded["gold"][0]["integrity"]
        assert integrity["report"] == "channel" and integrity["canaries"] >= 1, integrity
        assert integrity["level"] == "reduced" and not integrity.get("forged"), integrity
    if memory == "allow":  # the memory modules loaded: the process's memory was open
        for name in ("gold", "empty", "wrong"):
            integrity = graded[name][0]["integrity"]
            assert integrity["level"] == "reduced" and not integrity.get("forged"), integrity


def _check(dataset: Path, checkouts: Path, envs: Path, env: dict[str, str], *flags: str) -> Any:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jouled",
            "swebench",
            "prepare",
            "--dataset",
            str(dataset),
            "--checkout-root",
            str(checkouts),
            "--envs",
            str(envs),
            "--check",
            "--json",
            *flags,
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=1500,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else done.stderr


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_prepare_check_reports_a_real_instance_gradable(instance: Instance) -> None:
    """`prepare --check` on the prepared environment: gold resolved, empty unresolved. An
    instance whose tests import ctypes is gradable only as the daemon grades it with
    `--memory-modules allow`; withheld, its baseline shows no test ran, and says why."""
    record, _, checkouts, envs = instance
    dataset = envs.parent / f"{record.instance_id}.json"
    memory = _fixture(record.instance_id).get("memory_modules", "withhold")
    if memory == "allow":
        rc, results = _check(dataset, checkouts, envs, dict(os.environ))
        assert rc == 3, results
        (result,) = results
        check = result["check"]
        assert check["gradable"] is False and check["code"] == "broken-environment", check
        assert "withheld _ctypes" in check["reason"], check
    rc, results = _check(dataset, checkouts, envs, dict(os.environ), "--memory-modules", memory)
    assert rc == 0, results
    (result,) = results
    assert result["check"] == {
        "gradable": True,
        "code": "gradable",
        "reason": "",
        "gold": "resolved",
        "empty": "unresolved",
    }


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_prepare_check_reports_a_broken_environment_with_its_evidence(tmp_path: Path) -> None:
    """pytest's checkout installed without its version (no tags, and setuptools-scm not told):
    its own minversion check stops every run, and `--check` says so instead of grading."""
    real.oracle()
    instance_id = "pytest-dev__pytest-10051"
    if instance_id not in INSTANCES:
        pytest.skip(f"no fixture for {instance_id}")
    fixture = _fixture(instance_id)
    checkouts, envs = tmp_path / "checkouts", tmp_path / "envs"
    _checkout(instance_id, checkouts)
    _prepare({**fixture, "env": {}}, checkouts, envs)
    rc, results = _check(tmp_path / f"{instance_id}.json", checkouts, envs, dict(os.environ))
    assert rc == 3, results
    (result,) = results
    check = result["check"]
    assert check["gradable"] is False and check["code"] == "broken-environment", check
    assert "'minversion' requires pytest" in check["reason"], check
    assert check["gold"] == "" and check["empty"] == ""
