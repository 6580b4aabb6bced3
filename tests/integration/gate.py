"""A task whose graded run the test holds and releases, to fill a daemon's workers at will.

`gate/hold` is a one-test task. Its test passes once `calc.value()` returns 2.
A tree that holds a file named `hold` (which the HOLD patch adds) makes the
test write `started` into its working tree and wait there until a file named
`release` appears beside it: the test sees which attempts are running from
outside the sandbox and lets each go when it chooses. Without `hold` the run is
as short as a pytest run can be. Nothing here depends on how long anything takes.
"""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from jouled.patch import diff_trees
from jouled.v1 import jouled_pb2 as pb
from jouled.v1 import jouled_pb2_grpc as pb_grpc

TASK = "gate/hold"
TEST_ID = "tests/test_calc.py::test_value"
# A bound on every wait below: reached only when something is broken.
PATIENCE_S = 300.0

_TEST = textwrap.dedent(
    """
    import pathlib
    import time

    from calc import value


    def test_value():
        tree = pathlib.Path.cwd()
        if (tree / "hold").exists():
            (tree / "started").write_text("")
            while not (tree / "release").exists():
                time.sleep(0.01)
        assert value() == 2
    """
)


def write_tasks(root: Path) -> Path:
    """A tasks dir holding the `gate` suite; returns it."""
    task = root / "gate" / "hold"
    (task / "before" / "tests").mkdir(parents=True)
    (task / "before" / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    (task / "before" / "calc.py").write_text("def value():\n    return 1\n")
    (task / "before" / "tests" / "test_calc.py").write_text(_TEST)
    (task / "task.toml").write_text(
        'name = "hold"\nprompt = "value() should be 2"\n'
        'test_cmd = ["python", "-m", "pytest", "tests"]\ntest_files = ["tests/**"]\n'
        f'timeout_s = 600\nfail_to_pass = ["{TEST_ID}"]\npass_to_pass = []\n'
    )
    return root


def _patch(root: Path, scratch: Path, hold: bool) -> bytes:
    before = root / "gate" / "hold" / "before"
    old, new = scratch / "old", scratch / "new"
    for tree in (old, new):
        tree.mkdir(parents=True)
        (tree / "calc.py").write_text((before / "calc.py").read_text())
    (new / "calc.py").write_text("def value():\n    return 2\n")
    if hold:
        (new / "hold").write_text("")
    return diff_trees(old, new)


def fix_patch(root: Path, scratch: Path) -> bytes:
    """Fixes calc.py: resolved, and quick."""
    return _patch(root, scratch / "fix", hold=False)


def hold_patch(root: Path, scratch: Path) -> bytes:
    """Fixes calc.py and adds `hold`: resolved once released."""
    return _patch(root, scratch / "hold", hold=True)


def wait_for(what: str, condition: Callable[[], bool], patience_s: float = PATIENCE_S) -> None:
    """Poll a condition; fail (never pass) when it does not come true within patience."""
    deadline = time.monotonic() + patience_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


class Gate:
    """The held attempts of one daemon, seen through their working trees."""

    def __init__(self, data_dir: Path) -> None:
        self.work = data_dir / "work"

    def held(self) -> list[Path]:
        """Trees whose test is waiting to be released."""
        return sorted(
            p.parent for p in self.work.glob("attempt-*/tree/started") if not _released(p.parent)
        )

    def wait_held(self, n: int) -> list[Path]:
        wait_for(f"{n} held attempts", lambda: len(self.held()) >= n)
        return self.held()

    def release(self, tree: Path) -> None:
        (tree / "release").write_text("")
        os.chmod(tree / "release", 0o644)

    def release_all(self) -> None:
        for tree in self.held():
            self.release(tree)


def _released(tree: Path) -> bool:
    return (tree / "release").exists()


def stub(target: str) -> tuple[grpc.Channel, pb_grpc.JouledStub]:
    """A plain channel to a daemon's Unix socket (the tests' uid is an operator there)."""
    channel = grpc.insecure_channel(target)
    return channel, pb_grpc.JouledStub(channel)


def submit_request(patch: bytes, key: str, solver: str = "gate") -> pb.SubmitRequest:
    return pb.SubmitRequest(task_id=TASK, patch=patch, solver=solver, idempotency_key=key)
