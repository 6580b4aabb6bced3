"""How the daemon runs a unittest-style test command (Django's `tests/runtests.py`).

The command runs as it is, through the daemon's unittest runner
(`jouled_unittest.py`, after the integrity monitor): the same script, arguments
and `__main__`, with every unittest outcome also reported on the runner's
authenticated channel. The verdict of record is still the repository's own,
read from the log; `disagreement` holds the log against the channel, so a
patch that prints `... ok` lines for tests that failed, or makes the runner's
own printing lie, is caught.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from jouled.pipeline import runners, unittest_docs
from jouled.pipeline.pytest_run import (
    Canaries,
    Channel,
    Plan,
    canary_case_source,
    canary_name,
    canary_words,
    is_python,
)
from jouled.pipeline.sandbox import Layout
from jouled.pipeline.testreport import FAILED, PASSED

RUNNER = Path(__file__).with_name("jouled_unittest.py")
# Directories of the tree that hold its own test framework (Django's).
FRAMEWORK_DIRS = ("django/test/",)
# Django's (and unittest's) way of naming a test in its log: "test_x (pkg.mod.Class)", or
# from Python 3.11 on "test_x (pkg.mod.Class.test_x)"; a docstring may follow.
_LOG_ID = re.compile(r"^(?P<name>\w+) \((?P<where>[\w.]+)\)")


def split_unittest(test_cmd: Sequence[str]) -> tuple[str, str, list[str], str | None] | None:
    """(mode, target, args, interpreter) of a unittest-style command; None for anything else.

    `[python] path/script.py ARGS` is mode "script"; `python -m unittest ARGS`
    is mode "module". The interpreter is None where the command names none.
    """
    if not test_cmd:
        return None
    first = test_cmd[0]
    if first.endswith(".py"):
        return "script", first, list(test_cmd[1:]), None
    if not is_python(first) or len(test_cmd) < 2:
        return None
    if test_cmd[1] == "-m" and len(test_cmd) > 2 and test_cmd[2] == "unittest":
        return "module", "unittest", list(test_cmd[3:]), first
    if test_cmd[1].endswith(".py"):
        return "script", test_cmd[1], list(test_cmd[2:]), first
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
    """Prepare `ro_dir` for one run of a unittest-style command; None when it is not one."""
    split = split_unittest(test_cmd)
    if split is None:
        return None
    mode, target, args, named = split
    # A fix to Django's own test runner makes the runner's code the patch's: `reduced`.
    changed = runners.prepare_plain(
        ro_dir, RUNNER, layout, tree, pristine, protected, FRAMEWORK_DIRS
    )
    argv = [
        runners.interpreter(named, python),
        "-c",
        runners.boot(layout, RUNNER),
        mode,
        target,
        *args,
    ]
    level = "reduced" if changed else ""
    canaries, labels = plant_canaries(tree, target, args)
    key, setup = runners.setup(
        layout, canaries.files, level=level, memory_modules=memory_modules, labels=labels
    )
    return Plan(argv, {}, key, setup, {}, canaries, None, level)


def _canary_place(tree: Path, target: str, args: Sequence[str]) -> tuple[str, str] | None:
    """(directory in the tree, its dotted name) of the package of the first test label.

    A label is resolved from the script's directory (Django's `runtests.py`) or
    from the tree's root, the deepest package of it that is a directory.
    """
    script_dir = os.path.dirname(os.path.normpath(target))
    for arg in args:
        if arg.startswith("-") or "/" in arg or not arg.replace(".", "").replace("_", "").isalnum():
            continue
        parts = arg.split(".")
        for base in (script_dir, ""):
            for k in range(len(parts), 0, -1):
                rel = os.path.join(base, *parts[:k])
                path = tree / rel
                if path.is_dir() and not path.is_symlink():
                    return rel, ".".join(parts[:k])
    return None


def plant_canaries(tree: Path, target: str, args: Sequence[str]) -> tuple[Canaries, list[str]]:
    """One unittest canary module beside the first label's tests: (the canaries, the label
    the runner adds to the script's arguments, in its own process)."""
    place = _canary_place(tree, target, args)
    if place is None:
        return Canaries((), (), ()), []
    directory, package = place
    words = canary_words(tree, directory)
    taken = {p.stem.removeprefix("test_") for p in (tree / directory).glob("*.py")}
    module = "test_" + canary_name(words, taken)
    names: set[str] = set()
    passing, failing = canary_name(words, names), canary_name(words, names)
    cls = "".join(w.capitalize() for w in canary_name(words, names).split("_")) + "Tests"
    rel = f"{directory}/{module}.py"
    (tree / rel).write_text(canary_case_source(cls, passing, failing))
    label = f"{package}.{module}"
    return (
        Canaries((rel,), (f"{label}.{cls}.test_{passing}",), (f"{label}.{cls}.test_{failing}",)),
        [label],
    )


def without_canaries(log: Mapping[str, str], canaries: Canaries) -> dict[str, str]:
    """The log's outcomes less the canaries', however the log names them: Django's parser
    records a test both as `test_x (module.Class.test_x)` and by its bare method name."""
    ids = canaries.ids
    methods = {test_id.rsplit(".", 1)[-1] for test_id in ids}
    return {k: v for k, v in log.items() if unittest_id(k) not in ids and k not in methods}


def unittest_id(log_id: str) -> str | None:
    """The unittest id ("pkg.mod.Class.test_x") of a test as its log names it, when it can tell."""
    match = _LOG_ID.match(log_id)
    if match is None:
        return None
    name, where = match.group("name"), match.group("where")
    return where if where.endswith(f".{name}") else f"{where}.{name}"


def disagreement(
    log: Mapping[str, str],
    channel: Channel,
    exit_code: int | None,
    canaries: Canaries = Canaries((), (), ()),
    tree: Path | None = None,
    test_cmd: Sequence[str] = (),
) -> str:
    """Why the log cannot describe the run the runner saw; "" when nothing says so.

    A test the log reports passed must have passed on the channel; a run
    that exited 0 must have been seen through to its end; and where the log
    claims any pass, the canaries must have come out as planted. A log line
    that names a test by its docstring's first line (`tree` given) stands for
    the channel's tests with that description: one of them must have passed.
    A description that matches no test the channel names is not checked.
    """
    described: dict[str, set[str]] = {}
    if tree is not None and any(unittest_id(log_id) is None for log_id in log):
        split = split_unittest(test_cmd)
        script_dir = os.path.dirname(os.path.normpath(split[1])) if split else ""
        bases = [script_dir, ""] if script_dir else [""]
        described = unittest_docs.descriptions(tree, bases, channel.outcomes)

    def seen(log_id: str) -> str | None:
        uid = unittest_id(log_id)
        if uid is not None:
            return channel.outcomes.get(uid)
        tests = described.get(log_id.strip())
        if not tests:
            return PASSED  # names no test the channel can name: no check
        outcomes = [channel.outcomes.get(t) for t in sorted(tests)]
        return PASSED if PASSED in outcomes else next((o for o in outcomes if o), None)

    return log_disagreement(log, channel, exit_code, canaries, seen)


def log_disagreement(
    log: Mapping[str, str],
    channel: Channel,
    exit_code: int | None,
    canaries: Canaries,
    seen: Callable[[str], str | None],
) -> str:
    """What a plain runner's log and its channel disagree on; "" when nothing.

    `seen(log_id)` is the channel's outcome of the test the log names (PASSED
    where the log's name maps to no test the channel can name).
    """
    if channel.forged:
        return f"its report channel carried {channel.forged[0]}"
    if not channel.started:
        return "the runner never started" if log else ""
    if exit_code == 0 and not channel.finished:
        return "the process exited 0 but the runner never finished"
    if channel.finished and exit_code is not None and channel.exit != exit_code:
        return f"the process exited {exit_code} but the runner finished with {channel.exit}"
    for log_id, outcome in log.items():
        outcome_seen = seen(log_id)
        if outcome == PASSED and outcome_seen != PASSED:
            saw = outcome_seen or "not run"
            return f"the log reports {log_id} passed but the runner saw it {saw}"
    if any(outcome == PASSED for outcome in log.values()):
        wrong = [t for t in canaries.must_pass if channel.outcomes.get(t) != PASSED]
        wrong += [t for t in canaries.must_fail if channel.outcomes.get(t) != FAILED]
        if wrong:
            return f"tests passed but the canary {wrong[0]} did not come out as planted"
    return ""
