"""SWE-bench Verified records compiled to contracts.

A record (`swebench_records`: one row of the HuggingFace
`princeton-nlp/SWE-bench_Verified` dataset, exported to a local JSON or JSONL
file) becomes a `Contract`:

- the pristine tree is `checkout_root / instance_id`, a checkout of `repo` at
  `base_commit` that the operator prepared beforehand (`swebench_checkout`).
  Nothing here fetches a dataset, a repository or an image. The contract's
  digest covers the checkout's files as they are (`tree_digest`), so an
  uncommitted change or an in-place build is part of what is graded, never
  hidden behind the commit id;
- the prompt is the issue text, the reference patch is the gold patch;
- the dataset's `test_patch` is the contract's `test_patch`: the pipeline
  applies it after restoring every protected path, so the tests that grade
  are the dataset's whatever the candidate patch did to them. Every path the
  test patch touches is protected.

How it is run and graded
------------------------
An instance whose repository and version have an official specification
(`swebench_harness`, generated from the official `swebench` package; or the
record's own `test_cmd` and `log_parser` fields) runs exactly the official
test command: Django's `tests/runtests.py`, SymPy's `bin/test`, the pytest
variants, with the official options and test directives. Its verdict is the
official one: the repository's log parser over the run's captured output,
then the official resolution (FULL is resolved). jouled's stricter grading
(exit status, every id must pass, XFAIL is not a pass) is recorded beside it,
and only a forged run (`tampered`) or a timeout changes the status.

pytest commands still go through the daemon's pytest runner (pristine
configuration, no plugin autoloading, canaries, an authenticated report);
for pytest-dev/pytest, whose test runner is the code under test, a patch that
changes pytest's own source makes that run `reduced`;
Django's and SymPy's commands run as they are through the daemon's unittest
and SymPy runners (canaries, an authenticated report the log must agree
with); the official parser reads the log of every one.

The interpreter is the instance's official image, with the opt-in container
runtime where the host has it, else its environment: `ROOT/<instance_id>` or
`ROOT/<owner>__<name>__<version>` under `--swebench-envs`, built by
`jouled swebench prepare` (see `swebench_env`). A runner other than pytest
needs one; a pytest instance without one runs under the daemon's own
interpreter (which then must have the repository's dependencies), but only
when the daemon has neither environments nor images configured.

An instance with no specification is graded the way jouled grades its own
tasks: pytest on the test modules the test patch touches, node ids compared
with FAIL_TO_PASS and PASS_TO_PASS as the dataset spells them
(`swebench_ids`), exit status 1 left to the ids. Ids that are not pytest
node ids cannot be graded that way and are refused.

Differences from the official harness that remain
-------------------------------------------------
- Patches apply exactly (hunks may move, context must match); the official
  harness falls back to `patch --fuzz`. Binary diffs are refused.
- Besides the test patch's files, every conftest.py, pytest.ini, tox.ini,
  setup.cfg and the root pyproject.toml are restored to their pristine bytes
  before grading, so a candidate (or gold) change to one of them is undone.
- The log is at most the sandbox's kept tail (1 MiB); a longer run's early
  lines are not parsed (the result says `truncated`).
- Environments are virtualenvs built from the specification (or, with the
  opt-in container runtime, the official images where the host has them):
  `pre_install` steps (system packages) are the host's, and conda
  specifications are not built. The install step is not re-run before the
  tests, so compiled extensions are not rebuilt for a patch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from jouled.contracts import swebench_env
from jouled.contracts import swebench_harness as harness
from jouled.contracts.contract import (
    IGNORED_NAMES,
    Contract,
    GradingPolicy,
    Runtime,
    iter_tree,
)
from jouled.contracts.swebench_checkout import prepared_checkout
from jouled.contracts.swebench_ids import match_dataset_ids
from jouled.contracts.swebench_records import TEST_LISTS, SweBenchRecord
from jouled.errors import PatchError, TaskError
from jouled.patch import Patch, parse_patch

__all__ = [
    "DEFAULT_SUITE",
    "DEFAULT_TIMEOUT_S",
    "Images",
    "TreeDigests",
    "Unsupported",
    "contract_digest",
    "modules_to_run",
    "to_contract",
    "tree_digest",
    "unsupported_reason",
]

DEFAULT_SUITE = "swebench-verified"
DEFAULT_TIMEOUT_S = 1800
LICENSE = "MIT (dataset); repository license applies to code"

# Same bound as the pipeline's for trusted patches: test and gold patches come
# with the dataset, not from a solver.
TRUSTED_PATCH_BYTES = 64 << 20

# Files a test patch may touch that are not test modules to hand to pytest:
# pytest loads conftest.py itself, and naming a package's __init__.py would
# collect the package rather than a module.
_NOT_TEST_MODULES = ("conftest.py", "__init__.py")

# Real repositories (numpy- and BLAS-heavy ones) need more than the 4 GiB default.
MEMORY_BYTES = 16 << 30


# -- contracts ------------------------------------------------------------------------


class Unsupported(TaskError):
    """An instance jouled cannot grade here; `code` says why, for coverage reports."""

    def __init__(self, code: str, message: str, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.code = code


# Why an instance is not graded, as coverage reports name it.
NO_ENVIRONMENT = "no-environment"
UNSUPPORTED_RUNNER = "unsupported-runner"
NO_CHECKOUT = "no-checkout"
BAD_RECORD = "bad-record"


def _record_spec(record: SweBenchRecord) -> harness.Spec | None:
    """The official specification: the record's own fields over the generated table."""
    spec = harness.spec_for(record.repo, record.version)
    parser = record.log_parser.removeprefix("parse_log_") if record.log_parser else None
    if record.test_cmd is None and parser is None:
        return spec
    if parser is not None and parser not in harness.PARSERS:
        return None
    base = spec or harness.Spec(
        repo=record.repo, version=record.version or "", python="", test_cmd="", parser=""
    )
    merged = dataclasses.replace(
        base, test_cmd=record.test_cmd or base.test_cmd, parser=parser or base.parser
    )
    # Both a command and a parser, or no specification at all.
    return merged if merged.test_cmd and merged.parser in harness.PARSERS else None


def _pytest_ids(record: SweBenchRecord) -> str | None:
    for key in TEST_LISTS:
        for test_id in getattr(record, key):
            head, sep, rest = test_id.partition("::")
            if not sep or not head.strip() or not rest:
                return (
                    f"{key} id {test_id!r} is not a pytest node id and {record.repo} "
                    f"{record.version or '(no version)'} has no official test specification"
                )
    return None


def unsupported_reason(record: SweBenchRecord, environments: Path | None = None) -> str | None:
    """Why jouled cannot grade this instance here, or None when it can.

    An instance with an official specification (by repository and version, or
    its record's own `test_cmd` and `log_parser`) runs its repository's own
    test command; a runner other than pytest (Django, SymPy) needs a prepared
    environment. One without a specification is graded as pytest node ids,
    which its ids must then be.
    """
    try:
        _plan(record, environments)
    except Unsupported as err:
        return err.message
    return None


@dataclass(frozen=True)
class Images:
    """The opt-in container runtime: `find` names an instance's image when the host has it."""

    engine: str  # "docker" or "podman"
    find: Callable[[str], str | None]  # instance id -> image, None when it is not here


@dataclass(frozen=True)
class _Plan:
    spec: harness.Spec | None
    runtime: Runtime | None


def _is_pytest(argv: Sequence[str]) -> bool:
    if not argv:
        return False
    if os.path.basename(argv[0]) in ("pytest", "py.test"):
        return True
    return len(argv) > 2 and argv[0].startswith("python") and argv[1:3] == ["-m", "pytest"]


def _plan(record: SweBenchRecord, environments: Path | None, images: Images | None = None) -> _Plan:
    spec = _record_spec(record)
    if spec is None:
        reason = _pytest_ids(record)
        if reason is not None:
            raise Unsupported(UNSUPPORTED_RUNNER, reason)
    runtime = None
    if spec is not None and images is not None:
        image = images.find(record.instance_id)
        if image is not None:
            name = f"{images.engine}:{image}"
            runtime = Runtime(name, "python", (), engine=images.engine, image=image)
    if runtime is None and environments is not None:
        found = swebench_env.find(environments, record.instance_id, record.repo, record.version)
        runtime = found.runtime() if found is not None else None
    if spec is not None and runtime is None:
        argv, _ = harness.test_command(spec, "")
        in_process = _is_pytest(list(argv)) and record.repo != "pytest-dev/pytest"
        # Only a daemon configured with neither environments nor images falls back to
        # its own interpreter, and only for a pytest command it can run in-process.
        if not in_process or environments is not None or images is not None:
            names = " or ".join(
                swebench_env.candidates(record.instance_id, record.repo, record.version)
            )
            where = environments or "--swebench-envs"
            no_image = f"; no {images.engine} image for it here" if images is not None else ""
            raise Unsupported(
                NO_ENVIRONMENT,
                f"{record.repo} {spec.version} runs `{spec.test_cmd}` in the instance's "
                f"environment, and there is none ({where}/{names}){no_image}",
                hint=f"jouled swebench prepare --dataset FILE --instance {record.instance_id}",
            )
    return _Plan(spec, runtime)


def _parse_trusted(record: SweBenchRecord, key: str) -> Patch:
    raw = getattr(record, key).encode("utf-8", errors="surrogateescape")
    try:
        return parse_patch(raw, max_bytes=TRUSTED_PATCH_BYTES)
    except PatchError as err:
        raise TaskError(
            f"{record.instance_id}: the dataset's {key} cannot be applied by jouled: {err.message}",
            hint=err.hint or "grade this instance with the official SWE-bench Docker harness",
        ) from None


def modules_to_run(test_patch: Patch) -> tuple[str, ...]:
    """The Python test modules a test patch leaves in the tree, which the check runs."""
    return tuple(
        sorted(
            f.new_path
            for f in test_patch.files
            if f.new_path is not None
            and f.new_path.endswith(".py")
            and f.new_path.rsplit("/", 1)[-1] not in _NOT_TEST_MODULES
        )
    )


def _frame(h: Any, name: str, value: bytes) -> None:
    label = name.encode()
    h.update(b"%d:%s%d:" % (len(label), label, len(value)))
    h.update(value)


def _id_list(ids: Sequence[str]) -> bytes:
    return json.dumps(list(ids), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def tree_digest(tree: Path) -> str:
    """SHA-256 over a checkout's files as they are: what every attempt is seeded from.

    The hash input is the tag `jouled-tree-v1\\n` followed by, for every file
    `iter_tree` lists (sorted by path; `.git` and caches left out), a frame for
    its path and a frame for its content: `file` and its bytes, or `link` and
    its target. A checkout changed after its commit (a dirty tree, an in-place
    build) digests as it is.
    """
    h = hashlib.sha256(b"jouled-tree-v1\n")
    for rel, path in iter_tree(tree):
        _frame(h, "path", rel.encode("utf-8", errors="surrogateescape"))
        if path.is_symlink():
            _frame(h, "link", os.readlink(path).encode("utf-8", errors="surrogateescape"))
        else:
            _frame(h, "file", path.read_bytes())
    return h.hexdigest()


def _stat_signature(tree: Path) -> str:
    """SHA-256 over what `lstat` says of every file `iter_tree` would list.

    Path, size, mode, inode, and modification and change times: any write to a
    file's content moves its change time, which no tool can set back.
    """
    h = hashlib.sha256(b"jouled-tree-stat-v1\n")
    rows: list[str] = []
    stack = [str(tree)]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name in IGNORED_NAMES or entry.name.endswith(".pyc"):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                if not (entry.is_symlink() or entry.is_file(follow_symlinks=False)):
                    continue
                st = entry.stat(follow_symlinks=False)
                rel = os.path.relpath(entry.path, tree)
                rows.append(
                    f"{rel}\0{st.st_size}\0{st.st_mode}\0{st.st_ino}"
                    f"\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
                )
    for row in sorted(rows):
        h.update(row.encode("utf-8", errors="surrogateescape") + b"\n")
    return h.hexdigest()


class TreeDigests:
    """`tree_digest` remembered per checkout, recomputed when any file's `lstat` changed.

    Hashing a large checkout takes a second; checking that none of its files
    changed takes a fraction of that, so a daemon restoring many
    registrations at start hashes only the checkouts that changed. With a
    `path`, what is remembered is kept there (a JSON file) across restarts.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._known: dict[str, dict[str, str]] = {}
        if path is not None and path.is_file():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(loaded, dict):
                    self._known = {
                        k: v
                        for k, v in loaded.items()
                        if isinstance(v, dict) and {"stat", "digest"} <= set(v)
                    }
            except (OSError, ValueError):
                self._known = {}

    def digest(self, tree: Path) -> str:
        key = str(tree.resolve())
        signature = _stat_signature(tree)
        with self._lock:
            known = self._known.get(key)
            if known is not None and known["stat"] == signature:
                return known["digest"]
        digest = tree_digest(tree)
        if _stat_signature(tree) != signature:  # changed while hashed: trust neither
            return tree_digest(tree)
        with self._lock:
            self._known[key] = {"stat": signature, "digest": digest}
            self._save()
        return digest

    def _save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self._known, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)


def contract_digest(
    record: SweBenchRecord,
    *,
    tree: str = "",
    test_cmd: Sequence[str] = (),
    rules: str = "",
    runtime: str = "",
) -> str:
    """SHA-256 over everything that defines what is graded.

    The hash input is the tag `jouled-swebench-v2\\n` followed by, in this
    order, one frame per field: `<len(name)>:<name><len(value)>:<value>` with
    lengths in decimal bytes and values UTF-8: instance_id, base_commit (lower
    case hex), test_patch, patch (the gold patch), FAIL_TO_PASS and
    PASS_TO_PASS (each a compact JSON array of its ids, in dataset order,
    non-ASCII unescaped), tree (`tree_digest` of the checkout), test_cmd (a
    compact JSON array), rules (whose verdict: `strict`, or the official
    rules and log parser) and runtime (the environment's name, `daemon` for
    the daemon's interpreter). Length prefixes keep field boundaries
    unambiguous.
    """
    h = hashlib.sha256(b"jouled-swebench-v2\n")
    _frame(h, "instance_id", record.instance_id.encode("utf-8"))
    _frame(h, "base_commit", record.base_commit.lower().encode("ascii"))
    _frame(h, "test_patch", record.test_patch.encode("utf-8", errors="surrogateescape"))
    _frame(h, "patch", record.patch.encode("utf-8", errors="surrogateescape"))
    _frame(h, "FAIL_TO_PASS", _id_list(record.FAIL_TO_PASS))
    _frame(h, "PASS_TO_PASS", _id_list(record.PASS_TO_PASS))
    _frame(h, "tree", tree.encode("ascii"))
    _frame(h, "test_cmd", _id_list(test_cmd))
    _frame(h, "rules", rules.encode("utf-8"))
    _frame(h, "runtime", runtime.encode("utf-8"))
    return h.hexdigest()


def to_contract(
    record: SweBenchRecord,
    checkout_root: Path,
    *,
    suite: str = DEFAULT_SUITE,
    timeout_s: int = DEFAULT_TIMEOUT_S,
    environments: Path | None = None,
    trees: TreeDigests | None = None,
    images: Images | None = None,
) -> Contract:
    """The contract that grades patches for `record` against its prepared checkout.

    With an official specification, the test command is the repository's own
    and the verdict is the official one from the run's log (the strict
    grading recorded beside it); `environments` is where prepared
    environments are looked up. Without one, pytest node ids are graded
    strictly under the daemon's interpreter. Raises `Unsupported` (a
    TaskError with a `code`) for an instance that cannot be graded here.
    `trees` remembers checkout digests between calls; with `images` (the
    opt-in container runtime), an instance whose official image the host has
    runs in it, ahead of any environment.
    """
    if not suite or "/" in suite:
        raise TaskError(f"suite {suite!r} must be a non-empty name without '/'")
    if timeout_s <= 0:
        raise TaskError(f"timeout_s must be positive, got {timeout_s}")
    plan = _plan(record, environments, images)
    if not record.FAIL_TO_PASS:
        raise Unsupported(
            BAD_RECORD, f"{record.instance_id}: FAIL_TO_PASS is empty, so no test shows the fix"
        )
    try:
        test_patch = _parse_trusted(record, "test_patch")
        _parse_trusted(record, "patch")
    except TaskError as err:
        raise Unsupported(BAD_RECORD, err.message, err.hint) from None
    env: dict[str, str] = {}
    if plan.spec is not None:
        test_cmd, env = harness.test_command(plan.spec, record.test_patch)
        if len(test_cmd) == len(harness.test_command(plan.spec, "")[0]):
            raise Unsupported(
                BAD_RECORD,
                f"{record.instance_id}: the test_patch names no test to run "
                f"({', '.join(test_patch.paths)})",
            )
        grading = _official_policy(plan.spec, record)
        if plan.runtime is not None and plan.runtime.image:  # run as it is, read by the parser
            grading = dataclasses.replace(grading, plain=True, match_ids=None)
        rules = f"{harness.specs_source()}/{plan.spec.parser}"
    else:
        modules = modules_to_run(test_patch)
        if not modules:
            raise Unsupported(
                BAD_RECORD,
                f"{record.instance_id}: the test_patch touches no Python test module "
                f"({', '.join(test_patch.paths)}), so there is nothing to run",
                hint="grade it with the official SWE-bench Docker harness",
            )
        test_cmd, grading, rules = ("python", "-m", "pytest", *modules), GRADING, "strict"
    try:
        tree = prepared_checkout(record, checkout_root)
    except TaskError as err:
        raise Unsupported(NO_CHECKOUT, err.message, err.hint) from None
    runtime = plan.runtime
    if runtime is not None and env:
        runtime = dataclasses.replace(runtime, env={**runtime.env, **env})
    elif env:
        runtime = Runtime("daemon", sys.executable, (), env)
    return Contract(
        task_id=f"{suite}/{record.instance_id}",
        suite=suite,
        name=record.instance_id,
        kind="swebench",
        prompt=record.problem_statement,
        digest=contract_digest(
            record,
            tree=(trees or TreeDigests()).digest(tree),
            test_cmd=test_cmd,
            rules=rules,
            runtime=runtime.name if runtime is not None else "daemon",
        ),
        pristine=tree,
        test_cmd=tuple(test_cmd),
        test_files=test_patch.paths,
        timeout_s=timeout_s,
        fail_to_pass=record.FAIL_TO_PASS,
        pass_to_pass=record.PASS_TO_PASS,
        reference_patch=record.patch.encode("utf-8", errors="surrogateescape"),
        test_patch=record.test_patch.encode("utf-8", errors="surrogateescape"),
        source=f"SWE-bench Verified {record.instance_id}",
        license=LICENSE,
        grading=grading,
        runtime=runtime,
    )


# Repositories whose official test command one of the daemon's own runners can carry:
# Django's tests/runtests.py (its unittest runner) and SymPy's bin/test.
PLAIN_RUNNERS = {"django/django": "unittest", "sympy/sympy": "sympy"}
# Repositories that are the test framework their own tests run under: the directories
# of its source, whose changes the pytest runner counts as the framework's (`reduced`).
FRAMEWORK_DIRS = {"pytest-dev/pytest": ("src/_pytest/", "src/pytest/", "_pytest/", "pytest/")}


def _official_policy(spec: harness.Spec, record: SweBenchRecord) -> GradingPolicy:
    """Grading by the official rules: the repository's own log parser and resolution.

    pytest commands run through the daemon's runner (canaries, an authenticated
    report beside the log), pytest's own too (its changed source counted as the
    framework's); the others run as they are, Django's and SymPy's through the
    daemon's runners for them.
    """
    argv, _ = harness.test_command(spec, "")
    plain = not _is_pytest(list(argv))
    return GradingPolicy(
        match_ids=None if plain else match_dataset_ids,
        failing_exit_judged_by_ids=True,
        memory_bytes=MEMORY_BYTES,
        plain=plain,
        runner=PLAIN_RUNNERS.get(record.repo, ""),
        framework=FRAMEWORK_DIRS.get(record.repo, ()),
        parse_output=partial(harness.outcomes, spec.parser),
        verdict=partial(harness.official_verdict, spec.parser),
    )


# How SWE-bench contracts are graded: ids as the dataset spells them, and the
# official harness's indifference to pytest's "some test failed" status.
GRADING = GradingPolicy(
    match_ids=match_dataset_ids,
    failing_exit_judged_by_ids=True,
    memory_bytes=MEMORY_BYTES,
)
