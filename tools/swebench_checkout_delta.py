"""Write the committed fixture of one real SWE-bench instance: its record and its checkout.

A real instance's checkout is its repository at `base_commit`. The test suite
cannot clone repositories (it reaches package registries only), so each
instance's checkout is rebuilt from a release sdist of the repository (fetched
from PyPI by `make swebench-fixtures`) and a small delta committed beside its
record: a binary git diff that turns the sdist's files into the tree of
`base_commit`, and the raw commit object of `base_commit`. Rebuilt, the
checkout's tree hashes to the commit's tree and its HEAD is `base_commit` itself
(a shallow commit: its parents are not there), so the rebuilt checkout is the
real one, byte for byte, and provably so.

Usage (needs a clone of the repository, bare or not):

    python tools/swebench_checkout_delta.py --repo-git PATH/TO/.git \\
        --sdist .cache/swebench/dist/flask-2.3.0.tar.gz --record record.json \\
        --wrong wrong.diff --out tests/fixtures/swebench_verified/

`record.json` holds the published record's fields (see `tests/swebench_verified.py`
for the ones kept); `--wrong` a patch that fixes the instance wrongly.
"""

from __future__ import annotations

import argparse
import base64
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.swebench_verified import KEPT_FIELDS, build_checkout, unpack_sdist


def _git(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True, check=True
    ).stdout


def delta(repo_git: Path, commit: str, sdist: Path) -> tuple[str, list[str], bytes]:
    """The diff from the sdist's files to `commit`'s tree, the sdist's files the tree lacks,
    and the commit's raw object.

    A file the sdist has and the tree lacks (its `*.egg-info/SOURCES.txt`, a module removed
    since the release) is named, not diffed: a deletion's diff carries the whole file, and
    `build_checkout` removes the named files before it applies the diff.
    """
    raw = _git("--git-dir", str(repo_git), "cat-file", "commit", commit)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        unpack_sdist(sdist, work)
        _git("init", "-q", cwd=work)
        _git("add", "-A", "-f", cwd=work)
        _git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-q", "-m", "sdist", cwd=work)
        for entry in work.iterdir():
            if entry.name != ".git":
                shutil.rmtree(
                    entry
                ) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        index = Path(tmp) / "index"
        env = {**os.environ, "GIT_INDEX_FILE": str(index)}
        _git("--git-dir", str(repo_git), "read-tree", commit, env=env)
        _git("--git-dir", str(repo_git), "--work-tree", str(work), "checkout-index", "-a", env=env)
        _git("add", "-A", "-f", cwd=work)
        listed = _git("diff", "--cached", "--name-only", "-z", "--diff-filter=D", "HEAD", cwd=work)
        removed = sorted(name for name in listed.decode("utf-8").split("\0") if name)
        if removed:  # back in the index as the sdist has them: the diff leaves them alone
            _git(
                "reset",
                "-q",
                "HEAD",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                cwd=work,
                stdin=listed,
            )
        diff = _git("diff", "--cached", "--binary", "--full-index", "HEAD", cwd=work)
    return diff.decode("utf-8"), removed, raw


def scm_version(repo_git: Path, commit: str) -> str:
    """The version setuptools-scm's default scheme gives `commit` in the full repository.

    `git describe` names the last tag and the distance from it: `7.2.0.dev0-157-gaa55975c7`
    is `7.2.0.dev157+gaa55975c7`, `7.1.2-3-gabc` is `7.1.3.dev3+gabc`; on a tag, the tag
    (without a leading `v`).
    """
    described = _git("--git-dir", str(repo_git), "describe", "--tags", "--long", commit)
    tag, distance, node = described.decode().strip().rsplit("-", 2)
    tag = tag.removeprefix("v")  # astropy's `v5.3.dev`
    if distance == "0":
        return tag
    if ".dev" in tag:
        return f"{tag.split('.dev')[0]}.dev{distance}+{node}"
    parts = tag.split(".")
    parts[-1] = str(int(parts[-1]) + 1)
    return f"{'.'.join(parts)}.dev{distance}+{node}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repo-git", type=Path, required=True)
    parser.add_argument("--sdist", type=Path, required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--wrong", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--constraints",
        help="pip constraints the environment is built under (a dependency's release the "
        "official images predate, e.g. 'docutils<0.21')",
    )
    parser.add_argument(
        "--scm-dist",
        help="the distribution name of a repository versioned by setuptools-scm: the fixture "
        "then names the version it has at base_commit in the full repository",
    )
    parser.add_argument(
        "--memory-modules",
        choices=("withhold", "allow"),
        help="allow where the instance's tests import ctypes or cffi (astropy's do): the tests "
        "then grade it as `jouled serve --memory-modules allow` does",
    )
    args = parser.parse_args()
    record = json.loads(args.record.read_text())
    kept = {k: record[k] for k in KEPT_FIELDS if k in record}
    diff, removed, raw = delta(args.repo_git, record["base_commit"], args.sdist)
    fixture = {
        "record": kept,
        "wrong": args.wrong.read_text(),
        "sdist": args.sdist.name,
        "commit_object": base64.b64encode(raw).decode("ascii"),
        "delta": diff,
    }
    if removed:
        fixture["removed"] = removed
    if args.constraints:
        fixture["constraints"] = args.constraints.replace(";", "\n") + "\n"
    if args.memory_modules:
        fixture["memory_modules"] = args.memory_modules
    if args.scm_dist:
        name = args.scm_dist.upper().replace("-", "_").replace(".", "_")
        version = scm_version(args.repo_git, record["base_commit"])
        fixture["env"] = {f"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_{name}": version}
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{record['instance_id']}.json.xz"
    out.write_bytes(
        lzma.compress(json.dumps(fixture, indent=0).encode(), preset=9 | lzma.PRESET_EXTREME)
    )
    with tempfile.TemporaryDirectory() as tmp:  # the fixture rebuilds the real checkout
        tree = build_checkout(out, args.sdist.parent, Path(tmp))
        head = _git("rev-parse", "HEAD", cwd=tree).decode().strip()
        assert head == record["base_commit"], (head, record["base_commit"])
    print(f"{out}: {out.stat().st_size} bytes, delta {len(diff)} characters")


if __name__ == "__main__":
    main()
