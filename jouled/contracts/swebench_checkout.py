"""The operator's prepared checkouts of SWE-bench instances, and the commit each is at.

The pristine tree of an instance is `checkout_root / instance_id`, a checkout
of its `repo` at `base_commit` that the operator prepared beforehand
(`git clone https://github.com/<repo> <dir> && git -C <dir> checkout <base_commit>`).
Nothing here fetches a repository. A checkout whose HEAD names another commit
is refused (`read_head` reads it from the git directory, asking git only when
that is not conclusive); a tree without git metadata is taken as prepared.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from jouled.contracts.swebench_records import OBJECT_NAME, SweBenchRecord
from jouled.errors import TaskError

__all__ = ["prepared_checkout", "read_head"]


def _git_dir(tree: Path) -> Path | None:
    """The git directory of a checkout: `.git` itself, or where a `.git` file points."""
    dot = tree / ".git"
    if dot.is_dir():
        return dot
    if dot.is_file():
        # Worktrees and submodules: `.git` is a file holding "gitdir: <path>".
        content = dot.read_text(encoding="utf-8", errors="replace").strip()
        if content.startswith("gitdir:"):
            target = Path(content[len("gitdir:") :].strip())
            return target if target.is_absolute() else tree / target
    return None


def _common_dir(git_dir: Path) -> Path:
    """Where shared refs live: a linked worktree's git dir names it in `commondir`."""
    pointer = git_dir / "commondir"
    if pointer.is_file():
        target = Path(pointer.read_text(encoding="utf-8", errors="replace").strip())
        return target if target.is_absolute() else git_dir / target
    return git_dir


def _packed_ref(common: Path, ref: str) -> str | None:
    try:
        lines = (common / "packed-refs").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        # Comments start with '#'; '^' lines peel the annotated tag above them.
        if line.startswith(("#", "^")):
            continue
        value, _, name = line.partition(" ")
        if name.strip() == ref:
            return value.strip()
    return None


def _head_from_files(tree: Path) -> str | None:
    """HEAD's commit read from the git directory, None whenever that is not certain."""
    git_dir = _git_dir(tree)
    if git_dir is None:
        return None
    common = _common_dir(git_dir)
    try:
        value = (git_dir / "HEAD").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    for _ in range(8):  # symbolic refs may chain; git itself stops at a few levels
        if OBJECT_NAME.fullmatch(value):
            return value.lower()
        if not value.startswith("ref:"):
            return None
        ref = value[len("ref:") :].strip()
        if not ref.startswith("refs/") or ".." in ref.split("/"):
            return None
        loose = next(
            (d / ref for d in (git_dir, common) if (d / ref).is_file()),
            None,
        )
        if loose is not None:
            try:
                value = loose.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                return None
            continue
        packed = _packed_ref(common, ref)
        if packed is None:
            # An unborn branch, or a ref backend other than files (reftable).
            return None
        value = packed
    return None


def read_head(tree: Path) -> str | None:
    """The commit a checkout's HEAD names, or None when `tree` is not a git checkout.

    Read from the git directory (loose refs, packed-refs, detached HEAD, linked
    worktrees) without running git; only when that is not conclusive does it
    ask `git rev-parse`. Raises TaskError when the checkout's HEAD cannot be
    determined at all.
    """
    if not (tree / ".git").exists():
        return None
    head = _head_from_files(tree)
    if head is not None:
        return head
    git = shutil.which("git")
    if git is None:
        raise TaskError(
            f"cannot tell which commit {tree} is checked out at: its git metadata needs "
            "git to read and git is not installed",
            hint="install git, or check the commit out detached (`git checkout <commit>`)",
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        done = subprocess.run(
            # The checkout may belong to another user than the daemon's; reading HEAD is safe.
            [git, "-c", f"safe.directory={tree}", "-C", str(tree), "rev-parse", "--verify", "HEAD"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TaskError(f"cannot run git rev-parse in {tree}: {err}") from err
    out = done.stdout.strip()
    if done.returncode != 0 or not OBJECT_NAME.fullmatch(out):
        raise TaskError(
            f"cannot tell which commit {tree} is checked out at: "
            f"git rev-parse HEAD failed: {done.stderr.strip() or out or done.returncode}",
        )
    return out.lower()


def _clone_command(record: SweBenchRecord, tree: Path) -> str:
    return (
        f"git clone https://github.com/{record.repo} {tree} && "
        f"git -C {tree} checkout {record.base_commit}"
    )


def prepared_checkout(record: SweBenchRecord, checkout_root: Path) -> Path:
    """The checkout of `record` under `checkout_root`; TaskError when it is missing or elsewhere."""
    tree = Path(checkout_root) / record.instance_id
    if not tree.is_dir():
        state = "is not a directory" if tree.exists() else "does not exist"
        raise TaskError(
            f"{record.instance_id}: expected a checkout of {record.repo} at base_commit "
            f"{record.base_commit} in {tree}, which {state}; prepare it with: "
            f"{_clone_command(record, tree)}",
            hint="then build the repository in place and install its dependencies into the "
            "daemon's interpreter, as the instance's environment requires",
        )
    head = read_head(tree)
    if head is not None and head != record.base_commit:
        raise TaskError(
            f"{record.instance_id}: {tree} is checked out at {head}, not at base_commit "
            f"{record.base_commit}",
            hint=f"git -C {tree} checkout {record.base_commit}",
        )
    return tree
