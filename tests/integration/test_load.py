"""64 clients at once against a small queue: one result per accepted call, else a clear refusal.

Each client makes a fixed number of submissions (not calls for a fixed time).
The first meets a daemon whose workers are busy and whose queue is full, so
every one is refused whatever the machine's speed; the second is retried with
the same idempotency key, each time some call in flight has ended, until it is
accepted, so the same key meets refusals and then exactly one result. A prober
calls health `Check`, `ListTasks` and `Checkpoint` throughout.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from jb_client.api import Client
from jb_client.errors import ClientError

from jouled.errors import Kind

from .conftest import start_daemon
from .gate import TASK, Call, Gate, fix_patch, hold_patch, submit_request, write_tasks

CLIENTS = 64
ROUNDS = 2  # one refused round, then one that retries until accepted
WORKERS = 2
QUEUE_LIMIT = 4
PROBE_TIMEOUT_S = 60


class Prober:
    """Health Check and ListTasks in a loop on their own channel until stopped."""

    def __init__(self, target: str) -> None:
        self.client = Client(target, timeout_s=PROBE_TIMEOUT_S)
        self.health = health_pb2_grpc.HealthStub(self.client._channel)
        self.answered = 0
        self.failures: list[str] = []
        self.size = 0  # the ledger's, as last seen
        self._grew = threading.Condition()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def probe(self) -> None:
        try:
            reply = self.health.Check(
                health_pb2.HealthCheckRequest(service="jouled.v1.Jouled"), timeout=PROBE_TIMEOUT_S
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            assert TASK in {t["task_id"] for t in self.client.tasks()}
            size = int(self.client.checkpoint()["size"])
        except (grpc.RpcError, ClientError, AssertionError) as err:
            self.failures.append(repr(err))
        else:
            self.answered += 1
            with self._grew:
                self.size = size
                self._grew.notify_all()

    def wait_past(self, size: int) -> None:
        """Until the ledger holds more than `size` entries: some call in flight has ended."""
        with self._grew:
            assert self._grew.wait_for(lambda: self.size > size or self.stop.is_set(), 300)

    def _run(self) -> None:
        while True:
            self.probe()
            # Paced, so the prober does not take a core from the daemon it measures.
            if self.stop.wait(0.02):
                self.probe()  # one more once the load is over
                return

    def __enter__(self) -> Prober:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.client.close()


@pytest.mark.timeout(600)
def test_64_clients_get_one_result_per_accepted_call_and_a_clear_refusal_otherwise(
    tmp_path: Path,
) -> None:
    tasks = write_tasks(tmp_path / "tasks")
    fix, hold = fix_patch(tasks, tmp_path), hold_patch(tasks, tmp_path)
    d = start_daemon(
        tmp_path / "data",
        "--workers",
        str(WORKERS),
        "--queue-limit",
        str(QUEUE_LIMIT),
        tasks=tasks,
    )
    gate = Gate(d.data_dir)
    accepted: dict[str, int] = {}  # idempotency key -> receipt seq
    refused: list[str] = []
    unexpected: list[str] = []
    lock = threading.Lock()
    first_round = threading.Barrier(CLIENTS + 1)
    go = threading.Event()

    def submit(c: Client, key: str) -> bool:
        """One call; True when it was refused."""
        try:
            receipt = c.submit(TASK, fix, idempotency_key=key)
        except ClientError as err:
            with lock:
                if err.kind == Kind.RESOURCE_EXHAUSTED and "queue is full" in err.message:
                    refused.append(key)
                    return True
                unexpected.append(f"{key}: {err.kind} {err.message}")
        else:
            with lock:
                accepted[key] = receipt["seq"]
        return False

    def client(n: int, prober: Prober) -> None:
        with Client(d.target, timeout_s=300) as c:
            submit(c, f"load-{n}-0")
            first_round.wait()
            go.wait()
            for r in range(1, ROUNDS):
                key = f"load-{n}-{r}"
                size = prober.size
                while submit(c, key):
                    # Refused while the queue was full: retry with the same key once
                    # some call in flight has ended (each ending frees a place).
                    prober.wait_past(size)
                    size = prober.size

    try:
        with Prober(d.target) as prober:
            # Every worker busy, the queue full: the first round can only be refused. One
            # worker runs a held attempt; the other's attempt waits for the host, since
            # metered phases take turns (attribution `exclusive`).
            held = [Call(d.target, submit_request(hold, "held"))]
            gate.wait_held(1)
            held.append(Call(d.target, submit_request(fix, "behind-held")))
            held[-1].wait("its grade phase", lambda c: "grade" in {p.phase for p in c.progress()})
            queued = []
            for i in range(QUEUE_LIMIT):
                queued.append(Call(d.target, submit_request(fix, f"queued-{i}")))
                queued[-1].wait_queued_at(i + 1)
            threads = [threading.Thread(target=client, args=(n, prober)) for n in range(CLIENTS)]
            for t in threads:
                t.start()
            first_round.wait()
            assert len(refused) == CLIENTS and not accepted and not unexpected
            prober.probe()  # answered with every worker busy and the queue full
            gate.release_all()
            go.set()
            for t in threads:
                t.join()
            for call in (*held, *queued):
                call.join()
                assert call.receipt is not None, call.error
                accepted[_key(call)] = call.receipt["seq"]
        assert not prober.failures, prober.failures
        assert prober.answered >= 2
        assert not unexpected, unexpected
        # The first round was refused, every later submission accepted in the end.
        assert len(accepted) == CLIENTS * (ROUNDS - 1) + WORKERS + QUEUE_LIMIT
        assert {f"load-{n}-0" for n in range(CLIENTS)} <= set(refused)

        out = tmp_path / "ledger.jsonl"
        assert d.client("export", "--out", str(out)).returncode == 0
        docs = [
            json.loads(base64.b64decode(json.loads(line)["payload"]))
            for line in out.read_text().splitlines()
        ]
        results = Counter(doc["body"]["idempotency_key"] for doc in docs if doc["kind"] == "result")
        assert set(results) == set(accepted)
        assert set(results.values()) == {1}
        seq_of = {
            doc["body"]["idempotency_key"]: doc["seq"] for doc in docs if doc["kind"] == "result"
        }
        assert seq_of == accepted
        assert not [doc for doc in docs if doc["kind"] == "abort"]
    finally:
        gate.release_all()
        assert d.stop() == 0, d.log.read_text()


def _key(call: Call) -> str:
    body = json.loads(base64.b64decode(call.receipt["entry"]["payload"]))["body"]  # type: ignore[index]
    return str(body["idempotency_key"])
