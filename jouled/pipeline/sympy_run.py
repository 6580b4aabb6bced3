"""How the daemon runs SymPy's `bin/test` (the official test command of sympy/sympy).

The command runs as it is, through the daemon's SymPy runner (`jouled_sympy.py`,
after the integrity monitor): the same script, arguments and `__main__`, with
every test's outcome also reported on the runner's authenticated channel. The
verdict of record is still the repository's own, read from the log (SymPy's
parser names a test by its bare function name); `disagreement` holds the log
against the channel, so a patch that prints `test_x ok` for a test that
failed, or makes the reporter lie, is caught.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from jouled.pipeline import runners
from jouled.pipeline.pytest_run import (
    Canaries,
    Channel,
    Plan,
    canary_name,
    canary_source,
    canary_words,
    is_python,
)
from jouled.pipeline.sandbox import Layout
from jouled.pipeline.unittest_run import log_disagreement

RUNNER = Path(__file__).with_name("jouled_sympy.py")
SCRIPT = "bin/test"
# The tree's own test runner and test helpers: a patch that changes them grades at
# `reduced` (the runner's code is then the patch's).
FRAMEWORK = (
    "bin/",
    "sympy/testing/runtests.py",
    "sympy/testing/pytest.py",
    "sympy/utilities/runtests.py",
    "sympy/utilities/pytest.py",
)


def split_sympy(test_cmd: Sequence[str]) -> tuple[list[str], str | None] | None:
    """(the script's arguments, the interpreter named) of `[python] bin/test ARGS`; None
    for any other command."""
    if not test_cmd:
        return None
    if test_cmd[0] == SCRIPT:
        return list(test_cmd[1:]), None
    if is_python(test_cmd[0]) and len(test_cmd) > 1 and test_cmd[1] == SCRIPT:
        return list(test_cmd[2:]), test_cmd[0]
    return None


def plan(
    test_cmd: Sequence[str],
    tree: Path,
    ro_dir: Path,
    layout: Layout,
    pristine: Path | None = None,
    protected: Sequence[str] = (),
    python: str = sys.executable,
    memory_modules: str = "withhold",
) -> Plan | None:
    """Prepare `ro_dir` for one run of SymPy's `bin/test`; None when the command is not it."""
    split = split_sympy(test_cmd)
    if split is None:
        return None
    args, named = split
    changed = runners.prepare_plain(
        ro_dir, RUNNER, layout, tree, pristine, protected, FRAMEWORK, scripts=(SCRIPT,)
    )
    boot = runners.boot(layout, RUNNER)
    argv = [runners.interpreter(named, python), "-c", boot, SCRIPT, *args]
    level = "reduced" if changed else ""
    canaries, labels = plant_canaries(tree, args)
    key, setup = runners.setup(
        layout, canaries.files, level=level, memory_modules=memory_modules, labels=labels
    )
    # Set before the interpreter starts, the seed makes SymPy run its tests in this process
    # (it otherwise starts a child for hash randomization, which the monitor would not see).
    env = {"PYTHONHASHSEED": str(secrets.randbelow(2**32))}
    return Plan(argv, env, key, setup, {}, canaries, None, level)


def plant_canaries(tree: Path, args: Sequence[str]) -> tuple[Canaries, list[str]]:
    """A canary test file beside the first test file the command names: (the canaries, the
    path the runner adds to the script's arguments, in its own process)."""
    first = next(
        (a for a in args if not a.startswith("-") and a.endswith(".py") and (tree / a).is_file()),
        None,
    )
    if first is None:
        return Canaries((), (), ()), []
    directory = os.path.dirname(os.path.normpath(first))
    words = canary_words(tree, directory)
    taken = {p.stem.removeprefix("test_") for p in (tree / directory).glob("*.py")}
    rel = f"{directory}/test_{canary_name(words, taken)}.py"
    names: set[str] = set()
    passing, failing = canary_name(words, names), canary_name(words, names)
    (tree / rel).write_text(canary_source("test_", passing, failing) + "\n")
    return Canaries((rel,), (f"{rel}::test_{passing}",), (f"{rel}::test_{failing}",)), [rel]


def _bare(test_id: str) -> str:
    return test_id.rsplit("::", 1)[-1]


def without_canaries(log: Mapping[str, str], canaries: Canaries) -> dict[str, str]:
    """The log's outcomes less the canaries', by their bare names or `file.py:name`."""
    files = set(canaries.files)
    names = {_bare(t) for t in canaries.ids}
    return {
        k: v
        for k, v in log.items()
        if k not in names and not (k.partition(".py:")[0] + ".py" in files and ".py:" in k)
    }


def disagreement(
    log: Mapping[str, str],
    channel: Channel,
    exit_code: int | None,
    canaries: Canaries = Canaries((), (), ()),
    tree: Path | None = None,
    test_cmd: Sequence[str] = (),
) -> str:
    """Why the log cannot describe the run the runner saw; "" when nothing says so.
    (`tree` and `test_cmd` are not needed: SymPy's log names every test by its function.)

    A test the log reports passed must have passed on the channel (its last run
    under that name, as the log's parser keeps the last line); a run that
    exited 0 must have been seen through to its end; and where the log claims
    any pass, the canaries must have come out as planted.
    """
    last: dict[str, str] = {}
    for test_id, outcome in channel.outcomes.items():
        last[_bare(test_id.split("#", 1)[0])] = outcome
    return log_disagreement(log, channel, exit_code, canaries, last.get)
