"""The evaluation pipeline: seed, baseline, solve, apply, restore, run, grade.

Each phase runs in a fresh workdir seeded from the contract's pristine tree
and is metered separately. The pipeline knows nothing of gRPC or of the
ledger: baselines are looked up and recorded through a `BaselineStore`, and
the caller signs the result body this module returns.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from jouled import __version__
from jouled.contracts.contract import Contract
from jouled.documents.bodies import BaselineBody, ResultBody
from jouled.documents.parts import EnergyWindow, GradeCounts
from jouled.documents.vocabulary import Status
from jouled.errors import (
    NO_SPACE,
    BrokenEnvironmentError,
    DiskFullError,
    JouledError,
    PatchError,
    TaskError,
)
from jouled.meter.metering import Metering, Window
from jouled.meter.window import PhaseEnergy
from jouled.patch import Patch, parse_patch
from jouled.patch_apply import apply_patch
from jouled.patch_diff import diff_trees
from jouled.pipeline import envcheck, guard, provenance, scratch
from jouled.pipeline import solve as command_solver
from jouled.pipeline.check import CheckRunner
from jouled.pipeline.graded_tree import TRUSTED_PATCH_BYTES, parse_trusted, prepare_tree, seed
from jouled.pipeline.limits import Limits, RunResult
from jouled.pipeline.result_fields import (
    EMPTY_SHA256,
    INLINE_IDS,
    audit_flags,
    capture,
    energy_total,
    id_list,
    output_summary,
    run_counts,
    visible_tests,
)
from jouled.pipeline.sandbox import Sandbox
from jouled.pipeline.testreport import Grade, grade
from jouled.pipeline.verdicts import (
    CheckRun,
    Expected,
    derive_expected,
    ended_unrun,
    graded_exit,
    summary,
    unseen_passes,
    verdict_wire,
)
from jouled.solvers import CommandSolver, Solvers

Progress = Callable[[str, str], None]

RESOLVED, UNRESOLVED, TIMEOUT, ERROR, INVALID, TAMPERED = (s.value for s in Status)


def _quiet(phase: str, message: str) -> None:
    pass


class BaselineStore(Protocol):
    def load_baseline(self, contract: Contract) -> Expected | None: ...

    def record_baseline(self, contract: Contract, body: dict[str, Any]) -> int: ...


@dataclass
class Attempt:
    """One (contract, patch, solver identity, run id, rollout) evaluation."""

    contract: Contract
    patch: Patch | None  # None: a daemon-hosted solver produces it
    solver: str
    model: str = ""
    agent: str = ""
    run_id: str = ""
    rollout: int = 0
    claimed: Mapping[str, int] = field(default_factory=dict)
    idempotency_key: str = ""
    attempt_id: str = ""
    output: str = ""  # the tail of the graded run's stdout+stderr, set by `evaluate`
    # Texts whose sha256 the body signs (run output, long id lists), by digest: the
    # daemon stores them before it signs. Set by `evaluate`.
    blobs: dict[str, bytes] = field(default_factory=dict)
    energy: dict[str, dict[str, Any]] = field(default_factory=dict)  # ops metered so far


def default_limits(contract: Contract) -> Limits:
    memory = contract.grading.memory_bytes
    if memory is not None:
        return Limits(timeout_s=contract.timeout_s, memory_bytes=memory)
    return Limits(timeout_s=contract.timeout_s)


class Evaluator(CheckRunner):
    def __init__(
        self,
        metering: Metering,
        baselines: BaselineStore,
        work_root: Path,
        *,
        sandbox_limits: Callable[[Contract], Limits] | None = None,
        sandbox: Sandbox | None = None,
        solvers: Solvers | None = None,
        environ: Mapping[str, str] | None = None,
        min_integrity: str = "none",
        memory_modules: str = "withhold",
        disk_bytes: int = 0,
        disk_floor_bytes: int = 0,
        solver_diff_bytes: int = TRUSTED_PATCH_BYTES,
    ) -> None:
        self.metering = metering
        self.min_integrity = min_integrity
        # "withhold": no graded run loads ctypes/cffi; "allow": they load, results `reduced`
        self.memory_modules = memory_modules
        # Each attempt's writable space (jouled.pipeline.scratch): a tmpfs of `disk_bytes`
        # where one can be mounted, else its file system must keep `disk_floor_bytes` free.
        self.disk_bytes = disk_bytes
        self.disk_floor_bytes = disk_floor_bytes
        self.solver_diff_bytes = solver_diff_bytes  # a hosted agent's work, as a diff, at most
        self.sandbox = sandbox or Sandbox()
        self.solvers = solvers or Solvers()
        self._environ = dict(os.environ if environ is None else environ)
        self.baselines = baselines
        self.work_root = work_root
        self._limits = sandbox_limits or default_limits
        self._baseline_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._expected: dict[str, Expected] = {}

    # -- baseline --------------------------------------------------------------------------

    def expected(
        self,
        contract: Contract,
        progress: Progress = _quiet,
        runs: dict[str, RunResult] | None = None,
    ) -> tuple[Expected, PhaseEnergy | None]:
        """The expected test ids, from cache, the ledger, or a fresh metered baseline run.

        A fresh baseline's runs are added to `runs`: "baseline" (the buggy tree) and,
        when the ids were derived from the reference, "reference".
        """
        with self._locks_guard:
            lock = self._baseline_locks.setdefault(contract.digest, threading.Lock())
        with lock:
            cached = self._expected.get(contract.digest) or self.baselines.load_baseline(contract)
            # A broken environment's baseline is never reused: one repaired in place
            # keeps its name (and the task its digest), so the next attempt checks anew.
            if cached is not None and not cached.broken:
                self._expected[contract.digest] = cached
                return cached, None
            progress("baseline", f"first use of {contract.task_id}: checking the tests fail")
            expected, energy = self._run_baseline(contract, runs)
            if not expected.broken:
                self._expected[contract.digest] = expected
            return expected, energy

    def check_pristine(
        self, contract: Contract, work: Path, *, reference: bool
    ) -> tuple[CheckRun, CheckRun | None]:
        """The check on the buggy tree and, with `reference`, on the tree the reference fixes."""
        ids = (*(contract.fail_to_pass or ()), *(contract.pass_to_pass or ()))
        tree = seed(contract, work / "before")
        prepare_tree(contract, tree, None)
        before = self.run_check(contract, tree, ids)
        if not reference or contract.reference_patch is None:
            return before, None
        tree = seed(contract, work / "after")
        prepare_tree(contract, tree, parse_trusted(contract.reference_patch))
        return before, self.run_check(contract, tree, ids)

    def _run_baseline(
        self, contract: Contract, runs: dict[str, RunResult] | None = None
    ) -> tuple[Expected, PhaseEnergy]:
        if not contract.has_expected_ids and contract.reference_patch is None:
            raise TaskError(
                f"{contract.task_id} names no expected test ids and has no reference",
                hint="add fail_to_pass/pass_to_pass to task.toml or a reference/ tree",
            )
        with self._scratch("baseline-") as tmp, self.metering.phase() as window:
            before, after = self.check_pristine(
                contract, Path(tmp), reference=not contract.has_expected_ids
            )
            for run in (before.result, after.result if after else None):
                if run is not None:
                    window.add_run(run.cpu_ns, run.isolation.get("cpu"))
        assert window.energy is not None
        if runs is not None:
            runs["baseline"] = before.result
            if after is not None:
                runs["reference"] = after.result
        expected = derive_expected(contract, before, after)
        body = BaselineBody(
            task_id=contract.task_id,
            suite=contract.suite,
            task_digest=contract.digest,
            valid=expected.valid,
            reason=expected.reason,
            code=expected.code or None,
            evidence=expected.evidence or None,
            derived=after is not None,
            fail_to_pass=list(expected.fail_to_pass),
            pass_to_pass=list(expected.pass_to_pass),
            skipped_before=list(expected.skipped_before or ()),
            before=run_counts(before),
            after=run_counts(after) if after else None,
            energy={"baseline": cast(EnergyWindow, window.energy.to_wire())},
            sandbox=before.result.level,
            isolation=dict(before.result.isolation),
            version=__version__,
        )
        seq = self.baselines.record_baseline(contract, body.to_dict())
        return dataclasses.replace(expected, seq=seq), window.energy

    # -- attempts --------------------------------------------------------------------------

    def _work_dir(self) -> Path:
        self.work_root.mkdir(parents=True, exist_ok=True)
        return self.work_root

    def _scratch(self, prefix: str) -> AbstractContextManager[Path]:
        """A private, bounded scratch dir the sandbox's unprivileged user can enter (not list)."""
        return scratch.attempt_space(
            self._work_dir(), prefix, size=self.disk_bytes, floor=self.disk_floor_bytes
        )

    def _too_big(self, contract: Contract, err: OSError, where: Path) -> JouledError | None:
        """A seeded tree that does not fit the attempt's tmpfs, as a clear error.

        None for any other error (a full data dir is the daemon's to report).
        """
        if isinstance(err, shutil.Error):  # copytree gathers its errors into one
            full = "No space left" in str(err)
        else:
            full = err.errno in NO_SPACE
        space = scratch.space_of(where)
        if not full or space is None or space.kind != scratch.TMPFS:
            return None
        return DiskFullError(
            f"{contract.task_id}'s tree does not fit an attempt's writable space of "
            f"{self.disk_bytes >> 20} MiB",
            hint="raise the daemon's --attempt-disk-mb",
        )

    @contextmanager
    def prepared(self, attempt: Attempt, progress: Progress = _quiet) -> Iterator[Path]:
        """The attempt's fresh workdir, seeded, with a submitted patch already applied.

        A patch that does not apply raises PatchError here, before anything is
        recorded; the same tree is then graded, so nothing is seeded twice.
        """
        with self._scratch("attempt-") as tmp:
            progress("seed", f"seeding {attempt.contract.task_id}")
            # The daemon's own work, in this thread: metered by its CPU share,
            # never waiting for the host lock another attempt's tests hold.
            try:
                with self.metering.phase(shared=True) as window:
                    cpu = time.thread_time_ns()
                    tree = seed(attempt.contract, Path(tmp) / "tree")
                    window.cpu_ns += time.thread_time_ns() - cpu
                attempt.energy["seed"] = _wire(window)
                if attempt.patch is not None:
                    with self.metering.phase(shared=True) as window:
                        cpu = time.thread_time_ns()
                        apply_patch(attempt.patch, tree)
                        guard.check_patch(attempt.patch, tree)
                        window.cpu_ns += time.thread_time_ns() - cpu
                    attempt.energy["apply"] = _wire(window)
            except OSError as err:
                too_big = self._too_big(attempt.contract, err, Path(tmp))
                if too_big is None:
                    raise
                raise too_big from err
            yield tree

    def evaluate(
        self, attempt: Attempt, progress: Progress = _quiet, tree: Path | None = None
    ) -> dict[str, Any]:
        """Run every phase on `tree` (from `prepared`) and return the `result` body."""
        if tree is None:
            with self.prepared(attempt, progress) as fresh:
                return self.evaluate(attempt, progress, fresh)
        contract = attempt.contract
        energy: dict[str, dict[str, Any]] = dict(attempt.energy)
        status, grade_info, restored, level = ERROR, None, [], ""
        extra: dict[str, Any] = {}
        patch, solved = attempt.patch, None
        error = ""
        runs: dict[str, RunResult] = {}  # every run this attempt paid for, by phase
        try:
            expected, baseline_energy = self.expected(contract, progress, runs)
            if baseline_energy is not None:
                energy["baseline"] = baseline_energy.to_wire()
            if expected.broken:  # no verdict from it: refused, nothing signed for the attempt
                progress("baseline", f"{envcheck.BROKEN_ENVIRONMENT}: {expected.reason}")
                raise expected.refusal(contract)
            if patch is None:
                progress("solve", f"running the {attempt.solver} solver")
                command = self.solvers.commands.get(attempt.solver)
                if command is not None:
                    patch = solved = self._command_solve(
                        attempt, command, tree, energy, extra, runs
                    )
                else:
                    with self.metering.phase() as window:
                        patch = solved = self._daemon_solve(attempt)
                    assert window.energy is not None
                    energy["solve"] = window.energy.to_wire()
            progress("grade", "restoring protected paths and running the tests")
            with self.metering.phase(waiting=_waiting(progress)) as window:
                restored = prepare_tree(contract, tree, solved)
                if solved is not None:
                    guard.check_patch(solved, tree)
                ids = (*expected.fail_to_pass, *expected.pass_to_pass)
                check = self.run_check(contract, tree, ids)
                window.add_run(check.result.cpu_ns, check.result.isolation.get("cpu"))
                graded, grade_info, official, forged = self._verdict(contract, expected, check)
                recheck = None
                if graded == RESOLVED and check.level == "monitor":
                    progress("grade", "resolved: confirming it with the sealed tests changed")
                    recheck = self._recheck(contract, patch, ids, check)
                    if recheck is not None:
                        for run in (recheck.again, recheck.changed):
                            window.add_run(run.result.cpu_ns, run.result.isolation.get("cpu"))
                        runs["rerun"], runs["recheck"] = (
                            recheck.again.result,
                            recheck.changed.result,
                        )
                        forged = recheck.forged()
                        graded = TAMPERED if forged else recheck.status()
                status = graded  # (an error above leaves it `error`)
            assert window.energy is not None
            energy["grade"] = window.energy.to_wire()
            level = check.result.level
            runs["grade"] = check.result
            attempt.output = check.result.output
            extra |= {
                "output": output_summary(check.result),
                "isolation": dict(check.result.isolation),
                "integrity": {
                    "report": check.report,
                    "canaries": check.canaries,
                    "level": check.level,
                    **({"recheck": recheck.wire()} if recheck is not None else {}),
                    **({"forged": forged} if forged else {}),
                },
            }
            extra["tests_visible"] = visible_tests(contract, expected, check.outcomes)
            if official is not None:
                extra["verdict"] = verdict_wire(official, grade_info, expected, check)
            unrepeated = recheck.unrepeated if recheck is not None else []
            if unrepeated and not forged:
                note = f"{len(unrepeated)} test(s) that passed did not pass again: {unrepeated[0]}"
            else:
                note = forged or summary(grade_info)
            progress("grade", f"{status}: {note}")
        except BrokenEnvironmentError:
            raise
        except PatchError as err:
            if attempt.patch is not None:
                raise  # a submission: refused before anything was recorded
            # A hosted solver's work was paid for: its refused patch is an answer.
            status = UNRESOLVED
            extra["refused"] = err.diagnostics()
            progress("grade", f"{status}: the solver's patch was refused: {err.message}")
        except (JouledError, OSError) as err:  # infrastructure: recorded as status error
            error = err.diagnostics() if isinstance(err, JouledError) else str(err)
            progress("error", error)
        body = self._body(attempt, patch, status, grade_info, energy, restored, level, error)
        for key, value in extra.items():
            body.set(key, value)
        body.logs = {phase: capture(run, attempt.blobs) for phase, run in runs.items()}
        body.energy_total = energy_total(energy)
        body.provenance = {
            **provenance.environment(),
            "meter": self.metering.meter.source,
            "calibration_seq": self.metering.calibration.seq if self.metering.calibration else None,
            "sandbox": level,
        }
        body.audit = audit_flags(contract, patch)  # evidence only: never part of the verdict
        return body.to_dict()

    def _verdict(
        self, contract: Contract, expected: Expected, check: CheckRun
    ) -> tuple[str, Grade, Any, str]:
        """(status, jouled's grading, the contract's official verdict or None, why the run is
        forged or "") of a graded run."""
        grade_info = grade(
            check.outcomes,
            expected.fail_to_pass,
            expected.pass_to_pass,
            graded_exit(contract, check.exit),
        )
        rules, official = contract.grading.verdict, None
        if rules is not None:
            official = rules(check.result.output, expected.fail_to_pass, expected.pass_to_pass)
        forged = check.forged
        if not forged and official is not None and check.report == "channel":
            forged = unseen_passes(official, check.outcomes)
        if not forged and official is not None and official.resolved:
            forged = ended_unrun(check.outcomes, expected)
        if forged:
            status = TAMPERED
        elif official is None and not expected.valid:
            status = INVALID
        elif check.result.timed_out:
            status = TIMEOUT
        elif official is not None:  # the contract's rules decide; the strict grading is beside
            status = RESOLVED if official.resolved else UNRESOLVED
        else:
            status = RESOLVED if grade_info.resolved else UNRESOLVED
        return status, grade_info, official, forged

    def _recheck(
        self, contract: Contract, patch: Patch | None, ids: tuple[str, ...], first: CheckRun
    ) -> Recheck | None:
        """The runs that confirm `first` resolved on its own: the check again on two trees
        seeded and patched afresh side by side, their files' times made the same, run at
        once in an order drawn at random, one of them with the sealed tests' compared values
        changed (`CheckRunner.changed_tests`). Nothing the first run wrote reaches them, and
        nothing tells the two apart but the text only the runner holds. None where no test
        that passed has a value to change."""
        with self._scratch("recheck-") as one, self._scratch("recheck-") as two:
            trees = [seed(contract, Path(place) / "tree") for place in (one, two)]
            for tree in trees:
                prepare_tree(contract, tree, patch)
            changed, must_fail = self.changed_tests(contract, trees[0], ids, first)
            if not must_fail:
                return None
            same_times(trees)
            roles = ["again", "changed"]
            random.SystemRandom().shuffle(roles)
            with ThreadPoolExecutor(2, thread_name_prefix="recheck") as pool:
                futures = {
                    role: pool.submit(
                        self.run_check, contract, tree, ids, changed if role == "changed" else None
                    )
                    for role, tree in zip(roles, trees, strict=True)
                }
                done = {role: future.result() for role, future in futures.items()}
        return Recheck(done["again"], done["changed"], must_fail)

    def _command_solve(
        self,
        attempt: Attempt,
        command: CommandSolver,
        tree: Path,
        energy: dict[str, dict[str, Any]],
        extra: dict[str, Any],
        runs: dict[str, RunResult],
    ) -> Patch:
        """Run an agent CLI on its own copy of the tree, metered; its work as a patch."""
        contract = attempt.contract
        env = self.solvers.environment(command, self._environ)
        workdir = seed(contract, tree.parent / "solve")
        # Before the agent runs: what it writes may fill the attempt's writable space.
        base = seed(contract, tree.parent / "base")
        with self.metering.phase() as window:
            solved = command_solver.solve(
                command, env, contract.prompt, workdir, self.sandbox, attempt.model
            )
            window.add_run(solved.run.cpu_ns, solved.run.isolation.get("cpu"))
        runs["solve"] = solved.run
        assert window.energy is not None
        energy["solve"] = window.energy.to_wire()
        attempt.claimed = {**solved.claimed, **attempt.claimed}
        try:
            command_solver.keep_patchable(workdir, base, contract.is_protected, solved.dropped)
            # Streamed and bounded: the daemon never holds more of the agent's work than
            # the bound, whatever it wrote (jouled.patch_diff.diff_trees).
            raw = diff_trees(base, workdir, max_bytes=self.solver_diff_bytes)
        except OSError as err:
            if err.errno not in NO_SPACE:
                raise
            raise PatchError(
                "the solver filled the attempt's writable space and its work could not be "
                "read back",
                hint="a hosted agent's changes must fit the attempt's writable space",
            ) from err
        finally:
            extra["solve"] = solved.describe()  # after keep_patchable named what it dropped
            shutil.rmtree(workdir, ignore_errors=True)
            shutil.rmtree(base, ignore_errors=True)
        if not raw:
            return Patch((), hashlib.sha256(b"").hexdigest())
        return parse_patch(raw, max_bytes=max(self.solver_diff_bytes, 1))

    def _daemon_solve(self, attempt: Attempt) -> Patch | None:
        if attempt.solver == "noop":
            return None
        if attempt.solver == "reference":
            if attempt.contract.reference_patch is None:
                raise TaskError(f"{attempt.contract.task_id} has no reference solution")
            return parse_trusted(attempt.contract.reference_patch)
        raise TaskError(f"unknown daemon-hosted solver {attempt.solver!r}")

    def _body(
        self,
        attempt: Attempt,
        patch: Patch | None,
        status: str,
        graded: Grade | None,
        energy: dict[str, dict[str, Any]],
        restored: list[str],
        level: str,
        error: str,
    ) -> ResultBody:
        contract = attempt.contract
        body = ResultBody(
            task_id=contract.task_id,
            suite=contract.suite,
            task_digest=contract.digest,
            patch_sha256=patch.sha256 if patch else EMPTY_SHA256,
            status=Status(status),
            resolved=status == RESOLVED,
            tests=cast(GradeCounts, graded.summary())
            if graded
            else {"expected": 0, "passed": 0, "failed": 0, "missing": 0},
            solver=attempt.solver,
            model=attempt.model,
            agent=attempt.agent,
            run_id=attempt.run_id,
            rollout=attempt.rollout,
            energy=cast(dict[str, EnergyWindow], energy),
            claimed=dict(attempt.claimed),
            sandbox=level,
            restored=restored,
            idempotency_key=attempt.idempotency_key,
            attempt_id=attempt.attempt_id,
            version=__version__,
        )
        if graded is not None and (graded.failed or graded.missing):
            body.tests_failed = list(graded.failed[:INLINE_IDS])
            body.tests_missing = list(graded.missing[:INLINE_IDS])
            if len(graded.failed) > INLINE_IDS:
                body.tests_failed_all = id_list(graded.failed, attempt.blobs)
            if len(graded.missing) > INLINE_IDS:
                body.tests_missing_all = id_list(graded.missing, attempt.blobs)
        if error:
            body.error = error
        return body


@dataclass(frozen=True)
class Recheck:
    """`Evaluator._recheck`'s two runs: the graded check again, and with its changed tests."""

    again: CheckRun
    changed: CheckRun
    must_fail: list[str]  # the expected ids that passed and must fail on the changed text

    @property
    def answered(self) -> list[str]:
        """Tests that passed with the values they compare changed: answered from the test."""
        return sorted(t for t in self.must_fail if self.changed.outcomes.get(t) == "passed")

    @property
    def unrepeated(self) -> list[str]:
        """Tests that passed in the graded run and not in the same run again."""
        return sorted(t for t in self.must_fail if self.again.outcomes.get(t) != "passed")

    def forged(self) -> str:
        """Why the attempt is `tampered`: the twin's own finding, or tests answered from the
        changed text. What the monitor finds in the changed run says nothing: its tests fail
        there by design, down the paths a failure takes, which the monitor judges warily
        (a failure a context manager swallows), and a patch hides an answer by failing."""
        answered = self.answered
        if self.again.forged:
            return self.again.forged
        if not answered:
            return ""
        return (
            f"{len(answered)} sealed test(s) passed again with the values they expect "
            f"changed, so the code under test took its answers from the tests: "
            f"{', '.join(answered[:5])}"
        )

    def status(self) -> str:
        """`timeout` where either run timed out (neither then says anything), else
        `resolved` where every test passed again and `unresolved` where one did not."""
        if self.again.result.timed_out or self.changed.result.timed_out:
            return TIMEOUT
        return UNRESOLVED if self.unrepeated else RESOLVED

    def wire(self) -> dict[str, Any]:
        return {
            "tests": len(self.must_fail),
            "answered": self.answered[:INLINE_IDS],
            "unrepeated": self.unrepeated[:INLINE_IDS],
        }


def same_times(trees: Sequence[Path]) -> None:
    """Give each file and directory of the other trees the access and modification times
    its copy has in the first (seeded and patched first), so the trees' times tell no run
    which one it is; within a tree their order stays (a patched file is newer)."""
    first, *others = trees
    paths = [
        os.path.join(directory, name)
        for directory, dirs, files in os.walk(first)
        for name in (*files, *dirs)  # (a link to a directory is listed, not entered)
    ]
    for path in (*paths, str(first)):
        stat = os.stat(path, follow_symlinks=False)
        rel = os.path.relpath(path, first)
        for other in others:
            twin = os.path.join(other, rel)
            if os.path.lexists(twin):
                times = (stat.st_atime_ns, stat.st_mtime_ns)
                os.utime(twin, ns=times, follow_symlinks=False)


def _wire(window: Window) -> dict[str, Any]:
    assert window.energy is not None
    return window.energy.to_wire()


def _waiting(progress: Progress) -> Callable[[str], None]:
    """What a phase that has to wait for the metered host tells its caller."""
    return lambda holder: progress("wait", f"waiting for the metered host: {holder} holds it")
