"""A specification's `pre_install` steps: checkout edits applied, host requirements reported.

The official harness runs `pre_install` in the image before the install step.
Two kinds of step are there:

- **checkout edits**: `sed -i` (and the `grep -q ... && sed -i ... || sed -i
  ...` forms) on files of the repository, such as Sphinx's
  `sed -i 's/pytest/pytest -rA/' tox.ini`, without which its log names no
  test, or its pins in `setup.py`. `prepare` applies them to each checkout,
  starting from the files as committed (`git show HEAD:<file>`), so applying
  them again gives the same bytes;
- **host requirements**: everything else (`apt-get install graphviz`,
  `locale-gen`, downloads): the host's business. They are reported in the
  manifest (`host_requirements`) and by `prepare`, never run and never
  silently dropped.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jouled.errors import TaskError

_SPLIT = re.compile(r"\s*(?:&&|\|\||;)\s*")
_EDITORS = ("sed", "grep")


@dataclass(frozen=True)
class Step:
    command: str
    files: tuple[str, ...]  # the checkout's files it edits; () for a host requirement

    @property
    def edits_checkout(self) -> bool:
        return bool(self.files)


def _operands(argv: list[str]) -> list[str]:
    """The file operands of a sed or grep command line: what follows its script."""
    args = [a for a in argv[1:] if not a.startswith("-")]
    return args[1:]  # the first is the script (sed) or the pattern (grep)


def classify(command: str) -> Step:
    """A checkout edit when every part is sed or grep on relative paths, else a host step."""
    files: list[str] = []
    for part in _SPLIT.split(command.strip()):
        try:
            argv = shlex.split(part)
        except ValueError:
            return Step(command, ())
        if not argv or argv[0] not in _EDITORS:
            return Step(command, ())
        if argv[0] == "sed" and "-i" not in argv:
            return Step(command, ())
        operands = _operands(argv)
        if not operands or any(o.startswith("/") or ".." in o.split("/") for o in operands):
            return Step(command, ())
        files.extend(operands)
    return Step(command, tuple(dict.fromkeys(files)))


def plan(steps: Sequence[str]) -> tuple[list[Step], list[str]]:
    """(the checkout edits, the host requirements) of a specification's pre_install."""
    classified = [classify(c) for c in steps]
    return [s for s in classified if s.edits_checkout], [
        s.command for s in classified if not s.edits_checkout
    ]


def restore_committed(checkout: Path, files: Sequence[str], git: str) -> None:
    """Put `files` back as the checkout's HEAD has them, so edits apply to committed bytes."""
    for rel in files:
        done = subprocess.run(
            [git, "-c", f"safe.directory={checkout}", "-C", str(checkout), "show", f"HEAD:{rel}"],
            capture_output=True,
            check=False,
            timeout=60,
        )
        if done.returncode != 0:
            raise TaskError(
                f"pre_install edits {rel}, which {checkout}'s HEAD does not have",
                hint="check out the instance's base_commit",
            )
        (checkout / rel).write_bytes(done.stdout)
