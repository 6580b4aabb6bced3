"""Running a contract's check in the sandbox and reading its test ids.

Every run the pipeline grades goes through here (the baseline, the reference,
the attempt's own): the command is planned through the daemon's runner for
its framework (pytest, unittest, SymPy's) where the contract allows, run in
the sandbox, and read back from the runner's authenticated channel, with the
canaries that show a forged report taken out. A run whose report integrity is
below the daemon's `--min-integrity` is refused before it is graded.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

from jouled.contracts.contract import Contract, iter_tree
from jouled.documents.vocabulary import INTEGRITY_LEVELS
from jouled.errors import SandboxError
from jouled.pipeline import container, mutants, pytest_run, runners, sympy_run, unittest_run
from jouled.pipeline.graded_tree import read_only_native, read_only_tests, secret_tests
from jouled.pipeline.limits import Limits, RunResult
from jouled.pipeline.sandbox import Sandbox
from jouled.pipeline.testreport import parse_ra
from jouled.pipeline.verdicts import CheckRun, exit_contradicts, integrity_level, sealed_level

# GradingPolicy.runner -> the module that plans a plain command's run through the daemon's
# runner for it and holds the command's log against that runner's channel.
PLAIN_RUNNERS = {"unittest": unittest_run, "sympy": sympy_run}


class CheckRunner:
    """The `Evaluator`'s part that runs checks: the sandbox, its limits, the integrity floor."""

    sandbox: Sandbox
    min_integrity: str
    memory_modules: str
    _limits: Callable[[Contract], Limits]

    def run_check(
        self,
        contract: Contract,
        tree: Path,
        expected: Sequence[str] = (),
        mutated: Mapping[str, bytes] | None = None,
    ) -> CheckRun:
        """Run the contract's test command in the sandbox and read its test ids.

        `expected` (the ids grading will check, when known) places the canaries
        beside the tests that matter and names what a forged run would claim.
        `mutated` (`recheck`) is the text the run holds for some sealed modules.
        """
        ro = Path(tempfile.mkdtemp(prefix="ro-", dir=tree.parent))
        policy = contract.grading
        runtime = contract.runtime
        python = runtime.python if runtime is not None else sys.executable
        runtime_env = dict(runtime.env) if runtime is not None else {}
        runtime_paths = [Path(p) for p in runtime.paths] if runtime is not None else []
        try:
            layout = self.sandbox.layout(tree, ro)
            protected = [rel for rel, _ in iter_tree(tree) if contract.is_protected(rel)]
            # A container image runs the command as it is, never through the runner.
            image = runtime.image if runtime is not None else ""
            plan = None
            if policy.plain and policy.runner in PLAIN_RUNNERS and not image:
                plan = PLAIN_RUNNERS[policy.runner].plan(
                    contract.test_cmd,
                    tree,
                    ro,
                    layout,
                    pristine=contract.pristine,
                    protected=protected,
                    python=python,
                    memory_modules=self.memory_modules,
                )
            elif not policy.plain and not image:
                plan = pytest_run.plan(
                    contract.test_cmd,
                    tree,
                    ro,
                    layout,
                    expected,
                    pristine=contract.pristine,
                    protected=protected,
                    python=python,
                    python_version=runtime.version_tuple if runtime is not None else None,
                    framework=policy.framework,
                    memory_modules=self.memory_modules,
                    installed_plugins=runtime is not None and runtime.installed,
                )
            limits = self._limits(contract)
            version = runtime.version_tuple if runtime is not None else None
            reads = version if runtime is not None else sys.version_info[:2]
            if plan is not None and plan.level != "reduced" and reads and reads >= (3, 8):
                # Python 3.8+ reads source through `io.open_code`, which the runner serves.
                setup, sealed = runners.seal_tests(
                    plan.setup, tree, ro, secret_tests(contract, protected, expected), mutated
                )
                plan = dataclasses.replace(plan, setup=setup, overlays={**plan.overlays, **sealed})
            elif mutated:
                raise SandboxError(
                    f"{contract.task_id}'s test modules cannot be sealed for a recheck",
                    hint="a recheck needs the daemon's runner on Python 3.8 or newer",
                )
            level = integrity_level(plan, version)
            self._check_integrity(contract, level)
            if plan is None:
                overlays = read_only_tests(contract, tree, protected)
                if runtime is not None and image:
                    engine = container.find_engine(runtime.engine)
                    result = container.run(
                        engine,
                        image,
                        contract.test_cmd,
                        tree,
                        limits=limits,
                        env=runtime_env,
                        overlays=overlays,
                    )
                else:
                    result = self.sandbox.run(
                        pytest_run.plain_argv(contract.test_cmd, python),
                        tree,
                        limits=limits,
                        env=runtime_env,
                        overlays=overlays,
                        read_only=runtime_paths,
                    )
                parse = policy.parse_output or parse_ra
                outcomes = parse(result.output)
                report = ("rA" if policy.parse_output is None else "output") if outcomes else "none"
                forged = exit_contradicts(result.exit_code, outcomes) if policy.parse_output else ""
                return CheckRun(result, outcomes, report, result.exit_code, forged, level=level)
            result = self.sandbox.run(
                plan.argv,
                tree,
                limits=limits,
                env={**runtime_env, **plan.env},
                ro_dir=ro,
                overlays={
                    **read_only_native(tree, contract.pristine),
                    **read_only_tests(contract, tree, protected),
                    **plan.overlays,
                },
                channel_in=plan.setup,
                channel_out=True,
                read_only=runtime_paths,
            )
            level = sealed_level(level, result.isolation)
            self._check_integrity(contract, level)
        finally:
            shutil.rmtree(ro, ignore_errors=True)
        if result.channel_dropped:
            raise SandboxError(
                f"the test report of {contract.task_id} exceeded its bound",
                hint="the run reported more than the daemon keeps; split the test command",
            )
        channel = pytest_run.read_channel(result.channel or b"", plan.key)
        result, level = self._memory_modules(contract, result, channel, level)
        if policy.plain:  # a plain runner: the log is graded, the channel holds it to account
            parse = policy.parse_output or parse_ra
            runner = PLAIN_RUNNERS[policy.runner]
            # The canaries' lines are the runner's, not the task's: left out of what is graded
            # and of the exit-status cross-check (the planted failure explains a nonzero exit).
            read = parse(result.output)
            outcomes = runner.without_canaries(read, plan.canaries)
            forged = exit_contradicts(result.exit_code, read) or runner.disagreement(
                outcomes, channel, result.exit_code, plan.canaries, tree, contract.test_cmd
            )
            if not forged and channel.started and channel.integrity != level:
                forged = (
                    f"the runner reported integrity {channel.integrity!r} where {level!r} was due"
                )
            report = "output+channel" if channel.started else "output"
            canaries = len(plan.canaries.ids)
            return CheckRun(result, outcomes, report, result.exit_code, forged, canaries, level)
        outcomes = pytest_run.without_canaries(channel.outcomes, plan.canaries)
        if policy.match_ids is not None:
            ids = (*(contract.fail_to_pass or ()), *(contract.pass_to_pass or ()))
            outcomes = policy.match_ids(outcomes, ids)
        forged = pytest_run.forgery(channel, plan.canaries, result.exit_code, expected)
        if not forged and channel.started and channel.integrity != level:
            forged = f"the runner reported integrity {channel.integrity!r} where {level!r} was due"
        graded = pytest_run.effective_exit(
            channel,
            plan.canaries,
            result.exit_code,
            others_may_fail=policy.failing_exit_judged_by_ids,
        )
        return CheckRun(
            result,
            outcomes,
            "channel" if channel.started else "none",
            graded,
            forged,
            len(plan.canaries.ids),
            level,
        )

    def changed_tests(
        self, contract: Contract, tree: Path, expected: Sequence[str], first: CheckRun
    ) -> tuple[dict[str, bytes], list[str]]:
        """The sealed test modules of `tree` with their compared values changed (`mutants`:
        tree-relative path -> text) and the expected ids that passed in `first` and must
        fail on them; ({}, []) when there are none."""
        if _strips_asserts(contract):
            return {}, []  # a changed `assert` would never run: nothing could fail
        passed = [test_id for test_id in expected if first.outcomes.get(test_id) == "passed"]
        protected = [rel for rel, _ in iter_tree(tree) if contract.is_protected(rel)]
        secret = secret_tests(contract, protected, expected)
        made = mutants.mutants(
            {rel: (tree / rel).read_bytes() for rel in secret}, random.SystemRandom()
        )
        names: dict[str, set[str] | None] = {}  # protected .py file -> the functions it defines

        def defined_elsewhere(rel: str, name: str) -> bool:
            for other in protected:
                if other != rel and other.endswith(".py"):
                    if other not in names:
                        names[other] = mutants.defined_names(tree / other)
                    found = names[other]
                    if found is None or name in found:
                        return True
            return False

        must_fail = []
        for rel, mutant in made.items():
            must_fail += mutant.failing_ids(rel, passed, partial(defined_elsewhere, rel))
        if not must_fail:
            return {}, []
        return {rel: m.text for rel, m in made.items()}, must_fail

    def _memory_modules(
        self, contract: Contract, result: RunResult, channel: pytest_run.Channel, level: str
    ) -> tuple[RunResult, str]:
        """Sign what the monitor did with memory modules (ctypes, cffi): those it withheld
        (`isolation.withheld`), and those the daemon let load, which leave the process's
        memory open to every line of it, the patch's included: the run is `reduced`."""
        isolation = dict(result.isolation)
        if channel.withheld:
            isolation["withheld"] = list(channel.withheld)
        if channel.memory_open:
            isolation["memory"] = "open: loaded " + ", ".join(channel.memory_open)
            level = sealed_level(level, isolation)
            self._check_integrity(contract, level)
        if isolation == result.isolation:
            return result, level
        return dataclasses.replace(result, isolation=isolation), level

    def _check_integrity(self, contract: Contract, level: str) -> None:
        """Refuse a run whose report integrity is below the daemon's --min-integrity."""
        if INTEGRITY_LEVELS.index(level) < INTEGRITY_LEVELS.index(self.min_integrity):
            raise SandboxError(
                f"{contract.task_id} would be graded at report integrity {level!r}, below "
                f"--min-integrity {self.min_integrity!r}",
                hint="run it where its tests go through the daemon's runner on Python 3.8 or "
                "newer, on a kernel with Landlock (Linux 5.13+) so the run's memory is sealed, "
                "or lower --min-integrity (every result records its level)",
            )


def _strips_asserts(contract: Contract) -> bool:
    """Whether the test command may run Python optimized (`python -O`, PYTHONOPTIMIZE):
    its plain `assert` statements are then compiled away."""
    env = contract.runtime.env if contract.runtime is not None else {}
    if env.get("PYTHONOPTIMIZE") or any("PYTHONOPTIMIZE" in part for part in contract.test_cmd):
        return True
    command = list(contract.test_cmd)
    for at, part in enumerate(command):
        if Path(part).name.startswith("python"):
            for flag in command[at + 1 :]:  # the interpreter's own options
                if not flag.startswith("-") or flag.startswith("--") or flag in ("-m", "-c"):
                    break
                if "O" in flag[1:]:
                    return True
            break
    return False
