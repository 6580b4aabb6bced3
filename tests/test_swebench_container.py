"""The opt-in container runtime, with a stand-in engine: no Docker or registry here.

The stand-in answers `image inspect` for the images it is told it has and runs
`run`'s script on the host, with `/testbed` read as the mounted workdir and
the conda activation left out; every command line it gets is logged, so what
jouled would ask a real engine for is checked flag by flag. What only a real
engine and the official images can show (the image's environment, its
limits being enforced) is not tested here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from jouled.contracts import swebench
from jouled.contracts.swebench import to_contract
from jouled.contracts.swebench_records import SweBenchRecord
from jouled.errors import SandboxError
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.metering import Metering
from jouled.patch import parse_patch
from jouled.pipeline import container
from jouled.pipeline.evaluate import Attempt, Evaluator
from jouled.pipeline.limits import Limits
from jouled.startup import container_images
from tests.test_swebench import GIT, INSTANCE, MemoryBaselines, make_instance

IMAGE = f"sweb.eval.x86_64.{INSTANCE}:latest"

FAKE_ENGINE = textwrap.dedent(
    """\
    #!{python}
    import json, os, subprocess, sys

    args = sys.argv[1:]
    with open(os.environ["FAKE_ENGINE_LOG"], "a") as log:
        log.write(json.dumps(args) + "\\n")
    if args[:2] == ["image", "inspect"]:
        sys.exit(0 if args[2] in os.environ["FAKE_IMAGES"].split(",") else 1)
    if args[0] == "kill":
        sys.exit(0)
    if args[0] == "run":
        if args[args.index("--entrypoint") + 2] not in os.environ["FAKE_IMAGES"].split(","):
            print("Unable to find image", file=sys.stderr)
            sys.exit(125)
        host = args[args.index("-v") + 1].split(":")[0]
        script = args[-1].replace("/testbed", host).splitlines()[1:]  # no conda here
        env = dict(os.environ, PATH=os.path.dirname(sys.executable) + ":" + os.environ["PATH"])
        sys.exit(subprocess.call(["/bin/bash", "-c", "\\n".join(script)], cwd=host, env=env))
    sys.exit(2)
    """
)


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(FAKE_ENGINE.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "engine.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    monkeypatch.setenv("FAKE_IMAGES", IMAGE)
    return log


@pytest.fixture
def record(tmp_path: Path) -> tuple[SweBenchRecord, Path]:
    if GIT is None:
        pytest.skip("git is not installed")
    root = tmp_path / "checkouts"
    raw = make_instance(root)
    # The record carries its own official command and parser: no table entry is needed.
    raw |= {"test_cmd": "python -m pytest -rA", "log_parser": "parse_log_pytest"}
    return SweBenchRecord.from_dict(raw, "test"), root


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_an_instance_whose_image_is_here_is_graded_in_it(
    engine: Path, record: tuple[SweBenchRecord, Path], tmp_path: Path
) -> None:
    rec, root = record
    images = container_images("docker")
    assert images is not None and images.find(INSTANCE) == IMAGE
    contract = to_contract(rec, root, images=images, timeout_s=120)
    assert contract.runtime is not None and contract.runtime.image == IMAGE
    assert contract.grading.plain and contract.grading.verdict is not None
    ev = Evaluator(Metering(EstimatorMeter(), None, "exclusive"), MemoryBaselines(), tmp_path)
    gold = ev.evaluate(Attempt(contract, parse_patch(rec.patch.encode()), "gold"))
    assert gold["status"] == "resolved", gold
    assert gold["verdict"]["status"] == "RESOLVED_FULL"
    assert gold["isolation"]["level"] == "container" and gold["isolation"]["image"] == IMAGE
    assert gold["isolation"]["cpu"] == "uncounted"  # the engine's daemon runs it, not us
    assert gold["integrity"] == {"report": "output", "canaries": 0, "level": "none"}
    assert gold["energy"]["grade"]["wall_ms"] >= 0  # metered like any run
    assert ev.evaluate(Attempt(contract, None, "noop"))["status"] == "unresolved"
    run = next(c for c in calls(engine) if c[0] == "run")
    for flag in (["--network", "none"], ["--cap-drop", "ALL"], ["--entrypoint", "/bin/bash"]):
        at = run.index(flag[0])
        assert run[at : at + 2] == flag
    assert "--rm" in run and "no-new-privileges" in run
    mounts = [run[i + 1] for i, a in enumerate(run) if a == "-v"]
    assert mounts[0].endswith(":/testbed")
    # The test files are shown read-only over themselves, as in the sandbox.
    assert any(m.endswith(":/testbed/tests/test_ops.py:ro") for m in mounts), mounts
    script = run[-1]
    assert script.startswith(container.ACTIVATE)
    assert script.rstrip().endswith("python -m pytest -rA tests/test_add_more.py tests/test_ops.py")


def test_a_shared_host_gives_a_container_run_the_whole_window_not_a_share_near_zero(
    engine: Path, record: tuple[SweBenchRecord, Path], tmp_path: Path
) -> None:
    """The engine's daemon runs the container, so its CPU is no process of ours: the grade
    phase cannot be apportioned by CPU, and says so instead of claiming ~0 J."""
    rec, root = record
    contract = to_contract(rec, root, images=container_images("docker"), timeout_s=120)
    ev = Evaluator(Metering(EstimatorMeter(), None, "shared"), MemoryBaselines(), tmp_path)
    gold = ev.evaluate(Attempt(contract, parse_patch(rec.patch.encode()), "gold"))
    assert gold["status"] == "resolved", gold
    grade = gold["energy"]["grade"]
    assert grade["attribution"] == "cpu-share" and grade["reliable"] is False, grade
    assert any("CPU time is not counted" in why for why in grade["reasons"]), grade


def test_without_its_image_an_instance_needs_an_environment(
    engine: Path, record: tuple[SweBenchRecord, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    rec, root = record
    monkeypatch.setenv("FAKE_IMAGES", "")
    images = container_images("docker")
    assert images is not None and images.find(INSTANCE) is None
    # Both spellings the official harness uses were asked for, and nothing was pulled.
    asked = [c[2] for c in calls(engine) if c[:2] == ["image", "inspect"]]
    assert asked == list(container.image_names(INSTANCE))
    assert asked[1] == f"swebench/sweb.eval.x86_64.{INSTANCE.replace('__', '_1776_')}:latest"
    django = dataclasses.replace(rec, test_cmd="./tests/runtests.py", log_parser="parse_log_django")
    with pytest.raises(swebench.Unsupported) as caught:
        to_contract(django, root, images=images)
    assert caught.value.code == swebench.NO_ENVIRONMENT
    assert "no docker image for it here" in caught.value.message


def test_an_engine_the_host_lacks_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert container_images("") is None
    with pytest.raises(SandboxError, match="podman is not installed"):
        container_images("podman")
    with pytest.raises(SandboxError, match="unknown container engine"):
        container_images("lxc")


def test_the_engines_own_failure_is_an_error_not_a_result(engine: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    workdir.mkdir()
    docker = container.find_engine("docker")
    with pytest.raises(SandboxError, match="could not run"):
        container.run(docker, "absent:latest", ["true"], workdir, limits=Limits(timeout_s=60))
