"""jouled's SWE-bench grading against the official swebench package's, on the same inputs.

The package (the version `tools/swebench_oracle.py` pins, unpacked without its
dependencies by `make swebench-fixtures`) is the oracle: its specification
table, test directives, log parsers and grading functions. The real-release
tests build instances from Django 5.0.14, Flask 2.3.3, pytest 8.0.2 and SymPy
1.12 (see `tests/swebench_real.py`), prepare their environments with `jouled
swebench prepare`, grade gold, empty and wrong predictions (through the
pipeline, and for Django and SymPy through a real daemon too, with in-process
forgeries), and hold each verdict to the official grading of the very log
jouled captured.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from jb_client.api import Client

from jouled.contracts import swebench
from jouled.contracts import swebench_harness as harness
from jouled.contracts.swebench import to_contract
from jouled.contracts.swebench_records import SweBenchRecord
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.metering import Metering
from jouled.patch import parse_patch
from jouled.pipeline.evaluate import Attempt, Evaluator
from tests import swebench_real as real
from tests.integration.conftest import start_daemon
from tests.test_swebench import MemoryBaselines

# -- the table, the directives, the parsers, the grading ----------------------------------


def test_the_specification_table_is_the_official_packages() -> None:
    real.oracle()
    import swebench_specs

    shipped = (real.ROOT / "jouled" / "contracts" / "swebench_specs.json").read_text()
    assert json.loads(shipped) == json.loads(swebench_specs.render()), (
        "jouled/contracts/swebench_specs.json is stale: run tools/swebench_specs.py"
    )


def test_test_directives_are_the_officials() -> None:
    oracle = real.oracle()
    patches = [
        "diff --git a/tests/utils_tests/test_text.py b/tests/utils_tests/test_text.py\n"
        "diff --git a/tests/forms_tests/models.py b/tests/forms_tests/models.py\n"
        "diff --git a/tests/fixtures/data.json b/tests/fixtures/data.json\n",
        "diff --git a/tests/test_config.py b/tests/test_config.py\n"
        "diff --git a/tests/static/config.toml b/tests/static/config.toml\n"
        "diff --git a/docs/x.md b/docs/x.md\ndiff --git a/a/b.png b/a/b.png\n",
    ]
    for repo, patch in itertools.product(("django/django", "pallets/flask"), patches):
        official = oracle.test_spec.get_test_directives({"repo": repo, "test_patch": patch})
        assert list(harness.test_directives(repo, patch)) == official


LOG_LINES = [
    "PASSED tests/test_a.py::test_one",
    "FAILED tests/test_a.py::test_two - AssertionError: x - y",
    "FAILED tests/test_a.py::test_p[a b] - assert 1 == 2",
    "PASSED tests/test_a.py::test_p[a c]",
    "ERROR tests/test_a.py::test_three - fixture 'z' not found",
    "ERROR: file or directory not found: tests/test_gone.py",
    "SKIPPED [1] tests/test_a.py:12: no network",
    "XFAIL tests/test_a.py::test_four - reason: known",
    "XPASS tests/test_a.py::test_five",
    "PASSED tests/test_a.py::test_path[/tmp/abc/data.txt]",
    "PASSED tests/test_a.py::test_click[MouseButton.LEFT-2]",
    "tests/test_a.py::test_six PASSED",
    "tests/test_a.py::test_seven FAILED",
    "\x1b[32mPASSED\x1b[0m tests/test_a.py::test_colour",
    "PASSED",
    "FAILED",
    "test_capfirst (utils_tests.test_text.T.test_capfirst) ... ok",
    "test_fail (utils_tests.test_text.T.test_fail) ... FAIL",
    "test_err (utils_tests.test_text.T.test_err) ... ERROR",
    "test_skip (utils_tests.test_text.T.test_skip) ... skipped 'no db'",
    "test_late (m.T.test_late) ... Testing against Django installed in '/x'",
    "ok",
    "FAIL: test_fail (utils_tests.test_text.T.test_fail)",
    "ERROR: test_err2 (utils_tests.test_text.T.test_err2)",
    "test_version (admin_scripts.tests.CommandTypes) --version is equivalent to version",
    "test_sqrt ok",
    "test_pow F",
    "test_log E",
    "________ sympy/core/tests/test_basic.py:test_pow ________",
    "test_seaborn_x PASSED extra",
    "",
]


@pytest.mark.parametrize("parser", sorted(harness.PARSERS))
def test_every_parser_reads_logs_as_the_official_one_does(parser: str) -> None:
    oracle = real.oracle()
    official = getattr(oracle.log_parsers.python, f"parse_log_{parser}")
    spec = oracle.TestSpec("x", "r", "1")
    rng = random.Random(parser)
    for n in range(60):
        lines = rng.sample(LOG_LINES, k=rng.randint(1, len(LOG_LINES)))
        if parser == "seaborn":  # the official one raises on a lone status word
            lines = [line for line in lines if line not in ("PASSED", "FAILED")]
        log = "\n".join(lines)
        assert harness.parse_log(parser, log) == official(log, spec), (n, log)


def test_a_status_word_at_the_start_of_any_line_reads_as_an_error_not_a_crash() -> None:
    """pytest's own `ERROR: file or directory not found: x` is a "test" named `file` with the
    status `ERROR:` to the official parser: jouled's outcomes call it an error."""
    oracle = real.oracle()
    log = "ERROR: file or directory not found: tests/test_gone.py\nPASSED tests/test_a.py::t\n"
    spec = oracle.TestSpec("x", "r", "1")
    assert oracle.log_parsers.python.parse_log_pytest(log, spec)["file"] == "ERROR:"
    assert harness.outcomes("pytest", log) == {"file": "error", "tests/test_a.py::t": "passed"}


def test_the_resolution_is_the_officials() -> None:
    oracle = real.oracle()
    grading = oracle.grading
    statuses = ["PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", None]
    ids = [f"t{i}" for i in range(6)]
    rng = random.Random(7)
    seen = set()
    for _ in range(400):
        status_map = {t: s for t in ids if (s := rng.choice(statuses)) is not None}
        f2p = rng.sample(ids, k=rng.randint(0, 3))
        p2p = rng.sample([t for t in ids if t not in f2p], k=rng.randint(0, 3))
        report = grading.get_eval_tests_report(
            status_map, {"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p}
        )
        ours, tests = harness.resolution(status_map, f2p, p2p)
        assert ours == grading.get_resolution_status(report)
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            assert tests[key] == report[key]
        seen.add(ours)
    assert seen == {harness.FULL, harness.PARTIAL, harness.NO}


# -- real releases, graded by jouled and by the official package ------------------------


def official_grading(record: dict[str, Any], patch: str, log: str, tmp: Path) -> bool:
    """The official package's verdict on a captured log, as its harness writes logs."""
    oracle = real.oracle()
    constants = oracle.constants
    path = tmp / "eval.log"
    path.write_text(f"{constants.START_TEST_OUTPUT}\n{log}\n{constants.END_TEST_OUTPUT}\n")
    spec = oracle.TestSpec(
        record["instance_id"],
        record["repo"],
        record["version"],
        record["FAIL_TO_PASS"],
        record["PASS_TO_PASS"],
    )
    prediction = {"instance_id": record["instance_id"], "model_patch": patch}
    report = oracle.grading.get_eval_report(spec, prediction, str(path), True)
    return bool(report[record["instance_id"]]["resolved"])


@pytest.fixture(scope="module")
def django(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweBenchRecord, str, Path, Path]:
    base = tmp_path_factory.mktemp("django")
    checkouts, envs = base / "checkouts", base / "envs"
    checkouts.mkdir()
    raw, wrong = real.django_instance(checkouts)
    real.prepare_env([raw], checkouts, envs)
    return SweBenchRecord.from_dict(raw, "django"), wrong, checkouts, envs


@pytest.fixture(scope="module")
def flask(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweBenchRecord, str, Path, Path]:
    base = tmp_path_factory.mktemp("flask")
    checkouts, envs = base / "checkouts", base / "envs"
    checkouts.mkdir()
    raw, wrong = real.flask_instance(checkouts)
    real.prepare_env([raw], checkouts, envs)
    return SweBenchRecord.from_dict(raw, "flask"), wrong, checkouts, envs


Graded = dict[str, tuple[dict[str, Any], str, str]]  # name -> (result body, log, patch)


@pytest.fixture(scope="module")
def pytest_itself(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[SweBenchRecord, str, Path, Path]:
    base = tmp_path_factory.mktemp("pytest")
    checkouts, envs = base / "checkouts", base / "envs"
    checkouts.mkdir()
    raw, wrong = real.pytest_instance(checkouts)
    real.prepare_env([raw], checkouts, envs)
    return SweBenchRecord.from_dict(raw, "pytest"), wrong, checkouts, envs


def grade_all(
    instance: tuple[SweBenchRecord, str, Path, Path],
    tmp_path: Path,
    extra: dict[str, str] | None = None,
    memory_modules: str = "withhold",
) -> Graded:
    record, wrong, checkouts, envs = instance
    contract = to_contract(record, checkouts, environments=envs, timeout_s=600)
    assert contract.runtime is not None and contract.runtime.python.startswith(str(envs))
    store = MemoryBaselines()
    metering = Metering(EstimatorMeter(), None, "exclusive")
    ev = Evaluator(metering, store, tmp_path / "work", memory_modules=memory_modules)
    graded: Graded = {}
    extra_items = tuple((extra or {}).items())
    for name, patch in (("gold", record.patch), ("empty", ""), ("wrong", wrong), *extra_items):
        # No patch is the daemon's noop solver: the pristine tree, graded.
        parsed = parse_patch(patch.encode()) if patch else None
        attempt = Attempt(contract, parsed, name if patch else "noop")
        body = ev.evaluate(attempt)
        graded[name] = (body, attempt.output, patch)
    assert len(store.bodies) == 1 and store.bodies[0]["valid"], store.bodies
    return graded


def check_against_the_oracle(record: SweBenchRecord, graded: Graded, tmp_path: Path) -> None:
    raw = {
        "instance_id": record.instance_id,
        "repo": record.repo,
        "version": record.version,
        "FAIL_TO_PASS": list(record.FAIL_TO_PASS),
        "PASS_TO_PASS": list(record.PASS_TO_PASS),
    }
    expected = {"gold": "resolved", "empty": "unresolved", "wrong": "unresolved"}
    for name, (body, log, patch) in graded.items():
        if name not in expected:
            continue
        assert body["status"] == expected[name], (name, body)
        official = official_grading(raw, patch, log, tmp_path)
        assert body["verdict"]["resolved"] is official, (name, body["verdict"])
        assert body["resolved"] is official
    gold, wrong = graded["gold"][0]["verdict"], graded["wrong"][0]["verdict"]
    assert gold["status"] == harness.FULL and gold["strict"]["agrees"]
    assert wrong["status"] in (harness.NO, harness.PARTIAL)
    assert set(wrong["failed"]) <= set(record.FAIL_TO_PASS) and wrong["failed"]


@pytest.mark.slow
def test_django_instances_are_graded_as_the_official_harness_grades_them(
    django: tuple[SweBenchRecord, str, Path, Path], tmp_path: Path
) -> None:
    forged = real.django_exit_forgery(django[2])
    print_ok = real.django_print_ok_forgery(django[2])
    framework = real.django_framework_edit(django[2])
    extra = {"exit-forgery": forged, "print-ok": print_ok, "framework-edit": framework}
    graded = grade_all(django, tmp_path, extra)
    check_against_the_oracle(django[0], graded, tmp_path)
    gold = graded["gold"][0]
    # A run made to exit 0 whatever its tests did: the official rules read the log
    # (resolved, recorded as read); the runner saw its own exit 1 (the planted must-fail
    # canary), so the result is tampered.
    body, log, _ = graded["exit-forgery"]
    assert body["status"] == "tampered", body
    assert "the process exited 0 but the runner finished with 1" in body["integrity"]["forged"]
    assert body["verdict"]["resolved"] is True
    assert official_grading(
        {
            "instance_id": django[0].instance_id,
            "repo": django[0].repo,
            "version": django[0].version,
            "FAIL_TO_PASS": list(django[0].FAIL_TO_PASS),
            "PASS_TO_PASS": list(django[0].PASS_TO_PASS),
        },
        forged,
        log,
        tmp_path,
    )
    # runtests.py, read by the Django parser, held to the daemon's unittest runner's report
    assert gold["integrity"]["report"] == "output+channel", gold["integrity"]
    assert gold["integrity"]["canaries"] == 2  # a passing and a failing one, as planted
    assert gold["integrity"]["level"] == "monitor"
    assert gold["verdict"]["rules"].endswith("django log parser")
    # Django's runner made to print "ok" for the failing test: the log the official rules
    # read says resolved (the forgery ran), and the result is tampered.
    body, _, _ = graded["print-ok"]
    assert body["verdict"]["resolved"] is True, body["verdict"]
    assert body["status"] == "tampered", body
    # A fix that edits Django's test framework is graded, at `reduced`: its runner is the patch's.
    body, _, _ = graded["framework-edit"]
    assert body["status"] == "resolved", body
    assert body["integrity"]["level"] == "reduced", body["integrity"]
    body, _, _ = graded["print-ok"]
    assert "TextTestResult.add" in body["integrity"]["forged"], body["integrity"]


@pytest.mark.slow
def test_pytest_instances_are_graded_as_the_official_harness_grades_them(
    flask: tuple[SweBenchRecord, str, Path, Path], tmp_path: Path
) -> None:
    graded = grade_all(flask, tmp_path)
    check_against_the_oracle(flask[0], graded, tmp_path)
    gold = graded["gold"][0]
    # Through the daemon's runner: canaries planted, outcomes from its channel too.
    assert gold["integrity"]["report"] == "channel" and gold["integrity"]["canaries"] >= 1
    # The dataset's truncated spelling of the spaced parameter id is found in the log.
    assert gold["verdict"]["tests"]["FAIL_TO_PASS"] == {"success": 2, "failure": 0}


@pytest.mark.slow
def test_pytest_itself_is_graded_by_its_own_command_as_the_official_harness_grades_it(
    pytest_itself: tuple[SweBenchRecord, str, Path, Path], tmp_path: Path
) -> None:
    """pytest's runner is the code under test: its run goes through jouled's runner, and a
    patch that changes pytest's own source is graded `reduced` (that source counted as the
    framework's, not as the patch's), with canaries and the channel beside the log."""
    graded = grade_all(pytest_itself, tmp_path)
    check_against_the_oracle(pytest_itself[0], graded, tmp_path)
    gold, wrong = graded["gold"][0], graded["wrong"][0]
    assert gold["integrity"]["report"] == "channel", gold["integrity"]
    assert gold["integrity"]["canaries"] >= 1, gold["integrity"]
    assert gold["integrity"]["level"] == "reduced", gold["integrity"]
    assert not gold["integrity"].get("forged"), gold["integrity"]
    assert wrong["verdict"]["status"] == harness.PARTIAL, wrong["verdict"]
    assert wrong["verdict"]["tests"]["FAIL_TO_PASS"] == {"success": 1, "failure": 1}


@pytest.mark.slow
def test_forgeries_of_pytest_itself_are_tampered(
    pytest_itself: tuple[SweBenchRecord, str, Path, Path], tmp_path: Path
) -> None:
    """On pytest's own suite the patch may change pytest: a report factory it rewrote to
    pass the failing target test, or pass lines written after pytest's, make the log
    resolve by the official rules; the test's own function and the channel say it failed."""
    record = pytest_itself[0]
    forgeries = {
        f"forged-{name}": real.pytest_forgery(pytest_itself[2], name)
        for name in real.PYTEST_FORGERIES
    }
    graded = grade_all(pytest_itself, tmp_path, forgeries)
    raw = _raw(record)
    for name in real.PYTEST_FORGERIES:
        body, log, patch = graded[f"forged-{name}"]
        assert f"JBFORGED {name}" in log, (name, log[-3000:])  # the payload ran
        official = official_grading(raw, patch, log, tmp_path)
        assert body["verdict"]["resolved"] is official, (name, body["verdict"])
        if name == "report-flip":  # the forgery took: the official rules resolve the log
            assert official is True, (name, log[-3000:])
        if not official:
            assert body["status"] == "unresolved", (name, body["status"])
            continue
        assert body["status"] == "tampered", (name, body["integrity"])
        assert body["integrity"]["level"] == "reduced", body["integrity"]
        assert "test_and_needs_both" in body["integrity"]["forged"], body["integrity"]


@pytest.mark.slow
def test_library_forgeries_the_official_rules_resolve_are_tampered_by_a_real_daemon(
    flask: tuple[SweBenchRecord, str, Path, Path], tmp_path: Path
) -> None:
    """No runner forged: the library ends the tests it would fail with pytest's own skip or
    xfail, or writes the official parser's pass lines after pytest's. The official rules
    resolve the xfails (an xfailed test counts as passed) and the written lines; the
    runner's channel saw the tests fail, so both are tampered. A skip reads as failed."""
    record, _, checkouts, envs = flask
    dataset, predictions = tmp_path / "verified.jsonl", tmp_path / "predictions.jsonl"
    dataset.write_text(json.dumps(dataclasses.asdict(record)) + "\n")
    gold = {"instance_id": record.instance_id, "model_name_or_path": "gold"}
    predictions.write_text(json.dumps({**gold, "model_patch": record.patch}) + "\n")
    daemon = start_daemon(
        tmp_path / "data", "--checkout-root", str(checkouts), "--swebench-envs", str(envs)
    )
    raw = _raw(record)
    try:
        report = daemon.client_json(
            "swebench", "--dataset", str(dataset), "--predictions", str(predictions)
        )
        (receipt,) = report["receipts"]
        assert receipt["status"] == "resolved", receipt
        with Client(daemon.target, timeout_s=600) as client:
            for name in real.FLASK_LIBRARY_FORGERIES:
                patch = real.flask_library_forgery(checkouts, name)
                got = client.submit(receipt["task_id"], patch.encode(), solver=f"forger-{name}")
                log = client.logs(got["entry"]["seq"])["runs"]["grade"]["text"]
                # the payload ran, and ended the target tests (its reason is in the summary)
                assert f"JBFORGED {name} raised" in log, (name, log[-3000:])
                body = json.loads(base64.b64decode(got["entry"]["payload"]))["body"]
                official = official_grading(raw, patch, log, tmp_path)
                assert body["verdict"]["resolved"] is official, (name, body["verdict"])
                if name == "xfail":
                    assert official, "an xfailed test counts as passed"
                if not official:
                    # pytest's summary names no test on a SKIPPED line: the official parser
                    # reads a skipped target test as missing, so failed
                    assert got["status"] == "unresolved", (name, got["status"])
                    continue
                assert got["status"] == "tampered", (name, body.get("integrity"))
                forged = body["integrity"]["forged"]
                assert "test_get_namespace_keeps_case" in forged, forged
                why = "ran before the patch" if name == "xfail" else "but the runner saw it failed"
                assert why in forged, forged
    finally:
        daemon.stop()


@pytest.mark.slow
def test_an_instance_whose_environment_is_missing_is_not_graded(
    django: tuple[SweBenchRecord, str, Path, Path], tmp_path: Path
) -> None:
    record, _, checkouts, _ = django
    with pytest.raises(swebench.Unsupported) as caught:
        to_contract(record, checkouts, environments=tmp_path / "no-envs")
    assert caught.value.code == swebench.NO_ENVIRONMENT


@pytest.mark.slow
def test_a_relative_envs_directory_installs_into_the_environment_never_the_host(
    flask: tuple[SweBenchRecord, str, Path, Path],
) -> None:
    """The fixture ran `prepare` with relative `--envs` and `--checkout-root`, and checked
    that no host interpreter gained or lost a distribution (`real.prepare_env`). Here:
    the manifest names absolute paths, and the environment's own interpreter holds the
    repository, installed in editable mode from /testbed."""
    _, _, _, envs = flask
    manifest = json.loads((envs / "pallets__flask__2.3" / "jouled-env.json").read_text())
    assert Path(manifest["python"]).is_absolute() and manifest["python"].startswith(str(envs))
    assert all(Path(p).is_absolute() for p in [*manifest["paths"], manifest["bin_dir"]])
    probe = (
        "import importlib.metadata as m; "
        "print(m.distribution('flask').read_text('direct_url.json'))"
    )
    done = subprocess.run(
        [manifest["python"], "-c", probe], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout)["url"] == "file:///testbed", done.stdout
    # The install step ran behind its preamble (and passed it: the fixture's build succeeded).
    log = (envs / "pallets__flask__2.3" / "prepare-1.log").read_text()
    assert "got=$(command -v python)" in log and "pip install -e ." in log


@pytest.mark.slow
def test_a_forged_report_is_tampered_whatever_the_official_verdict_says(
    flask: tuple[SweBenchRecord, str, Path, Path], tmp_path: Path
) -> None:
    """The official parser reads a log the code under test writes; the canaries still see it.

    The forgery makes every report a pass, so the log the official rules read
    says resolved: that verdict is recorded as it is, and the result is `tampered`.
    """
    record, _, checkouts, envs = flask
    contract = to_contract(record, checkouts, environments=envs, timeout_s=600)
    ev = Evaluator(Metering(EstimatorMeter(), None, "exclusive"), MemoryBaselines(), tmp_path)
    forged = parse_patch(real.flask_forgery(checkouts).encode())
    body = ev.evaluate(Attempt(contract, forged, "forger"))
    assert body["status"] == "tampered", body
    assert body["resolved"] is False
    # The integrity monitor names the report factory the package replaced.
    assert "was replaced by code from" in body["integrity"]["forged"], body["integrity"]
    assert body["verdict"]["resolved"] is True  # what the official rules make of the log
    assert body["verdict"]["strict"]["agrees"] is True
    assert any(f["code"] == "pytest-internals" for f in body["audit"])


def test_requirements_are_assembled_as_the_official_harness_assembles_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read at the environment setup commit, `-r` files inlined, the package's own lines out."""
    from jouled.swebench_prepare import requirements_text

    oracle = real.oracle()
    repo = tmp_path / "flask"
    (repo / "requirements").mkdir(parents=True)
    (repo / "requirements" / "dev.txt").write_text(
        "-r tests.txt\n-e .\n# pinned\npytest==8.0\n  .[test]\nblinker\n"
    )
    (repo / "requirements" / "tests.txt").write_text("asgiref\n# a comment\n-e .\nwheel\n")
    real.git(repo, "init", "-q", "-b", "main")
    real.git(repo, "add", "-A")
    real.git(repo, "commit", "-q", "-m", "setup")
    setup = real.git(repo, "rev-parse", "HEAD").strip()
    (repo / "requirements" / "dev.txt").write_text("later\n")  # the tree moved on since
    real.git(repo, "commit", "-q", "-am", "later")

    def served(url: str, headers: object = None) -> object:
        commit, _, rel = url.split("/pallets/flask/", 1)[1].partition("/")
        text = real.git(repo, "show", f"{commit}:{rel}") if commit == setup else None
        return type("Response", (), {"status_code": 200 if text else 404, "text": text or ""})

    monkeypatch.setattr(oracle.test_spec.requests, "get", served, raising=False)
    instance = {"repo": "pallets/flask", "environment_setup_commit": setup}
    spec = harness.spec_for("pallets/flask", "2.3")
    assert spec is not None
    ours = requirements_text(spec, repo, setup)
    assert ours == oracle.test_spec.get_requirements(instance)
    assert ours is not None and "later" not in ours and "-e ." not in ours


@pytest.mark.slow
def test_in_process_forgeries_of_a_django_instance_are_tampered_by_a_real_daemon(
    django: tuple[SweBenchRecord, str, Path, Path], tmp_path: Path
) -> None:
    """A daemon grading a real Django instance through its unittest runner: the gold fix
    resolves at `monitor`, and every forgery (no fix, a payload that proves it ran) is
    `tampered`, naming what was found."""
    record, _, checkouts, envs = django
    dataset, predictions = tmp_path / "verified.jsonl", tmp_path / "predictions.jsonl"
    dataset.write_text(json.dumps(dataclasses.asdict(record)) + "\n")
    gold = {"instance_id": record.instance_id, "model_name_or_path": "gold"}
    predictions.write_text(json.dumps({**gold, "model_patch": record.patch}) + "\n")
    daemon = start_daemon(
        tmp_path / "data", "--checkout-root", str(checkouts), "--swebench-envs", str(envs)
    )
    try:
        report = daemon.client_json(
            "swebench", "--dataset", str(dataset), "--predictions", str(predictions)
        )
        (receipt,) = report["receipts"]
        assert receipt["status"] == "resolved", receipt
        task_id = receipt["task_id"]
        with Client(daemon.target, timeout_s=600) as client:
            for name in real.DJANGO_FORGERIES:
                patch = real.django_forgery(checkouts, name)
                got = client.submit(task_id, patch.encode(), solver=f"forger-{name}")
                tail = got["output_tail"]
                assert f"JBFORGED {name} ran" in tail, (name, tail[-3000:])
                assert got["status"] == "tampered", (name, got["status"], tail[-3000:])
                body = json.loads(base64.b64decode(got["entry"]["payload"]))["body"]
                assert body["integrity"]["level"] == "monitor", body["integrity"]
                assert body["integrity"]["forged"], body["integrity"]
                if name == "self-restoring":  # the failing test was reported a success
                    assert "JBFORGED swallowed" in tail, tail[-3000:]
                if name == "gc-walk":
                    assert "JBFORGED gc refused" in tail
    finally:
        daemon.stop()


# -- SymPy through a real daemon ---------------------------------------------------------

SympyGraded = dict[str, tuple[dict[str, Any], str, str]]  # name -> (result body, log, patch)


@pytest.fixture(scope="module")
def sympy(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweBenchRecord, str, Path, Path]:
    base = tmp_path_factory.mktemp("sympy")
    checkouts, envs = base / "checkouts", base / "envs"
    checkouts.mkdir()
    raw, wrong = real.sympy_instance(checkouts)
    real.prepare_env([raw], checkouts, envs)
    return SweBenchRecord.from_dict(raw, "sympy"), wrong, checkouts, envs


@pytest.fixture(scope="module")
def sympy_graded(
    sympy: tuple[SweBenchRecord, str, Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> SympyGraded:
    """One daemon grades the SymPy instance's gold (as `jb-client swebench` does), the
    empty and the wrong patch, and every in-process forgery; each with its full grade log."""
    record, wrong, checkouts, envs = sympy
    base = tmp_path_factory.mktemp("sympy-daemon")
    dataset, predictions = base / "dataset.jsonl", base / "predictions.jsonl"
    dataset.write_text(json.dumps(dataclasses.asdict(record)) + "\n")
    gold = {"instance_id": record.instance_id, "model_name_or_path": "gold"}
    predictions.write_text(json.dumps({**gold, "model_patch": record.patch}) + "\n")
    daemon = start_daemon(
        base / "data", "--checkout-root", str(checkouts), "--swebench-envs", str(envs)
    )
    graded: SympyGraded = {}
    try:
        report = daemon.client_json(
            "swebench", "--dataset", str(dataset), "--predictions", str(predictions)
        )
        (receipt,) = report["receipts"]
        task_id = receipt["task_id"]
        with Client(daemon.target, timeout_s=600) as client:
            patches = {"empty": "", "wrong": wrong}
            for name in real.SYMPY_FORGERIES:
                patches[name] = real.sympy_forgery(checkouts, name)
            receipts = {"gold": (receipt, record.patch)}
            for name, patch in patches.items():
                receipts[name] = (client.submit(task_id, patch.encode(), solver=name), patch)
            for name, (got, patch) in receipts.items():
                body = json.loads(base64.b64decode(got["entry"]["payload"]))["body"]
                logs = client.logs(got["entry"]["seq"])
                graded[name] = (body, logs["runs"]["grade"]["text"], patch)
    finally:
        daemon.stop()
    return graded


def _raw(record: SweBenchRecord) -> dict[str, Any]:
    return {
        "instance_id": record.instance_id,
        "repo": record.repo,
        "version": record.version,
        "FAIL_TO_PASS": list(record.FAIL_TO_PASS),
        "PASS_TO_PASS": list(record.PASS_TO_PASS),
    }


@pytest.mark.slow
def test_a_real_daemon_resolves_sympys_gold_through_its_sympy_runner(
    sympy_graded: SympyGraded,
) -> None:
    """bin/test runs through the daemon's SymPy runner: the log, read by SymPy's parser,
    is held to the outcomes the runner reported, and nothing is found on the gold fix."""
    body, log, _ = sympy_graded["gold"]
    assert body["status"] == "resolved", body
    assert body["integrity"]["level"] == "monitor", body["integrity"]
    assert body["integrity"]["report"] == "output+channel", body["integrity"]
    assert body["integrity"]["canaries"] == 2, body["integrity"]
    assert not body["integrity"].get("forged"), body["integrity"]
    assert body["verdict"]["rules"].endswith("sympy log parser"), body["verdict"]
    assert "test_rotate_left_keeps_order ok" in log, log[-3000:]


@pytest.mark.slow
def test_a_real_daemon_leaves_sympys_empty_and_wrong_patches_unresolved(
    sympy: tuple[SweBenchRecord, str, Path, Path], sympy_graded: SympyGraded
) -> None:
    record = sympy[0]
    for name in ("empty", "wrong"):
        body, log, _ = sympy_graded[name]
        assert body["status"] == "unresolved", (name, body)
        assert body["integrity"]["level"] == "monitor", (name, body["integrity"])
        assert not body["integrity"].get("forged"), (name, body["integrity"])
        # The runner saw the failing tests fail, as the log says.
        assert set(body["verdict"]["failed"]) == set(record.FAIL_TO_PASS), (name, body)
        assert "test_rotate_left_keeps_order F" in log, (name, log[-3000:])


# What each SymPy forgery is caught by (in the result's `integrity.forged`).
SYMPY_CAUGHT = {
    "print-ok": "the log reports test_rotate passed but the runner saw it failed",
    "reporter-class": "sympy.testing.runtests.PyTestReporter",
    "reporter-instance": "the reporter's test_fail is its instance's own attribute",
    "xpass": "the log reports test_rotate passed but the runner saw it skipped",
    "swallow": "the report says passed but the test raised AssertionError",
    "unobserved": "the report says passed but the test's function never ran",
    "forged-record": "a runner record was asked for by /testbed/sympy/utilities/iterables.py",
}


@pytest.mark.slow
def test_in_process_forgeries_of_a_sympy_instance_are_tampered_by_a_real_daemon(
    sympy_graded: SympyGraded,
) -> None:
    """No fix, a payload in the library the tests import: each makes the log the official
    rules read say resolved (it ran: the regression's failing tests read `ok`), and each
    result is tampered, naming what was found."""
    assert set(SYMPY_CAUGHT) == set(real.SYMPY_FORGERIES)
    for name, caught in SYMPY_CAUGHT.items():
        body, log, _ = sympy_graded[name]
        assert f"JBFORGED {name} ran" in log, (name, log[-3000:])
        assert "test_rotate_left_keeps_order ok" in log, (name, log[-3000:])
        assert body["verdict"]["resolved"] is True, (name, body["verdict"])
        assert body["status"] == "tampered", (name, body)
        assert body["resolved"] is False
        assert body["integrity"]["level"] == "monitor", (name, body["integrity"])
        assert caught in body["integrity"]["forged"], (name, body["integrity"])


@pytest.mark.slow
def test_a_real_daemons_sympy_verdicts_are_the_official_harness_verdicts(
    sympy: tuple[SweBenchRecord, str, Path, Path], sympy_graded: SympyGraded, tmp_path: Path
) -> None:
    """Every log the daemon kept, graded by the official package, gets the verdict the
    daemon recorded (the forgeries' too: the log is what the official rules read)."""
    raw = _raw(sympy[0])
    for name, (body, log, patch) in sympy_graded.items():
        official = official_grading(raw, patch, log, tmp_path)
        # The forgeries' logs say resolved: that is what they are for.
        assert official is (name not in ("empty", "wrong")), (name, log[-3000:])
        assert body["verdict"]["resolved"] is official, (name, body["verdict"])
