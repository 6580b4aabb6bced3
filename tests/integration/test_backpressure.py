"""The bounded attempt queue over a real socket: refusals, positions, heartbeats, cancellation.

Each daemon here has one worker and room for two waiting attempts. The worker
is held by a `gate/hold` attempt until the test releases it, so the queue is
full exactly when the test says so; every wait is on an event or a condition.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from jb_client.api import Client
from jb_client.errors import ClientError

from jouled.errors import Kind

from .conftest import Daemon, start_daemon
from .gate import (
    TASK,
    Call,
    Gate,
    fix_patch,
    hold_patch,
    submit_request,
    wait_for,
    write_tasks,
)

QUEUE_LIMIT = 2


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("gate-tasks"))


@pytest.fixture
def patches(tasks: Path, tmp_path: Path) -> tuple[bytes, bytes]:
    return fix_patch(tasks, tmp_path), hold_patch(tasks, tmp_path)


@pytest.fixture
def small(tasks: Path, tmp_path: Path) -> Iterator[Daemon]:
    d = start_daemon(
        tmp_path / "data",
        "--workers",
        "1",
        "--queue-limit",
        str(QUEUE_LIMIT),
        "--heartbeat",
        "0.2",
        tasks=tasks,
    )
    yield d
    Gate(d.data_dir).release_all()
    assert d.stop() == 0, d.log.read_text()


def _ledger(d: Daemon, tmp_path: Path) -> list[dict]:
    out = tmp_path / "ledger.jsonl"
    done = d.client("export", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return [
        json.loads(base64.b64decode(json.loads(line)["payload"]))
        for line in out.read_text().splitlines()
    ]


def _keys(docs: list[dict], kind: str) -> list[str]:
    return [d["body"].get("idempotency_key", "") for d in docs if d["kind"] == kind]


def _log_says(d: Daemon, text: str) -> Callable[[], bool]:
    return lambda: text in d.log.read_text()


def _hold_the_worker(d: Daemon, hold: bytes, key: str = "held") -> tuple[Call, Path]:
    call = Call(d.target, submit_request(hold, key))
    [tree] = Gate(d.data_dir).wait_held(1)
    return call, tree


def test_a_full_queue_refuses_at_once_while_health_and_reads_answer(
    small: Daemon, patches: tuple[bytes, bytes]
) -> None:
    fix, hold = patches
    held, tree = _hold_the_worker(small, hold)
    first = Call(small.target, submit_request(fix, "first"))
    first.wait_queued_at(1)
    second = Call(small.target, submit_request(fix, "second"))
    second.wait_queued_at(2)
    # A queued call hears from the daemon while it waits.
    first.wait(
        "a heartbeat while queued",
        lambda c: any(p.phase == "heartbeat" and p.queue_position == 1 for p in c.progress()),
    )

    with Client(small.target, timeout_s=60) as c:
        with pytest.raises(ClientError) as err:
            c.submit(TASK, fix, idempotency_key="refused")
        assert err.value.kind == Kind.RESOURCE_EXHAUSTED
        assert f"{QUEUE_LIMIT} of {QUEUE_LIMIT} attempts waiting" in err.value.message
        # The refusal came while the worker was still held: it did not wait for one.
        assert Gate(small.data_dir).held() == [tree]
        # Every worker busy and the queue full: health and reads still answer.
        health = health_pb2_grpc.HealthStub(c._channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service="jouled.v1.Jouled"), timeout=60)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        assert TASK in {t["task_id"] for t in c.tasks()}
        assert c.task(TASK)["fail_to_pass"]
        assert c.checkpoint()["size"] >= 1
    done = small.client("submit", "--task", TASK, "--patch", "-", input=fix)
    assert done.returncode == 2 and "queue is full" in done.stderr, done.stderr

    Gate(small.data_dir).release(tree)
    for call in (held, first, second):
        call.join()
        assert call.error is None, call.error
        assert call.receipt is not None and call.receipt["status"] == "resolved"
    # The second call moved up as the queue drained.
    assert [p.queue_position for p in second.progress() if p.phase == "queued"][:2] == [2, 1]
    with Client(small.target) as c, pytest.raises(ClientError) as err:
        c.receipt(idempotency_key="refused")
    assert err.value.kind == Kind.NOT_FOUND


def test_a_call_that_ends_before_its_attempt_starts_is_dropped(
    small: Daemon, patches: tuple[bytes, bytes], tmp_path: Path
) -> None:
    fix, hold = patches
    held, tree = _hold_the_worker(small, hold)
    cancelled = Call(small.target, submit_request(fix, "cancelled-queued"))
    cancelled.wait_queued_at(1)
    # Its deadline passes while the worker is held (the worker waits for the test, not a clock).
    expired = Call(small.target, submit_request(fix, "expired-queued"), timeout_s=1)
    cancelled.cancel()
    expired.join()
    assert expired.error is not None
    assert expired.error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    cancelled.join()
    assert cancelled.error is not None and cancelled.error.code() == grpc.StatusCode.CANCELLED
    for key in ("cancelled-queued", "expired-queued"):
        wait_for(f"{key} dropped", _log_says(small, f"(key {key}) dropped"))
    # Both left the queue: the next call is first in line.
    after = Call(small.target, submit_request(fix, "after"))
    after.wait_queued_at(1)

    Gate(small.data_dir).release(tree)
    for call in (held, after):
        call.join()
        assert call.receipt is not None and call.receipt["status"] == "resolved"
    docs = _ledger(small, tmp_path)
    for key in ("cancelled-queued", "expired-queued"):
        assert key not in _keys(docs, "result") + _keys(docs, "abort")
    assert sorted(_keys(docs, "result")) == ["after", "held"]


def test_a_call_cancelled_while_its_attempt_runs_is_an_abort_no_frontier_counts(
    small: Daemon, patches: tuple[bytes, bytes], tmp_path: Path
) -> None:
    fix, hold = patches
    running, tree = _hold_the_worker(small, hold, key="cancelled-running")
    running.cancel()
    running.join()
    assert running.error is not None and running.error.code() == grpc.StatusCode.CANCELLED
    wait_for(
        "the daemon to see the call end",
        _log_says(small, "(key cancelled-running): its call ended while it ran"),
    )
    Gate(small.data_dir).release(tree)

    def aborted() -> bool:
        return "cancelled-running" in _keys(_ledger(small, tmp_path), "abort")

    wait_for("the abort entry", aborted)
    docs = _ledger(small, tmp_path)
    assert "cancelled-running" not in _keys(docs, "result")
    abort = next(d for d in docs if d["kind"] == "abort")
    assert abort["body"]["task_id"] == TASK and "cancelled" in abort["body"]["reason"]
    assert small.client_json("frontier", "--suite", "gate")["rows"] == []
    # A later result for the same solver is the only one its row counts.
    with Client(small.target) as c:
        assert c.submit(TASK, fix, solver="gate", idempotency_key="counted")["resolved"]
        [row] = c.frontier("gate")["rows"]
        with pytest.raises(ClientError) as err:
            c.receipt(idempotency_key="cancelled-running")
        assert err.value.kind == Kind.NOT_FOUND
    assert row["attempts"] == 1 and row["resolved"] == 1


def test_an_empty_patch_is_a_signed_unresolved(small: Daemon, tmp_path: Path) -> None:
    empty = tmp_path / "empty.diff"
    empty.write_bytes(b"")
    receipt = small.client_json("submit", "--task", TASK, "--patch", str(empty))
    assert receipt["status"] == "unresolved" and receipt["resolved"] is False
    body = json.loads(base64.b64decode(receipt["entry"]["payload"]))["body"]
    # The official harness counts an empty prediction unresolved: the pristine tree is graded.
    assert body["patch_sha256"] == receipt["patch_sha256"] == hashlib.sha256(b"").hexdigest()
    assert body["tests"] == {"expected": 1, "passed": 0, "failed": 1, "missing": 0}
    # Signed like any result: the export verifies, this entry included.
    export = tmp_path / "ledger.jsonl"
    assert small.client("export", "--out", str(export)).returncode == 0
    verified = small.client("verify", str(export), "--pubkey", str(small.pubkey))
    assert verified.returncode == 0, verified.stderr
    seqs = [json.loads(line)["seq"] for line in export.read_text().splitlines()]
    assert receipt["seq"] in seqs
