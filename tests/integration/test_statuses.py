"""Every status a result can carry, crash recovery and `jouled tasks check`, on tasks built here."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Daemon, start_daemon
from .gate import Gate, wait_for
from .test_daemon import make_patch

MOD = "def double(x):\n    return x + x + 1\n"
FIXED = "def double(x):\n    return x + x\n"
# The fix, held when the tests import it: it writes `started` into its working tree and
# waits there for a `release` file (`gate.Gate` sees and releases it from outside).
HELD_FIX = (
    "import pathlib, time\n"
    "_tree = pathlib.Path.cwd()\n"
    "(_tree / 'started').write_text('')\n"
    "while not (_tree / 'release').exists():\n"
    "    time.sleep(0.01)\n\n"
) + FIXED
TESTS = textwrap.dedent(
    """
    from pkg.mod import double

    def test_zero_is_defined():
        double(0)

    def test_double():
        assert double(2) == 4
    """
)


def write_task(
    root: Path,
    name: str,
    *,
    toml_extra: str = "",
    tests: str = TESTS,
    mod: str = MOD,
    cmd: str = '["python", "-m", "pytest", "tests"]',
    reference: bool = True,
    timeout_s: int = 3,
) -> Path:
    task = root / "local" / name
    (task / "before" / "pkg").mkdir(parents=True)
    (task / "before" / "tests").mkdir()
    (task / "before" / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    (task / "before" / "pkg" / "__init__.py").write_text("")
    (task / "before" / "pkg" / "mod.py").write_text(mod)
    (task / "before" / "tests" / "test_mod.py").write_text(tests)
    if reference:
        (task / "reference" / "pkg").mkdir(parents=True)
        (task / "reference" / "pkg" / "mod.py").write_text(FIXED)
    (task / "task.toml").write_text(
        f'name = "{name}"\nprompt = "double() is off by one"\ntest_cmd = {cmd}\n'
        f'test_files = ["tests/**"]\ntimeout_s = {timeout_s}\n{toml_extra}'
    )
    return task


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tasks")
    write_task(root, "plain")
    write_task(root, "slow", timeout_s=60)
    write_task(
        root,
        "fixed",
        mod=FIXED,
        reference=False,
        toml_extra='fail_to_pass = ["tests/test_mod.py::test_double"]\n'
        'pass_to_pass = ["tests/test_mod.py::test_zero_is_defined"]\n',
    )
    write_task(
        root,
        "broken",
        cmd='["no-such-test-runner-on-path"]',
        reference=False,
        toml_extra='fail_to_pass = ["tests/test_mod.py::test_double"]\npass_to_pass = []\n',
    )
    return root


@pytest.fixture(scope="module")
def local(tasks: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("statuses") / "data", tasks=tasks)
    yield d
    assert d.stop() == 0


def reached_tests(client: subprocess.Popen[str]) -> bool:
    """Read a submitting client's progress until its attempt's tests start running."""
    assert client.stderr is not None
    return any("running the tests" in line for line in client.stderr)


def submit(d: Daemon, task: str, patch: Path, *extra: str) -> dict:
    return d.client_json("submit", "--task", task, "--patch", str(patch), *extra)


def test_a_hanging_patch_times_out(local: Daemon, tasks: Path, tmp_path: Path) -> None:
    patch = make_patch(
        tmp_path,
        tasks / "local" / "plain",
        {"pkg/mod.py": "def double(x):\n    while True:\n        pass\n"},
    )
    receipt = submit(local, "local/plain", patch)
    assert receipt["status"] == "timeout" and receipt["resolved"] is False


def test_a_task_whose_tests_already_pass_is_invalid(
    local: Daemon, tasks: Path, tmp_path: Path
) -> None:
    patch = make_patch(tmp_path, tasks / "local" / "fixed", {"pkg/extra.py": "X = 1\n"})
    receipt = submit(local, "local/fixed", patch)
    assert receipt["status"] == "invalid" and receipt["resolved"] is False
    rows = local.client_json("frontier")["rows"]
    assert all(r["resolved"] == 0 for r in rows if r["solver"] == "remote" and r["invalid"])


def test_an_infrastructure_fault_is_an_error_and_the_daemon_keeps_serving(
    local: Daemon, tasks: Path, tmp_path: Path
) -> None:
    patch = make_patch(tmp_path, tasks / "local" / "broken", {"pkg/mod.py": FIXED})
    receipt = submit(local, "local/broken", patch)
    assert receipt["status"] == "error"
    body = json.loads(base64.b64decode(receipt["entry"]["payload"]))["body"]
    assert "no-such-test-runner-on-path" in body["error"]
    assert local.client_json("tasks", "--suite", "local")["tasks"]


def test_tasks_check_reports_bad_tasks(tasks: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jouled", "tasks", "check", "--tasks", str(tasks), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    reports = {r["task_id"]: r for r in json.loads(done.stdout)["tasks"]}
    assert reports["local/plain"]["ok"] is True
    assert reports["local/plain"]["fail_to_pass"] == ["tests/test_mod.py::test_double"]
    assert reports["local/plain"]["pass_to_pass"] == ["tests/test_mod.py::test_zero_is_defined"]
    assert reports["local/fixed"]["ok"] is False
    assert "already pass" in reports["local/fixed"]["reason"]
    assert reports["local/broken"]["ok"] is False


def test_a_crash_mid_attempt_is_aborted_and_a_retry_yields_one_result(
    tasks: Path, tmp_path: Path
) -> None:
    patch = make_patch(tmp_path, tasks / "local" / "slow", {"pkg/mod.py": HELD_FIX})
    d = start_daemon(tmp_path / "data", tasks=tasks)
    gate = Gate(tmp_path / "data")
    d.client_json("run", "--suite", "local", "--solvers", "noop")  # baseline recorded
    size = d.ledger_size()
    key = "crash-retry-1"
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jb_client",
            "--target",
            d.target,
            "submit",
            "--task",
            "local/slow",
            "--patch",
            str(patch),
            "--idempotency-key",
            key,
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reached_tests(client)
    gate.wait_held(1)  # the kill lands while the test run is held
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(timeout=10)
    gate.release_all()  # a run the killed daemon left behind ends
    client.communicate(timeout=30)
    assert client.returncode != 0

    again = start_daemon(tmp_path / "data", tasks=tasks)
    try:
        export = tmp_path / "ledger.jsonl"
        assert again.client("export", "--out", str(export)).returncode == 0
        docs = [
            json.loads(base64.b64decode(json.loads(line)["payload"]))
            for line in export.read_text().splitlines()
        ]
        aborts = [d for d in docs[size:] if d["kind"] == "abort"]
        assert len(aborts) == 1 and aborts[0]["body"]["idempotency_key"] == key
        releaser = threading.Thread(target=lambda: gate.release(gate.wait_held(1)[0]))
        releaser.start()  # the retry's own run, let go once held
        receipt = submit(again, "local/slow", patch, "--idempotency-key", key)
        releaser.join()
        assert receipt["status"] == "resolved"
        replay = submit(again, "local/slow", patch, "--idempotency-key", key)
        assert replay["seq"] == receipt["seq"] and replay["replayed"] is True
        assert again.client("export", "--out", str(export)).returncode == 0
        results = [
            json.loads(base64.b64decode(json.loads(line)["payload"]))
            for line in export.read_text().splitlines()
        ]
        keyed = [
            r for r in results if r["kind"] == "result" and r["body"].get("idempotency_key") == key
        ]
        assert len(keyed) == 1
        verified = again.client("verify", str(export), "--pubkey", str(again.pubkey))
        assert verified.returncode == 0, verified.stderr
    finally:
        assert again.stop() == 0


def test_sigterm_lets_a_running_attempt_finish(tasks: Path, tmp_path: Path) -> None:
    patch = make_patch(tmp_path, tasks / "local" / "slow", {"pkg/mod.py": HELD_FIX})
    d = start_daemon(tmp_path / "data", tasks=tasks)
    gate = Gate(tmp_path / "data")
    d.client_json("run", "--suite", "local", "--solvers", "noop")
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jb_client",
            "--target",
            d.target,
            "submit",
            "--task",
            "local/slow",
            "--patch",
            str(patch),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reached_tests(client)  # a drain, not a refusal at the door
    held = gate.wait_held(1)
    d.proc.send_signal(signal.SIGTERM)
    wait_for("the daemon to take the signal", lambda: "received SIGTERM" in d.log.read_text())
    gate.release(held[0])  # the daemon, told to stop, still waits for the held run
    assert d.proc.wait(timeout=120) == 0, d.log.read_text()
    out, err = client.communicate(timeout=30)
    assert client.returncode == 0, err
    assert json.loads(out)["status"] == "resolved"
