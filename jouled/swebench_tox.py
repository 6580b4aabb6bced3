"""A working interpreter inside tox's environment, for specifications that run `tox --current-env`.

Sphinx's official test command is `tox --current-env -epy39 -v -- <tests>`: the
tox-current-env plugin makes `.tox/py39/bin/python` a symlink to the interpreter
running tox. In the official image that is a conda environment's real binary,
which finds its packages from where it is; in a virtualenv it is a symlink to the
base interpreter, so `.tox/py39/bin/python` starts the base interpreter without
the environment's packages ("No module named pytest") and no test runs.

`link` makes `.tox/<env>` in the checkout a virtualenv of the prepared
environment's packages before tox runs: its own `pyvenv.cfg` (so the symlinked
interpreter takes `.tox/<env>` as its prefix) and a `.pth` file in its
site-packages that adds the environment's site-packages, with their own `.pth`
files (the editable install's among them). No symlink leaves the checkout; tox
then creates only `bin/python`, as it always does.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

PTH = "_jouled_environment.pth"

_ENV_OPTION = re.compile(r"^-e(.+)$")


def tox_env(test_cmd: str) -> str | None:
    """The tox environment `test_cmd` runs with `--current-env`, or None."""
    try:
        words = shlex.split(test_cmd)
    except ValueError:
        return None
    if not words or words[0] != "tox" or "--current-env" not in words:
        return None
    for i, word in enumerate(words):
        if word == "--":
            break
        if word in ("-e", "--env") and i + 1 < len(words):
            return words[i + 1].split(",")[0]
        found = _ENV_OPTION.match(word)
        if found:
            return found.group(1).split(",")[0]
    return None


def link(checkout: Path, venv: Path, env: str) -> list[Path]:
    """Write `.tox/<env>` in `checkout` as a virtualenv of `venv`'s packages; the files written.

    Nothing is written when `venv` is not a virtualenv (an adopted environment).
    """
    found = sorted(venv.glob("lib/python*/site-packages"))
    if not (venv / "pyvenv.cfg").is_file() or not found:
        return []
    packages = found[0]
    config = (venv / "pyvenv.cfg").read_text(encoding="utf-8")
    target = checkout / ".tox" / env
    site = target / "lib" / packages.parent.name / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    (target / "pyvenv.cfg").write_text(config, encoding="utf-8")
    (site / PTH).write_text(f"import site; site.addsitedir({str(packages)!r})\n", encoding="utf-8")
    return [target / "pyvenv.cfg", site / PTH]
