"""Running a test command in a container image (opt-in: `docker` or `podman`).

The official SWE-bench harness runs each instance in its own image
(`sweb.eval.x86_64.<instance_id>`), whose conda environment `testbed` has the
repository installed in editable mode at `/testbed`. Here the attempt's
workdir is mounted over `/testbed`, and the command runs in that environment
with no network, no capabilities, no new privileges, and the run's memory,
process and wall-time bounds; the container is removed afterwards, and killed
on timeout. Its output is captured like a sandboxed run's.

What it does not give that the bubblewrap sandbox gives: the daemon's pytest
runner (no authenticated report, no canaries: the log is read as it is), a
uid of the run's own (the image's user, root in the official images), a CPU
time figure (none: the metered window counts wall time), and the image's own
`/testbed`, hidden by the workdir: the checkout must carry whatever the image
built in place (copy it out of the image).
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jouled.errors import SandboxError
from jouled.pipeline.limits import Limits, RunResult
from jouled.pipeline.mounts import SANDBOX_WORKDIR

ENGINES = ("docker", "podman")
CONTAINER = "container"

# What the official evaluation script runs before the test command.
ACTIVATE = "source /opt/miniconda3/bin/activate && conda activate testbed"


@dataclass(frozen=True)
class Engine:
    name: str  # "docker" or "podman"
    path: str

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "path": self.path}


def find_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise SandboxError(f"unknown container engine {name!r}: one of {', '.join(ENGINES)}")
    path = shutil.which(name)
    if path is None:
        raise SandboxError(f"the container engine {name} is not installed (not on PATH)")
    return Engine(name, path)


def has_image(engine: Engine, image: str) -> bool:
    """Whether the image is on this host already (nothing is pulled)."""
    done = subprocess.run(
        [engine.path, "image", "inspect", image],
        capture_output=True,
        check=False,
        timeout=60,
    )
    return done.returncode == 0


def script(argv: Sequence[str], env: Mapping[str, str], activate: str = ACTIVATE) -> str:
    """The shell script run in the container: the environment activated, then the command."""
    exports = [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    lines = [activate, f"cd {SANDBOX_WORKDIR}", *exports, shlex.join(argv)]
    return "\n".join(lines) + "\n"


def command(
    engine: Engine,
    image: str,
    argv: Sequence[str],
    workdir: Path,
    limits: Limits,
    env: Mapping[str, str],
    name: str,
    overlays: Mapping[str, Path] | None = None,
) -> list[str]:
    """The engine's command line for one run.

    Each `overlays` entry (a path relative to the workdir -> a host file) is
    mounted read-only over that path, as the sandbox does with test files.
    """
    args = [engine.path, "run", "--rm", "--name", name, "--network", "none"]
    args += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    if limits.total_memory_bytes is not None:
        args += ["--memory", str(limits.total_memory_bytes)]
    if limits.processes is not None:
        args += ["--pids-limit", str(limits.processes)]
    args += ["--tmpfs", f"/tmp:size={limits.tmp_bytes}"]
    args += ["-v", f"{workdir}:{SANDBOX_WORKDIR}", "-w", SANDBOX_WORKDIR]
    for rel, source in sorted((overlays or {}).items()):
        if rel.startswith("/") or ".." in rel.split("/"):
            raise SandboxError(f"overlay path {rel!r} is not relative to the workdir")
        args += ["-v", f"{source}:{SANDBOX_WORKDIR}/{rel}:ro"]
    args += ["--entrypoint", "/bin/bash", image, "-c", script(argv, env)]
    return args


def run(
    engine: Engine,
    image: str,
    argv: Sequence[str],
    workdir: Path,
    *,
    limits: Limits,
    env: Mapping[str, str] | None = None,
    overlays: Mapping[str, Path] | None = None,
) -> RunResult:
    """Run `argv` in `image` with `workdir` at /testbed; a nonzero exit is a result."""
    if not workdir.is_dir():
        raise SandboxError(f"cannot start {argv[0]!r}: working directory {workdir} does not exist")
    name = f"jouled-{secrets.token_hex(8)}"
    full = command(engine, image, argv, workdir.resolve(), limits, env or {}, name, overlays)
    begin = time.monotonic_ns()
    timed_out = False
    try:
        done = subprocess.run(
            full,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=limits.timeout_s,
            check=False,
        )
        raw, status = done.stdout, done.returncode
    except subprocess.TimeoutExpired as err:
        timed_out = True
        raw, status = err.output or b"", None
        subprocess.run([engine.path, "kill", name], capture_output=True, check=False, timeout=60)
    except OSError as err:
        raise SandboxError(f"cannot start {engine.name}: {err}") from err
    wall_ns = time.monotonic_ns() - begin
    if status == 125:  # the engine's own failure: no such image, a bad option
        said = raw.decode(errors="replace").strip()[-500:]
        raise SandboxError(f"{engine.name} could not run {image}: {said}")
    kept = raw[-limits.output_bytes :] if limits.output_bytes else b""
    exit_code = status if status is not None and status >= 0 else None
    return RunResult(
        argv=tuple(argv),
        exit_code=exit_code,
        signal=-status if status is not None and status < 0 else None,
        timed_out=timed_out,
        wall_ns=wall_ns,
        cpu_ns=0,  # the engine's daemon runs it: its CPU is not this process tree's
        output=kept.decode(errors="replace"),
        level=CONTAINER,
        output_dropped=len(raw) - len(kept),
        isolation={**isolation(engine, image, limits), "cpu": "uncounted"},
    )


def isolation(engine: Engine, image: str, limits: Limits) -> dict[str, Any]:
    return {
        "level": CONTAINER,
        "engine": engine.describe(),
        "image": image,
        "network": "none",
        "uid": "image",
        "limits": {
            "memory_bytes_total": limits.total_memory_bytes,
            "processes": limits.processes,
            "tmp_bytes": limits.tmp_bytes,
            "output_bytes": limits.output_bytes,
            "timeout_s": limits.timeout_s,
        },
    }


def image_names(instance_id: str, arch: str = "") -> tuple[str, str]:
    """An instance's official image: as the harness builds it locally, then as it pulls it."""
    arch = arch or ("arm64" if os.uname().machine in ("arm64", "aarch64") else "x86_64")
    key = f"sweb.eval.{arch}.{instance_id.lower()}:latest"
    return key, f"swebench/{key}".replace("__", "_1776_")


def find_image(engine: Engine, instance_id: str) -> str | None:
    """The first of `image_names` this host has, None when it has neither (nothing is pulled)."""
    return next((n for n in image_names(instance_id) if has_image(engine, n)), None)
