"""A task whose graded run the test holds and releases, and a streaming Submit to watch.

`gate/hold` is a one-test task. Its test passes once `calc.value()` returns 2.
A tree that holds a file named `hold` (which the HOLD patch adds) makes the
test write `started` into its working tree and wait there until a file named
`release` appears beside it: the test sees which attempts are running from
outside the sandbox and lets each go when it chooses. Without `hold` the run is
as short as a pytest run can be. Nothing here depends on how long anything takes.
"""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from jouled.patch_diff import diff_trees
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


class Call:
    """One streaming Submit on its own thread, its events kept as they arrive."""

    def __init__(
        self, target: str, request: pb.SubmitRequest, timeout_s: float | None = None
    ) -> None:
        self.channel, self._stub = stub(target)
        self.events: list[pb.AttemptEvent] = []
        self.receipt: dict | None = None
        self.error: grpc.RpcError | None = None
        self._cond = threading.Condition()
        self._done = False
        self._call = self._stub.Submit(request, timeout=timeout_s)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._call:
                with self._cond:
                    self.events.append(event)
                    if event.HasField("receipt"):
                        self.receipt = json.loads(event.receipt.json)
                    self._cond.notify_all()
        except grpc.RpcError as err:
            self.error = err
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()
            self.channel.close()

    def progress(self) -> list[pb.Progress]:
        with self._cond:
            return [e.progress for e in self.events if e.HasField("progress")]

    def wait(self, what: str, condition: Callable[[Call], bool]) -> None:
        wait_for(what, lambda: condition(self) or self.finished)
        assert condition(self), f"{what}: the call ended first ({self.error})"

    def wait_queued_at(self, position: int) -> None:
        self.wait(
            f"queue position {position}",
            lambda c: any(
                p.phase == "queued" and p.queue_position == position for p in c.progress()
            ),
        )

    @property
    def finished(self) -> bool:
        with self._cond:
            return self._done

    def join(self) -> Call:
        self._thread.join()
        return self

    def cancel(self) -> None:
        self._call.cancel()
