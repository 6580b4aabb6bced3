"""Running an agent CLI as a solver: in the sandbox, on the attempt's own workdir.

The agent gets a fresh copy of the task's visible tree (hidden tests are not
in it) with the prompt in PROMPT.md, the network its solver's policy allows,
the environment variables it names and nothing else of the daemon's. What it
leaves behind becomes a patch: the diff of its workdir against the pristine
tree, with the protected paths put back first (its edits to tests never
count) and what no patch can carry (symlinks, binary files) dropped and
named. The daemon grades that patch like any submitted one. The solvers
themselves are declared in `jouled.solvers`.
"""

from __future__ import annotations

import codecs
import filecmp
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jouled.contracts.contract import iter_tree
from jouled.pipeline.limits import Limits, RunResult
from jouled.pipeline.sandbox import Sandbox
from jouled.solvers import CommandSolver
from jouled.solvers.command import claimed_usage

PROMPT_FILE = "PROMPT.md"


@dataclass(frozen=True)
class Solved:
    run: RunResult
    claimed: dict[str, int]
    dropped: list[str] = field(default_factory=list)  # files no patch can carry

    def describe(self) -> dict[str, Any]:
        """What the signed result says of the solve run (never its environment)."""
        return {
            "exit_code": self.run.exit_code,
            "signal": self.run.signal,
            "timed_out": self.run.timed_out,
            "wall_ms": self.run.wall_ns // 1_000_000,
            "network": self.run.isolation.get("network", ""),
            "dropped": self.dropped[:50],
            # the bound the run reached, when it reached one ("disk": its writable space)
            **({"resource": r} if (r := self.run.isolation.get("resource")) else {}),
        }


def solve(
    solver: CommandSolver,
    env: Mapping[str, str],
    prompt: str,
    workdir: Path,
    sandbox: Sandbox,
    model: str = "",
) -> Solved:
    """Run `solver` on `workdir` (seeded by the caller) and read its usage report."""
    (workdir / PROMPT_FILE).write_text(prompt)
    layout = sandbox.layout(workdir)
    argv = solver.render(prompt, f"{layout.workdir}/{PROMPT_FILE}", layout.workdir, model)
    # An agent CLI (node, its tools, a language server) needs more room than a test run.
    limits = Limits(
        timeout_s=solver.timeout_s,
        processes=1024,
        total_memory_bytes=8 << 30,
        tmp_bytes=2 << 30,
    )
    run = sandbox.run(
        argv,
        workdir,
        limits=limits,
        env=env,
        network=solver.network == "open",
        read_only=solver.paths,
    )
    return Solved(run, claimed_usage(run.output, solver.usage))


def keep_patchable(
    workdir: Path, base: Path, is_protected: Callable[[str], bool], dropped: list[str]
) -> None:
    """Make `workdir` differ from `base` only in what a patch to graded files can say.

    Protected paths go back to `base`, PROMPT.md goes, and symlinks and files
    that are not UTF-8 text are removed (named in `dropped`) unless unchanged.
    """
    pristine = dict(iter_tree(base))
    for rel, path in iter_tree(workdir):
        original = pristine.get(rel)
        if rel == PROMPT_FILE and original is None:
            path.unlink()
        elif is_protected(rel):
            path.unlink()
            if original is not None:
                shutil.copy2(original, path)
        elif path.is_symlink() or not _is_text(path):
            if original is not None and _same(original, path):
                continue
            path.unlink()
            dropped.append(rel)
            if original is not None:
                shutil.copy2(original, path, follow_symlinks=False)
    for rel, original in pristine.items():
        target = workdir / rel
        if is_protected(rel) and not target.exists() and not target.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(original, target, follow_symlinks=False)


def _is_text(path: Path) -> bool:
    """UTF-8 without NUL bytes, read in chunks: a huge file costs no memory to judge."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 16):
                if b"\0" in chunk:
                    return False
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
    except (OSError, UnicodeDecodeError):
        return False
    return True


def _same(a: Path, b: Path) -> bool:
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and a.readlink() == b.readlink()
    try:
        return filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False
