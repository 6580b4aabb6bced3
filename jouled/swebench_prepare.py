"""`jouled swebench prepare`: build an instance's environment from its official specification.

For a record, on a host that has the specification's Python (`python3.11` on
PATH, or `--python`):

1. a virtualenv at `ENVS/<owner>__<name>__<version>` (or `ENVS/<instance_id>`
   with `per_instance`), from that interpreter;
2. the specification's packages: its requirements as the official harness
   assembles them (`packages: requirements.txt`; see `requirements_text`),
   or the packages it names, then its pinned `pip_packages`;
3. its install step (`python -m pip install -e .` and the like) run with the
   environment's bin first on PATH and the checkout seen at `/testbed`,
   through bwrap, so the editable install points where the sandbox later
   mounts each attempt's tree;
4. a manifest, `jouled-env.json`, naming the interpreter and what the sandbox
   must show of it.

What it does not do: `pre_install` steps (system packages, locales: the
host's business; they are listed in the manifest's `skipped`), conda
environments (`packages: environment.yml`), fetching the checkout. pip's own
environment variables (PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX) reach
every pip run, the install step's included.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jouled.contracts import swebench, swebench_env
from jouled.contracts import swebench_harness as harness
from jouled.errors import TaskError
from jouled.pipeline.bwrap import bwrap

_PROBE = (
    "import json, os, sys; print(json.dumps({'prefix': sys.prefix, 'base': sys.base_prefix, "
    "'exe': os.path.realpath(sys.executable), "
    "'version': '%d.%d' % sys.version_info[:2]}))"
)


@dataclass
class Prepared:
    instance_id: str
    directory: Path | None
    ok: bool
    message: str
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "environment": str(self.directory) if self.directory else None,
            "ok": self.ok,
            "message": self.message,
            "skipped": self.skipped,
        }


def find_python(version: str, explicit: str | None = None) -> str | None:
    """The interpreter to build a `version` environment from, None when the host has none."""
    if explicit:
        return explicit
    return shutil.which(f"python{version}")


def probe(python: str) -> dict[str, str]:
    done = subprocess.run(
        [python, "-c", _PROBE], capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        raise TaskError(f"{python} does not run: {done.stderr.strip()[-500:]}")
    data: dict[str, str] = json.loads(done.stdout)
    return data


def _run(argv: list[str], log: list[str], env: dict[str, str] | None = None) -> None:
    log.append("$ " + shlex.join(argv))
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=3600)
    log.append(done.stdout[-4000:] + done.stderr[-4000:])
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-1500:]
        raise TaskError(f"`{shlex.join(argv[:6])} ...` failed ({done.returncode}): {tail}")


def _at_testbed(checkout: Path, bin_dir: Path, command: str) -> list[str]:
    """`command` run by sh with the checkout at /testbed and everything else as on the host."""
    found = bwrap()
    args = [found.path, "--die-with-parent"]
    if os.geteuid() != 0:
        args += ["--unshare-user"]
    for name in sorted(os.listdir("/")):
        path = f"/{name}"
        if name in ("proc", "dev", "testbed") or not os.path.isdir(path):
            continue
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        else:
            args += ["--bind", path, path]
    args += ["--dev", "/dev", "--proc", "/proc", "--bind", str(checkout), swebench_env.TESTBED]
    path_var = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', swebench_env.SYSTEM_PATH)}"
    args += ["--chdir", swebench_env.TESTBED, "--setenv", "PATH", path_var]
    return [*args, "--", "/bin/sh", "-c", command]


_EXCLUDED = ("-e .", "#", ".[test")


def _file_at(checkout: Path, commit: str | None, rel: str) -> str | None:
    """`rel` as of `commit` when the checkout's history has it, else as it is in the tree."""
    if commit and shutil.which("git") and (checkout / ".git").exists():
        done = subprocess.run(
            [
                "git",
                "-c",
                f"safe.directory={checkout}",
                "-C",
                str(checkout),
                "show",
                f"{commit}:{rel}",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if done.returncode == 0:
            return done.stdout
    path = checkout / rel
    return path.read_text(encoding="utf-8") if path.is_file() else None


def requirements_text(spec: harness.Spec, checkout: Path, commit: str | None = None) -> str | None:
    """The requirements the official harness installs for `packages: requirements.txt`.

    The first of the repository's requirement files that exists (at the
    instance's environment_setup_commit where the checkout has it), with the
    files it includes by `-r` inlined before it, one level deep; lines for
    the package itself (`-e .`, `.[test]`) and comments are left out.
    """
    for rel in spec.requirements:
        text = _file_at(checkout, commit, rel)
        if text is not None:
            break
    else:
        return None
    base = rel.rsplit("/", 1)[0] if "/" in rel else ""
    included: list[str] = []
    own: list[str] = []
    for line in text.split("\n"):
        if line.strip().startswith("-r"):
            name = line[len("-r") :].strip()
            other = _file_at(checkout, commit, f"{base}/{name}" if base else name)
            for extra in (other or "").split("\n"):
                if not extra.strip().startswith(_EXCLUDED):
                    included.append(extra)
        elif not line.strip().startswith(_EXCLUDED):
            own.append(line)
    included.append("\n".join(own))
    return "\n".join(included)


def prepare(
    record: swebench.SweBenchRecord,
    checkout_root: Path,
    envs: Path,
    *,
    python: str | None = None,
    per_instance: bool = False,
    force: bool = False,
) -> Prepared:
    """Build (or keep, unless `force`) the environment `record` runs in."""
    iid = record.instance_id
    spec = harness.spec_for(record.repo, record.version)
    if spec is None:
        return Prepared(iid, None, False, f"{record.repo} {record.version}: no official spec")
    name = iid if per_instance else swebench_env.version_name(record.repo, spec.version)
    directory = envs / name
    if (directory / swebench_env.MANIFEST).is_file() and not force:
        return Prepared(iid, directory, True, "already prepared")
    interpreter = find_python(spec.python, python)
    if interpreter is None:
        return Prepared(
            iid, None, False, f"needs Python {spec.python}; no python{spec.python} on PATH"
        )
    checkout = checkout_root / iid
    if not checkout.is_dir():
        return Prepared(iid, None, False, f"no checkout at {checkout}")
    log: list[str] = []
    skipped = [f"pre_install: {c}" for c in spec.pre_install]
    try:
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        venv = directory / "venv"
        _run([interpreter, "-m", "venv", str(venv)], log)
        bin_dir = venv / "bin"
        pip = [str(bin_dir / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
        if spec.packages == "requirements.txt":
            text = requirements_text(spec, checkout, record.environment_setup_commit)
            if text is None:
                raise TaskError(
                    f"no requirement file ({', '.join(spec.requirements)}) in {checkout}"
                )
            (directory / "requirements.txt").write_text(text, encoding="utf-8")
            _run([*pip, "-r", str(directory / "requirements.txt")], log)
        elif spec.packages == "environment.yml":
            raise TaskError(f"{spec.repo} {spec.version} is specified as a conda environment")
        elif spec.packages:
            _run([*pip, *spec.packages.split()], log)
        if spec.pip_packages:
            _run([*pip, *spec.pip_packages], log)
        if spec.install:
            _run(_at_testbed(checkout, bin_dir, spec.install), log)
        found = probe(str(bin_dir / "python"))
        manifest = swebench_env.Manifest(
            name=name,
            python=str(bin_dir / "python"),
            paths=tuple(dict.fromkeys([str(venv), found["base"]])),
            bin_dir=str(bin_dir),
            repo=spec.repo,
            version=spec.version,
            python_version=found["version"],
            how="prepared",
        )
        data = {**manifest.to_json(), "skipped": skipped, "spec": spec.describe()}
        (directory / swebench_env.MANIFEST).write_text(json.dumps(data, indent=1) + "\n")
        (directory / "prepare.log").write_text("\n".join(log))
    except (TaskError, OSError, subprocess.TimeoutExpired) as err:
        if directory.is_dir():
            (directory / "prepare.log").write_text("\n".join(log))
        message = err.message if isinstance(err, TaskError) else str(err)
        return Prepared(iid, directory, False, message, skipped)
    return Prepared(iid, directory, True, "prepared", skipped)


def adopt(directory: Path, python: str, *, name: str = "") -> swebench_env.Manifest:
    """Write the manifest for an environment built elsewhere: `python` with the repo at /testbed."""
    found = probe(python)
    bin_dir = str(Path(python).parent)
    manifest = swebench_env.Manifest(
        name=name or directory.name,
        python=python,
        paths=tuple(dict.fromkeys([found["prefix"], found["base"]])),
        bin_dir=bin_dir,
        python_version=found["version"],
        how="adopted",
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / swebench_env.MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    return manifest
