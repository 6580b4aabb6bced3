"""Per-instance and per-version environments for SWE-bench instances.

An environment is a directory under the daemon's `--swebench-envs` root that
holds a manifest, `jouled-env.json`, naming an interpreter whose installation
has the instance's dependencies and its repository installed in editable mode
at `/testbed` (the path the sandbox mounts each attempt's workdir at).
`jouled swebench prepare` builds one from the official specification;
`jouled swebench adopt` writes a manifest for one built some other way.

An instance uses `ROOT/<instance_id>` when there is one, else
`ROOT/<owner>__<name>__<version>`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jouled.contracts.contract import Runtime
from jouled.errors import TaskError

MANIFEST = "jouled-env.json"
TESTBED = "/testbed"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def version_name(repo: str, version: str) -> str:
    """The directory name of a repository version's environment: `django__django__5.0`."""
    return f"{repo.replace('/', '__')}__{version}"


def candidates(instance_id: str, repo: str, version: str | None) -> list[str]:
    names = [instance_id]
    if version:
        names.append(version_name(repo, version))
    return names


@dataclass(frozen=True)
class Manifest:
    """What `jouled-env.json` says of an environment."""

    name: str
    python: str  # the interpreter, absolute
    paths: tuple[str, ...]  # its prefix and base prefix: shown read-only in the sandbox
    bin_dir: str  # first on PATH, so `python`, `pytest` and console scripts are its own
    testbed: str = TESTBED
    repo: str = ""
    version: str = ""
    python_version: str = ""
    how: str = ""  # "prepared" or "adopted"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "python": self.python,
            "paths": list(self.paths),
            "bin_dir": self.bin_dir,
            "testbed": self.testbed,
            "repo": self.repo,
            "version": self.version,
            "python_version": self.python_version,
            "how": self.how,
        }

    def runtime(self) -> Runtime:
        return Runtime(
            name=self.name,
            python=self.python,
            paths=self.paths,
            env={"PATH": f"{self.bin_dir}{os.pathsep}{SYSTEM_PATH}"},
            version=self.python_version,
        )


def read_manifest(directory: Path) -> Manifest:
    path = directory / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        manifest = Manifest(
            name=str(data["name"]),
            python=str(data["python"]),
            paths=tuple(str(p) for p in data["paths"]),
            bin_dir=str(data["bin_dir"]),
            testbed=str(data.get("testbed", TESTBED)),
            repo=str(data.get("repo", "")),
            version=str(data.get("version", "")),
            python_version=str(data.get("python_version", "")),
            how=str(data.get("how", "")),
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TaskError(
            f"the environment manifest {path} cannot be read: {err}",
            hint="rebuild it with `jouled swebench prepare` or `jouled swebench adopt`",
        ) from None
    if manifest.testbed != TESTBED:
        raise TaskError(
            f"the environment {directory} expects the tree at {manifest.testbed}; "
            f"jouled mounts each attempt's tree at {TESTBED}",
            hint="prepare the environment with its editable install at /testbed",
        )
    if not Path(manifest.python).is_file():
        raise TaskError(f"the environment {directory} names {manifest.python}, which is missing")
    return manifest


def find(root: Path, instance_id: str, repo: str, version: str | None) -> Manifest | None:
    """The environment an instance runs in, None when the root has none for it."""
    for name in candidates(instance_id, repo, version):
        directory = root / name
        if (directory / MANIFEST).is_file():
            return read_manifest(directory)
    return None
