"""How the daemon runs a task's pytest command, so that the patch cannot steer it.

A task writes its test command the way a person would (`python -m pytest
tests`); `plan` turns it into a run of the daemon's own runner
(`jouled_pytest.py`, shown read-only in the sandbox) with:

- plugin autoloading off (`PYTEST_DISABLE_PLUGIN_AUTOLOAD`): no `pytest11`
  entry point from a dist-info the patch adds; with `installed_plugins` (a test
  environment of the task's own, shown read-only) the runner loads the entry
  points of that environment's distributions itself, as autoloading would;
- an explicit configuration (`-c`): the task's pristine pytest configuration,
  found by pytest's own discovery order on the restored tree and shown
  read-only over itself, so no `pytest.toml`, `pytest.ini`, `tox.ini`,
  `setup.cfg` or `pyproject.toml` the patch adds anywhere is read, and the
  one in force cannot change while the tests run; with none, an empty one
  and the tree root as rootdir;
- `-s -P` for the interpreter: no user site-packages, and the tree goes on
  sys.path only once pytest and the runner are loaded; no bytecode in the
  tree (`remove_bytecode`), so every module of the tree runs from its source;
- outcomes from the runner's authenticated channel, never from files or
  output the tests can write;
- canary tests planted fresh each run beside the real tests: some must pass
  and some must fail, so a run whose report was forced comes out `tampered`.

What a patch may not add at all (modules shadowing the standard library or
the runner, bytecode) is checked by `guard`.
"""

from __future__ import annotations

import configparser
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jouled.pipeline import runners
from jouled.pipeline.sandbox import Layout
from jouled.pipeline.testreport import ERROR, FAILED, PASSED, SKIPPED, record_outcome

RUNNER = Path(__file__).with_name("jouled_pytest.py")
_PYTEST_SCRIPTS = frozenset({"pytest", "py.test"})
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*)?")
_PYTHON_OPTS_WITH_ARG = frozenset({"-W", "-X", "--check-hash-based-pycs"})
_PORTABLE_PYTHON = frozenset({"python", "python3"})
# pytest's configuration files in its own discovery order (pytest 9).
CONFIG_NAMES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
MAX_CANARY_DIRS = 3


# -- the command --------------------------------------------------------------------------


def is_python(program: str) -> bool:
    return (
        program == sys.executable or _PYTHON_NAME.fullmatch(os.path.basename(program)) is not None
    )


def split_pytest(test_cmd: Sequence[str]) -> tuple[str, list[str], list[str]] | None:
    """(mode, interpreter options, pytest args) of a pytest command; None for anything else.

    Mode "script" is `pytest ...` / `py.test ...` (the working directory is not
    on sys.path); "module" is `<python> [opts] -m pytest ...` (it is).
    """
    if not test_cmd:
        return None
    if os.path.basename(test_cmd[0]) in _PYTEST_SCRIPTS:
        return "script", [], list(test_cmd[1:])
    if not is_python(test_cmd[0]):
        return None
    opts: list[str] = []
    i = 1
    while i < len(test_cmd):
        arg = test_cmd[i]
        if arg == "-m":
            if i + 1 < len(test_cmd) and test_cmd[i + 1] == "pytest":
                return "module", opts, list(test_cmd[i + 2 :])
            return None
        if arg == "-mpytest":
            return "module", opts, list(test_cmd[i + 1 :])
        if not arg.startswith("-") or arg in ("-", "-c") or arg.startswith("-c"):
            return None  # a script, stdin or -c code: not pytest as a module
        opts.append(arg)
        if arg in _PYTHON_OPTS_WITH_ARG and i + 1 < len(test_cmd):
            opts.append(test_cmd[i + 1])
            i += 1
        i += 1
    return None


def is_pytest(test_cmd: Sequence[str]) -> bool:
    return split_pytest(test_cmd) is not None


def plain_argv(test_cmd: Sequence[str], python: str = sys.executable) -> list[str]:
    """A command that is not pytest: a leading `python`/`python3` is the daemon's interpreter."""
    if not test_cmd:
        raise ValueError("empty test command")
    program = python if test_cmd[0] in _PORTABLE_PYTHON else test_cmd[0]
    return [program, *test_cmd[1:]]


def _positional(args: Sequence[str]) -> list[str]:
    """The path arguments of a pytest command (before any `--`, plus all after it)."""
    out: list[str] = []
    it = iter(args)
    for arg in it:
        if arg == "--":
            out.extend(it)
            break
        if not arg.startswith("-"):
            out.append(arg)
    return out


# -- configuration ------------------------------------------------------------------------


def _is_config(path: Path) -> bool:
    """Whether pytest would take `path` as its configuration file (by name and content)."""
    name = path.name
    if name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"):
        return True
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    if name == "pyproject.toml":
        try:
            tool = tomllib.loads(text).get("tool", {})
        except tomllib.TOMLDecodeError:
            return False
        return isinstance(tool, dict) and "pytest" in tool
    section = "pytest" if name == "tox.ini" else "tool:pytest"
    return re.search(rf"^\[{re.escape(section)}\]", text, re.MULTILINE) is not None


def find_config(tree: Path, args: Sequence[str]) -> str | None:
    """The configuration pytest would read for `args` in `tree`, relative to it.

    pytest looks upward from each path argument (the working directory when
    there is none) for the first file of CONFIG_NAMES that configures it; a
    pyproject.toml that does not is the fallback. The search stops at the tree.
    """
    root = tree.resolve()
    starts = [root / a for a in _positional(args)] or [root]
    fallback: str | None = None
    for start in starts:
        start = start if start.is_dir() else start.parent
        try:
            start.resolve().relative_to(root)
        except (ValueError, OSError):
            continue
        for base in (start, *start.parents):
            for name in CONFIG_NAMES:
                candidate = base / name
                if candidate.is_file() and not candidate.is_symlink():
                    rel = candidate.relative_to(root).as_posix()
                    if _is_config(candidate):
                        return rel
                    if name == "pyproject.toml" and fallback is None:
                        fallback = rel
            if base == root:
                break
    return fallback


def _function_prefix(config: Path | None) -> str:
    """A prefix the configuration's `python_functions` collects ("test_" by default)."""
    if config is None:
        return "test_"
    value: object = None
    try:
        if config.suffix == ".toml":
            document = tomllib.loads(config.read_text())
            table = document.get("pytest") or document.get("tool", {}).get("pytest", {})
            value = table.get("python_functions") or table.get("ini_options", {}).get(
                "python_functions"
            )
        else:
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(config.read_text())
            for section in ("pytest", "tool:pytest"):
                if parser.has_option(section, "python_functions"):
                    value = parser.get(section, "python_functions")
    except (OSError, ValueError, tomllib.TOMLDecodeError, configparser.Error, AttributeError):
        return "test_"
    patterns = value.split() if isinstance(value, str) else value
    for pattern in patterns if isinstance(patterns, list) else []:
        if isinstance(pattern, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\*", pattern):
            return pattern[:-1]
    return "test_"


# -- canaries -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Canaries:
    """Tests the patch could not know, planted for one run.

    They are written like the tests beside them (no marker, no telling
    name), handed to the runner on its setup descriptor (never on a command
    line or in a file the run can read), and collected like any path.
    """

    files: tuple[str, ...]  # relative to the tree
    must_pass: tuple[str, ...]  # node ids
    must_fail: tuple[str, ...]

    @property
    def ids(self) -> frozenset[str]:
        return frozenset((*self.must_pass, *self.must_fail))


# Words tests are named with; a canary's names are drawn from these and the tree's own.
_WORDS = (
    "basic",
    "empty",
    "single",
    "many",
    "order",
    "repeat",
    "default",
    "limits",
    "values",
    "roundtrip",
    "mixed",
    "nested",
    "unicode",
    "large",
    "small",
    "zero",
    "negative",
    "copy",
    "equality",
    "update",
    "reset",
    "merge",
    "split",
    "lookup",
    "insert",
    "remove",
    "sorted",
    "parse",
    "format",
    "edge",
    "cases",
    "regression",
    "types",
    "length",
    "bounds",
    "keys",
)

# Shapes of a plain test: (passing body, failing body). Each holds for the values drawn.
_SHAPES = (
    (
        "    values = [{a}, {b}, {c}]\n    assert sorted(values)[1] == {median}\n",
        "    values = [{a}, {b}, {c}]\n    assert max(values) - min(values) == {wrong_span}\n",
    ),
    (
        "    data = dict.fromkeys(range({n}), {a})\n    assert sum(data.values()) == {total}\n",
        "    data = dict.fromkeys(range({n}), {a})\n    assert len(data) == {wrong_n}\n",
    ),
    (
        '    text = "{word}" * {n}\n    assert text.count("{word}") == {n}\n',
        '    text = "{word}" * {n}\n    assert len(text) == {wrong_len}\n',
    ),
)


def canary_words(tree: Path, directory: str) -> list[str]:
    """Words from the names of the tests already in `directory`, then the stock ones."""
    found: list[str] = []
    for path in sorted((tree / directory).glob("test_*.py"))[:50]:
        found += [w for w in path.stem.split("_")[1:] if w.isidentifier() and w.isascii()]
    return list(dict.fromkeys([*found, *_WORDS]))


def canary_name(words: Sequence[str], taken: set[str], parts: int = 2) -> str:
    while True:
        name = "_".join(secrets.choice(words) for _ in range(parts))
        if name not in taken:
            taken.add(name)
            return name


def canary_source(prefix: str, passing: str, failing: str) -> str:
    good, bad = secrets.choice(_SHAPES)
    a, b, c = (secrets.randbelow(900) + 100 for _ in range(3))
    n = secrets.randbelow(7) + 3
    word = secrets.choice(("ab", "xy", "key", "node", "row"))
    values = {
        "a": a,
        "b": b,
        "c": c,
        "n": n,
        "word": word,
        "median": sorted([a, b, c])[1],
        "wrong_span": max(a, b, c) - min(a, b, c) + 1 + secrets.randbelow(9),
        "total": n * a,
        "wrong_n": n + 1 + secrets.randbelow(5),
        "wrong_len": len(word) * n + 1 + secrets.randbelow(5),
    }
    tests = [(passing, good), (failing, bad)]
    secrets.SystemRandom().shuffle(tests)
    return "\n\n".join(f"def {prefix}{name}():\n" + body.format(**values) for name, body in tests)


def canary_case_source(cls: str, passing: str, failing: str) -> str:
    """A unittest module of one test case with the two canaries as its methods."""
    plain = canary_source("test_", passing, failing)
    lines = []
    for line in plain.splitlines():
        if line.startswith("def "):
            line = line.replace("():", "(self):", 1)
        lines.append(f"    {line}" if line else "")
    return f"import unittest\n\n\nclass {cls}(unittest.TestCase):\n" + "\n".join(lines) + "\n"


def _canary_dirs(tree: Path, args: Sequence[str], expected: Sequence[str]) -> list[str]:
    """Where the real tests are collected: the directories of the expected ids' files."""
    dirs: list[str] = []
    for test_id in expected:
        file = test_id.split("::", 1)[0]
        if file.endswith(".py"):
            dirs.append(os.path.dirname(file))
    if not dirs:
        for arg in _positional(args):
            path = tree / arg
            dirs.append(arg if path.is_dir() else os.path.dirname(arg))
    unique = list(dict.fromkeys(d.strip("/") for d in dirs))
    return [d for d in unique if (tree / d).is_dir() and not (tree / d).is_symlink()][
        :MAX_CANARY_DIRS
    ] or [""]


def plant_canaries(
    tree: Path, rootdir: str, dirs: Sequence[str], prefix: str = "test_"
) -> Canaries:
    """Write one canary module into each of `dirs` (relative to the tree)."""
    files, must_pass, must_fail = [], [], []
    for d in dirs:
        words = canary_words(tree, d)
        taken = {p.stem for p in (tree / d).glob("*.py")} if (tree / d).is_dir() else set()
        stem = "test_" + canary_name(words, {t.removeprefix("test_") for t in taken})
        rel = f"{d}/{stem}.py" if d else f"{stem}.py"
        names: set[str] = set()
        passing, failing = canary_name(words, names), canary_name(words, names)
        (tree / rel).write_text(canary_source(prefix, passing, failing))
        node = os.path.relpath(tree / rel, tree / rootdir).replace(os.sep, "/")
        files.append(rel)
        must_pass.append(f"{node}::{prefix}{passing}")
        must_fail.append(f"{node}::{prefix}{failing}")
    return Canaries(tuple(files), tuple(must_pass), tuple(must_fail))


def remove_bytecode(tree: Path) -> None:
    """Delete `__pycache__` directories and `.pyc` files: bytecode runs without its source.

    An unchecked hash-based `.pyc` beside a module is loaded in its place
    whatever the source says. Runs write none (PYTHONDONTWRITEBYTECODE).
    """
    for top, dirs, files in os.walk(tree):
        for name in [d for d in dirs if d == "__pycache__"]:
            shutil.rmtree(os.path.join(top, name), ignore_errors=True)
            dirs.remove(name)
        for name in files:
            if name.endswith((".pyc", ".pyo")):
                os.unlink(os.path.join(top, name))


# -- the plan -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    argv: list[str]
    env: dict[str, str]
    key: bytes  # authenticates the runner's channel
    setup: bytes  # what the runner reads on fd 3: the key, then where it runs and the canaries
    overlays: dict[str, Path]  # tree-relative path -> read-only file shown over it
    canaries: Canaries
    config: str | None  # the configuration in force, relative to the tree
    level: str = ""  # a report integrity the run cannot exceed ("": what its interpreter allows)


def plan(
    test_cmd: Sequence[str],
    tree: Path,
    ro_dir: Path,
    layout: Layout,
    expected: Sequence[str] = (),
    pristine: Path | None = None,
    protected: Sequence[str] = (),
    python: str = sys.executable,
    python_version: tuple[int, int] | None = None,
    framework: tuple[str, ...] = (),
    memory_modules: str = "withhold",
    installed_plugins: bool = False,
) -> Plan | None:
    """Prepare `ro_dir` and the workdir for one pytest run; None when not a pytest command.

    The configuration is looked up in the `pristine` tree (the workdir itself
    when there is none) and its pristine bytes are what the run reads. `ro_dir`
    receives the runner and the configuration; the canaries go into the tree
    (after protected paths were restored, so nothing removes them).
    `protected` lists the tree's protected files: the only files of the tree
    whose code a test may run. `python` runs the tests (`python_version`: its
    version, when it is not the daemon's and may be older than 3.11). `framework`:
    the tree's directories that hold pytest itself (pytest-dev/pytest's); a patch
    that changes a file under them makes the run `reduced`. `installed_plugins`:
    load the pytest plugins `python`'s environment installed (see the module's notes).
    """
    split = split_pytest(test_cmd)
    if split is None:
        return None
    mode, opts, args = split
    remove_bytecode(tree)
    runners.install(ro_dir, RUNNER, layout)
    source = pristine or tree
    config = find_config(source, args)
    overlays: dict[str, Path] = {}
    ours: list[str] = ["-p", "no:cacheprovider"]
    if config is not None:
        frozen = ro_dir / "config" / config
        frozen.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / config, frozen)
        overlays[config] = frozen
        ours += ["-c", f"{layout.workdir}/{config}"]
        rootdir = os.path.dirname(config)
    else:
        (ro_dir / "pytest.ini").write_text("[pytest]\n")
        ours += ["-c", f"{layout.ro}/pytest.ini", "--rootdir", layout.workdir]
        ours += ["--confcutdir", layout.workdir]
        rootdir = ""
    prefix = _function_prefix(frozen if config else None)
    canaries = plant_canaries(tree, rootdir, _canary_dirs(tree, args, expected), prefix)
    ours += ["-rA"]
    unchanged = runners.unchanged_sources(tree, pristine)
    changed = runners.framework_changes(tree, unchanged, framework)
    runners.write_trusted(ro_dir, [*protected, *changed], unchanged)
    runners.seal(ro_dir)
    level = "reduced" if changed else ""
    if "--" in args:  # after "--" everything is a path, so ours go before it
        cut = args.index("--")
        args = [*args[:cut], *ours, *args[cut:]]
    else:
        args = [*args, *ours]
    # -P (Python 3.11+) keeps the working directory off sys.path; older interpreters
    # get the same by the boot code dropping it before anything is imported.
    boot = runners.boot(layout, RUNNER)
    interpreter = python if test_cmd[0] in _PORTABLE_PYTHON or mode == "script" else test_cmd[0]
    safe_path = ["-P"] if python_version is None or python_version >= (3, 11) else []
    argv = [interpreter, *opts, "-s", *safe_path, "-c", boot, mode, *args]
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    key, setup = runners.setup(
        layout,
        canaries.files,
        level=level,
        memory_modules=memory_modules,
        plugins=installed_plugins,
    )
    return Plan(argv, env, key, setup, overlays, canaries, config, level)


# -- the channel --------------------------------------------------------------------------


@dataclass
class Channel:
    """What the runner reported, checked record by record."""

    outcomes: dict[str, str] = field(default_factory=dict)
    started: bool = False
    finished: bool = False
    exit: int | None = None  # the exit status pytest reported at session finish
    forged: list[str] = field(default_factory=list)  # why records were refused
    integrity: str = ""  # "monitor" (audit hooks) or "reduced", as the runner started
    # Memory modules (ctypes, cffi) as "NAME (asked for by FILE)": withheld from the run,
    # or loaded where the daemon allows them (the run is then `reduced`)
    withheld: list[str] = field(default_factory=list)
    memory_open: list[str] = field(default_factory=list)
    phases: set[tuple[str, str]] = field(default_factory=set)  # (id, when) reported


def read_channel(data: bytes, key: bytes) -> Channel:
    """Parse and authenticate the runner's records; anything out of place is `forged`."""
    channel = Channel()
    expected_n = 0
    for raw in data.split(b"\n"):
        if not raw:
            continue
        body, _, mac = raw.rpartition(b" ")
        want = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(mac, want):
            channel.forged.append(f"a record with a bad authenticator: {raw[:120]!r}")
            continue
        try:
            record = json.loads(body)
        except ValueError:
            channel.forged.append("an authenticated record that is not JSON")
            continue
        if record.get("n") != expected_n:
            channel.forged.append(f"record {record.get('n')} where {expected_n} was due")
        expected_n += 1
        if channel.finished:
            channel.forged.append("a record after the session finished")
        _apply(channel, record)
    return channel


def _apply(channel: Channel, record: Mapping[str, object]) -> None:
    event = record.get("event")
    test_id = str(record.get("id", ""))
    if event == "start":
        if channel.started:
            channel.forged.append("a second session start")
        channel.started = True
        level = record.get("integrity")
        channel.integrity = level if isinstance(level, str) else ""
        if channel.memory_open and channel.integrity == "monitor":
            channel.integrity = "reduced"  # a memory module the daemon allowed came first
    elif event in ("withheld", "memory"):
        what = f"{record.get('module')} (asked for by {record.get('by')})"
        if event == "withheld":
            channel.withheld.append(what)
        else:
            channel.memory_open.append(what)
            if channel.integrity == "monitor":  # the monitor holds nothing from here on
                channel.integrity = "reduced"
    elif event == "finish":
        channel.finished = True
        exit_code = record.get("exit")
        channel.exit = exit_code if isinstance(exit_code, int) else None
    elif event == "tamper":
        channel.forged.append(f"a test that was tampered with: {record.get('why')} ({test_id})")
    elif event == "collect":
        record_outcome(channel.outcomes, test_id, ERROR)
    elif event == "test":
        when, outcome = record.get("when"), record.get("outcome")
        phase = (test_id, str(when))
        if phase in channel.phases:
            # One test, one report per phase: a second one is somebody else's.
            channel.forged.append(f"a second {when} report for {test_id}")
        channel.phases.add(phase)
        if outcome == "skipped":
            record_outcome(channel.outcomes, test_id, SKIPPED)
        elif outcome == "failed":
            record_outcome(channel.outcomes, test_id, FAILED if when == "call" else ERROR)
        elif outcome == "passed" and when == "call":
            record_outcome(channel.outcomes, test_id, PASSED)


# -- the verdict on a run -----------------------------------------------------------------


def forgery(
    channel: Channel,
    canaries: Canaries,
    exit_code: int | None,
    expected: Sequence[str],
) -> str:
    """Why this run's report cannot be genuine; "" when nothing contradicts it.

    A run claiming success where its planted failures would have shown is
    forged: a must-fail canary that passed, a clean exit status despite one,
    an exit status other than the one pytest reported, or expected tests
    passing while a canary is missing or wrong.
    """
    if channel.forged:
        return f"its report channel carried {channel.forged[0]}"
    outcomes = channel.outcomes
    passed_fail = [t for t in canaries.must_fail if outcomes.get(t) == PASSED]
    if passed_fail:
        return f"a canary planted to fail passed ({passed_fail[0]})"
    ran_fail = [t for t in canaries.must_fail if t in outcomes]
    if exit_code == 0 and ran_fail:
        return "pytest exited 0 although a canary planted to fail failed"
    if channel.finished and exit_code is not None and channel.exit != exit_code:
        return f"the process exited {exit_code} but pytest finished with {channel.exit}"
    if exit_code == 0 and not channel.finished and canaries.must_fail:
        return "the process exited 0 but pytest never finished"
    claims = any(outcomes.get(t) == PASSED for t in expected)
    wrong = [t for t in canaries.must_pass if outcomes.get(t) != PASSED]
    wrong += [t for t in canaries.must_fail if outcomes.get(t) not in (FAILED,)]
    if claims and wrong:
        return f"expected tests passed but the canary {wrong[0]} did not come out as planted"
    return ""


def effective_exit(
    channel: Channel, canaries: Canaries, exit_code: int | None, *, others_may_fail: bool
) -> int | None:
    """The exit status the run would have had without its must-fail canaries.

    pytest exits 1 when any test failed; with the canaries failing as planted,
    1 means "clean" when no other test failed (or other failures are allowed).
    """
    if exit_code != 1:
        return exit_code
    if others_may_fail:
        return 0
    others = [
        t
        for t, o in channel.outcomes.items()
        if o in (FAILED, ERROR) and t not in canaries.must_fail
    ]
    return 1 if others else 0


def without_canaries(outcomes: Mapping[str, str], canaries: Canaries) -> dict[str, str]:
    ids = canaries.ids
    return {t: o for t, o in outcomes.items() if t not in ids}
