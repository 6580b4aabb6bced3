"""The two trees scale_bench.py compares: an earlier revision unpacked under bench/out/,
and this checkout, each run in fresh interpreters of its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"


@dataclass(frozen=True)
class Tree:
    name: str  # "before" or "after"
    root: Path  # holds jouled/ and bench/
    packages: Path  # holds jb_client (a link to the root's client/)

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": f"{self.packages}{os.pathsep}{self.root}"}

    def python(self, code: str, *args: str, timeout: float = 3600) -> Any:
        """Run `code` in a fresh interpreter on this tree; it prints one JSON value last."""
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=self.root,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{self.name}: {done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def tree_at(rev: str) -> Tree:
    """The tree at `rev`, unpacked once under bench/out/ with this tree's generated stubs."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout.strip()
    root = OUT / f"tree-{sha}"
    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", sha], capture_output=True, check=True, cwd=REPO
        ).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(root, filter="data")
        for stub in (REPO / "jouled" / "v1").glob("*_pb2*.py"):
            shutil.copy(stub, root / "jouled" / "v1" / stub.name)
        (root / "packages").mkdir()
        (root / "packages" / "jb_client").symlink_to(root / "client")
        (root / ".complete").write_text(sha)
    return Tree("before", root, root / "packages")


def this_tree() -> Tree:
    packages = OUT / "tree-here"
    packages.mkdir(parents=True, exist_ok=True)
    link = packages / "jb_client"
    if not link.exists():
        link.symlink_to(REPO / "client")
    return Tree("after", REPO, packages)
