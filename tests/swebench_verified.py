"""Real SWE-bench Verified instances, rebuilt offline from committed fixtures and PyPI sdists.

Each instance is one file, `tests/fixtures/swebench_verified/<instance_id>.json.xz`
(written by `tools/swebench_checkout_delta.py`):

- `record`: the published record's fields jouled reads (KEPT_FIELDS), as the
  dataset has them: its base commit, gold patch, test patch, FAIL_TO_PASS and
  PASS_TO_PASS;
- `wrong`: a patch that fixes the instance wrongly (written for these tests);
- `sdist`: the release sdist of the repository the checkout starts from,
  fetched into `.cache/swebench/dist/` by `make swebench-fixtures`;
- `delta` and `commit_object`: a binary git diff from the sdist's files to the
  tree of `base_commit`, and that commit's raw object;
- `removed` (where there are any): the sdist's files the tree lacks (its
  `*.egg-info/`, modules removed since the release), named instead of diffed: a
  deletion's diff would carry each whole file;
- `memory_modules` (where its tests import ctypes or cffi): `allow`, the policy the
  instance is graded under (`jouled serve --memory-modules`).

`build_checkout` unpacks the sdist, removes the `removed` files, applies the
delta, checks that the result hashes to the commit's tree, and writes the commit
object itself: the checkout's HEAD is the real `base_commit` (shallow: its
parents are not there).

Nothing here needs the network or pytest; the test module skips where an sdist
is missing.
"""

from __future__ import annotations

import base64
import json
import lzma
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "swebench_verified"
DIST = ROOT / ".cache" / "swebench" / "dist"

# The record's fields kept in a fixture (what jouled and the official grading read).
KEPT_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "environment_setup_commit",
    "version",
    "problem_statement",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)


class MissingSource(Exception):
    """A fixture's sdist is not in the cache."""


def _git(tree: Path, *args: str, stdin: bytes | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    done = subprocess.run(
        ["git", "-C", str(tree), *args], input=stdin, capture_output=True, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {tree}: {done.stderr.decode()}")
    return done.stdout.decode()


def unpack_sdist(sdist: Path, dest: Path) -> None:
    """The sdist's files (under its one top directory) at `dest`."""
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/", 1)[0]
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
                archive.extractall(tmp, filter="data")
            else:
                archive.extractall(tmp)
            (Path(tmp) / top).rename(dest)


def fixture_paths() -> list[Path]:
    return sorted(FIXTURES.glob("*.json.xz"))


def load(path: Path) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads(lzma.decompress(path.read_bytes()))
    return fixture


def build_checkout(path: Path, dist: Path, checkout_root: Path) -> Path:
    """The instance's checkout at `checkout_root/<instance_id>`, HEAD at its base commit."""
    fixture = load(path)
    record = fixture["record"]
    sdist = dist / fixture["sdist"]
    if not sdist.is_file():
        raise MissingSource(f"{sdist.name} is not in {dist}")
    tree = checkout_root / record["instance_id"]
    unpack_sdist(sdist, tree)
    for name in fixture.get("removed", []):
        path = tree / name
        if ".." in Path(name).parts or not path.is_file():
            raise RuntimeError(f"{tree}: the fixture removes {name!r}, not a file of the sdist")
        path.unlink()
    _git(tree, "init", "-q")
    delta = tree / ".git" / "jouled-delta.patch"
    delta.write_text(fixture["delta"])
    _git(tree, "apply", "--binary", "--whitespace=nowarn", str(delta))
    delta.unlink()
    _git(tree, "add", "-A", "-f")
    written = _git(tree, "write-tree").strip()
    raw = base64.b64decode(fixture["commit_object"])
    expected = raw.split(b"\n", 1)[0].decode().removeprefix("tree ")
    if written != expected:
        raise RuntimeError(f"{tree}: rebuilt tree {written} is not the commit's tree {expected}")
    commit = _git(tree, "hash-object", "-t", "commit", "-w", "--literally", "--stdin", stdin=raw)
    commit = commit.strip()
    if commit != record["base_commit"]:
        raise RuntimeError(f"{tree}: rebuilt commit {commit} is not {record['base_commit']}")
    (tree / ".git" / "shallow").write_text(commit + "\n")
    _git(tree, "update-ref", "HEAD", commit)
    return tree
