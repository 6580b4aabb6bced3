"""One hostile agent among several, trying to exhaust what the others need, against a real daemon.

Each attack is made by `mallory` (an agent token, like `alice` and `bob`) on a
real `jouled serve` over its Unix socket, where a bearer token names the caller.
Each test shows the attack reached the daemon (its refusal names the bound, or
the held calls are counted), that the bound held, and that the others were
served meanwhile. Nothing here waits on a clock: every wait is for an event the
daemon sends or a condition on its state.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from jb_client.api import Client
from jb_client.errors import ClientError

from jouled import limits
from jouled.auth import add_token
from jouled.best_of_k import k_ladder
from jouled.config import Config
from jouled.errors import Kind
from jouled.startup import open_ledger
from jouled.v1 import jouled_pb2 as pb

from .conftest import Daemon, start_daemon
from .gate import TASK, Gate, fix_patch, hold_patch, wait_for, write_tasks

AGENTS = ("alice", "bob", "mallory", "mallory2", "mallory3")
BIG = "gate/big"  # a task whose tree is larger than any stream's flow-control window
BIG_FILES = 16
BIG_FILE_BYTES = 2 << 20
PER_AGENT = 2  # --attempts-per-agent of the daemons here


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_tasks(tmp_path_factory.mktemp("exhaustion-tasks"))
    hold = root / "gate" / "hold"
    big = root / "gate" / "big"
    (big / "before" / "tests").mkdir(parents=True)
    for rel in ("pytest.ini", "calc.py", "tests/test_calc.py"):
        (big / "before" / rel).write_bytes((hold / "before" / rel).read_bytes())
    blobs = big / "before" / "blobs"
    blobs.mkdir()
    for i in range(BIG_FILES):
        (blobs / f"blob{i:02d}.bin").write_bytes(os.urandom(BIG_FILE_BYTES))
    (big / "task.toml").write_text(
        (hold / "task.toml").read_text().replace('name = "hold"', 'name = "big"')
    )
    return root


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("exhaustion-tokens") / "tokens.toml"
    return path, {name: add_token(path, name, ["agent"], None) for name in AGENTS}


def serve(root: Path, tasks: Path, tokens: Path, *extra: str) -> Daemon:
    return start_daemon(
        root / "data",
        "--tokens",
        str(tokens),
        "--workers",
        "1",
        "--attempts-per-agent",
        str(PER_AGENT),
        "--heartbeat",
        "0.2",
        *extra,
        tasks=tasks,
    )


@pytest.fixture(scope="module")
def jd(
    tmp_path_factory: pytest.TempPathFactory, tasks: Path, tokens: tuple[Path, dict[str, str]]
) -> Iterator[Daemon]:
    d = serve(tmp_path_factory.mktemp("exhaustion"), tasks, tokens[0])
    yield d
    Gate(d.data_dir).release_all()
    assert d.stop() == 0, d.log.read_text()


def as_agent(d: Daemon, tokens: tuple[Path, dict[str, str]], name: str) -> Client:
    return Client(d.target, token=tokens[1][name], timeout_s=120, env={})


def refused(call: Callable[[], Any]) -> ClientError:
    with pytest.raises(ClientError) as err:
        call()
    return err.value


def healthy(client: Client) -> bool:
    reply = health_pb2_grpc.HealthStub(client._channel).Check(
        health_pb2.HealthCheckRequest(service="jouled.v1.Jouled"), timeout=60
    )
    return reply.status == health_pb2.HealthCheckResponse.SERVING


class Submitting:
    """One agent's submission on its own thread, its progress kept as it arrives."""

    def __init__(self, client: Client, patch: bytes, key: str, task: str = TASK) -> None:
        self.phases: list[tuple[str, str]] = []
        self.receipt: dict[str, Any] | None = None
        self.error: ClientError | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()

        def run() -> None:
            try:
                self.receipt = client.submit(
                    task, patch, idempotency_key=key, progress=self._see
                ).to_dict()
            except ClientError as err:
                self.error = err
            finally:
                self.done.set()

        threading.Thread(target=run, daemon=True).start()

    def _see(self, phase: str, message: str) -> None:
        with self._lock:
            self.phases.append((phase, message))

    def saw(self, phase: str) -> list[str]:
        with self._lock:
            return [m for p, m in self.phases if p == phase]

    def join(self) -> dict[str, Any]:
        wait_for("the submission to end", self.done.is_set)
        assert self.receipt is not None, self.error
        return self.receipt


def payloads(d: Daemon, tmp: Path) -> list[dict[str, Any]]:
    out = tmp / "ledger.jsonl"
    done = d.client("export", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return [
        {
            "seq": json.loads(line)["seq"],
            **json.loads(base64.b64decode(json.loads(line)["payload"])),
        }
        for line in out.read_text().splitlines()
    ]


# -- every read bounded ------------------------------------------------------------------------


def test_a_rollout_past_the_bound_is_refused_before_anything_is_signed(
    jd: Daemon, tokens: tuple[Path, dict[str, str]], tasks: Path, tmp_path: Path
) -> None:
    fix = fix_patch(tasks, tmp_path)
    with as_agent(jd, tokens, "mallory") as mallory:
        size = jd.ledger_size()
        for rollout in (1_000_000, limits.ROLLOUT_MAX + 1):
            err = refused(partial(mallory.submit, TASK, fix, rollout=rollout))
            assert err.kind == Kind.INVALID_ARGUMENT
            assert f"rollout {rollout} is out of range" in err.message
            assert f"0 to {limits.ROLLOUT_MAX:,}" in err.message
            err = refused(partial(mallory.open_window, "tool", rollout=rollout))
            assert err.kind == Kind.INVALID_ARGUMENT and "rollout" in err.message
        assert jd.ledger_size() == size  # refused before anything was signed
        # The bound itself is in bounds, and the daemon kept serving.
        receipt = mallory.submit(TASK, fix, run_id="bound", rollout=limits.ROLLOUT_MAX)
        # Past it, a submit that lets the daemon number it is refused as well.
        err = refused(partial(mallory.submit, TASK, fix, run_id="bound"))
        assert err.kind == Kind.INVALID_ARGUMENT
        assert f"has used rollout {limits.ROLLOUT_MAX:,}, the last index" in err.message
    body = json.loads(base64.b64decode(receipt["entry"]["payload"]))["body"]
    assert receipt["status"] == "resolved" and body["rollout"] == limits.ROLLOUT_MAX


def test_best_of_k_of_a_hostile_ledger_is_small_and_paged(
    tmp_path: Path, tasks: Path, tokens: tuple[Path, dict[str, str]]
) -> None:
    """A result numbered rollout 1,000,000 (signed before the bound existed) costs
    best-of-k 120 rows, not a million, and no answer holds more than a page."""
    d = serve(tmp_path, tasks, tokens[0])
    try:
        with as_agent(d, tokens, "mallory") as mallory:
            honest = mallory.submit(TASK, fix_patch(tasks, tmp_path), rollout=3)
    finally:
        assert d.stop() == 0, d.log.read_text()
    # The hostile result, as a daemon without the bound signed it: the same body, renumbered.
    [signed] = [p for p in payloads_of(d) if p["kind"] == "result"]
    ledger = open_ledger(Config(data_dir=d.data_dir, task_dirs=(tasks,)).validated())
    try:
        ledger.append("result", {**signed["body"], "rollout": 1_000_000, "solver": "hostile"})
    finally:
        ledger.close()
    d = serve(tmp_path, tasks, tokens[0])
    try:
        with as_agent(d, tokens, "alice") as alice:
            rows = alice.best_of_k("gate")["rows"]
            hostile = [r for r in rows if r["solver"] == "hostile"]
            assert [r["k"] for r in hostile] == k_ladder(1_000_001)
            assert len(hostile) == 120 and hostile[-1]["k"] == 1_000_001
            assert [r["k"] for r in rows if r["solver"] == "mallory"] == [1, 2, 3, 4]
            # One page at a time: every answer is bounded, and the pages add up.
            page = alice._doc(alice._stub.BestOfK, pb.FrontierRequest(suite="gate", page_size=50))
            assert len(page["rows"]) == 50 and page["rows_total"] == len(rows) == 124
            seen, token = list(page["rows"]), page["next_page_token"]
            while token:
                page = alice._doc(
                    alice._stub.BestOfK,
                    pb.FrontierRequest(suite="gate", page_size=50, page_token=token),
                )
                seen += page["rows"]
                token = page["next_page_token"]
            assert seen == rows
            asked = pb.FrontierRequest(suite="gate", page_size=10**9)
            assert len(alice._doc(alice._stub.BestOfK, asked)["rows"]) == 124  # <= the maximum
            bad = pb.FrontierRequest(suite="gate", page_token="../../etc")
            err = refused(lambda: alice._doc(alice._stub.Frontier, bad))
            assert err.kind == Kind.INVALID_ARGUMENT and "page_token" in err.message
            assert healthy(alice)
            frontier = alice.frontier("gate")["rows"]
            one = pb.FrontierRequest(suite="gate", page_size=1)
            first = alice._doc(alice._stub.Frontier, one)
            assert first["rows"] == frontier[:1] and first["rows_total"] == len(frontier) == 2
            one.page_token = first["next_page_token"]
            second = alice._doc(alice._stub.Frontier, one)
            assert second["rows"] == frontier[1:] and second["next_page_token"] == ""
            [row] = [r for r in frontier if r["solver"] == "mallory"]
            assert row["attempts"] == 1 and honest["status"] == "resolved"
    finally:
        assert d.stop() == 0, d.log.read_text()


def payloads_of(d: Daemon) -> list[dict[str, Any]]:
    ledger = open_ledger(Config(data_dir=d.data_dir).validated())
    try:
        return [json.loads(e.payload) for e in ledger.entries()]
    finally:
        ledger.close()


def hold_reads(client: Client, n: int) -> list[Any]:
    """n FetchTask streams of the big task, each read one file in and then left unread."""
    streams = []
    for _ in range(n):
        stream = client._stub.FetchTask(pb.FetchTaskRequest(task_id=BIG))
        next(stream)  # the daemon is sending: it holds a read place until the stream ends
        streams.append(stream)
    return streams


def test_streams_left_unread_cannot_take_the_threads_health_needs(
    jd: Daemon, tokens: tuple[Path, dict[str, str]]
) -> None:
    clients = {name: as_agent(jd, tokens, name) for name in AGENTS}
    held: list[Any] = []
    try:
        held += hold_reads(clients["mallory"], 4)
        # A fifth read of the same credential is refused at once, naming the bound.
        err = refused(clients["mallory"].tasks)
        assert err.kind == Kind.RESOURCE_EXHAUSTED
        assert "mallory already has 4 reads in progress" in err.message
        assert "4 per credential" in err.message
        assert healthy(clients["alice"]) and clients["alice"].tasks()  # others are served
        # Colluding credentials take every read place: reads are refused, health answers.
        held += hold_reads(clients["mallory2"], 4) + hold_reads(clients["mallory3"], 4)
        err = refused(clients["alice"].tasks)
        assert err.kind == Kind.RESOURCE_EXHAUSTED
        assert "12 reads in progress on this daemon; the limit is 12" in err.message
        for client in clients.values():
            assert healthy(client)
    finally:
        for stream in held:
            stream.cancel()

    def alice_reads() -> bool:
        try:
            return bool(clients["alice"].tasks())
        except ClientError as err:
            assert err.kind == Kind.RESOURCE_EXHAUSTED, err
            return False

    wait_for("the read places to come back", alice_reads)
    for client in clients.values():
        client.close()


# -- fair use of the host -----------------------------------------------------------------------


def test_one_agent_cannot_fill_the_attempt_queue(
    jd: Daemon, tokens: tuple[Path, dict[str, str]], tasks: Path, tmp_path: Path
) -> None:
    fix, hold = fix_patch(tasks, tmp_path), hold_patch(tasks, tmp_path)
    gate = Gate(jd.data_dir)
    with (
        as_agent(jd, tokens, "mallory") as mallory,
        as_agent(jd, tokens, "alice") as alice,
    ):
        running = Submitting(mallory, hold, "m-running")
        [tree] = gate.wait_held(1)
        queued = Submitting(mallory, fix, "m-queued")
        wait_for("mallory's second attempt to queue", lambda: bool(queued.saw("queued")))
        err = refused(lambda: mallory.submit(TASK, fix, idempotency_key="m-refused"))
        assert err.kind == Kind.RESOURCE_EXHAUSTED
        assert f"mallory already has {PER_AGENT} attempts queued or running" in err.message
        assert "per credential" in err.message and "same idempotency key" in err.hint
        # Waiting on its own running attempt again and again takes places too.
        err = refused(lambda: mallory.submit(TASK, hold, idempotency_key="m-running"))
        assert err.kind == Kind.RESOURCE_EXHAUSTED and "per credential" in err.message
        # Another agent still gets a place in the queue behind them.
        other = Submitting(alice, fix, "a-queued")
        wait_for("alice's attempt to queue", lambda: bool(other.saw("queued")))
        gate.release(tree)
        for s in (running, queued, other):
            assert s.join()["status"] == "resolved"
        # Its places came back: the same key is accepted now, and graded once.
        assert mallory.submit(TASK, fix, idempotency_key="m-refused")["status"] == "resolved"


def test_a_whole_host_window_delays_others_grading_by_at_most_its_bound(
    tmp_path: Path, tasks: Path, tokens: tuple[Path, dict[str, str]]
) -> None:
    """Mallory holds the host with a window and reopens it as soon as it ends; alice's
    and bob's grading waits for the window open when they arrived and no longer."""
    assert Config().op_window_max_s == 300  # minutes, by default
    d = serve(tmp_path, tasks, tokens[0], "--op-window-max-s", "3")
    fix, hold = fix_patch(tasks, tmp_path), hold_patch(tasks, tmp_path)
    try:
        with (
            as_agent(d, tokens, "mallory") as mallory,
            as_agent(d, tokens, "alice") as alice,
            as_agent(d, tokens, "bob") as bob,
        ):
            # The task's baseline is recorded first, so alice's attempt waits only to grade.
            assert alice.submit(TASK, fix, idempotency_key="alice-warm")["resolved"]
            first = mallory.open_window("episode")
            assert first.attribution == "whole-host" and first.max_s == 3
            waiting = Submitting(alice, fix, "alice-waits")
            wait_for("alice's grading to wait for the host", lambda: bool(waiting.saw("wait")))
            said = waiting.saw("wait")[0]
            assert "op window, open at most 3 s" in said and "mallory" not in said
            queued = Submitting(bob, hold, "bob-queued")
            wait_for("bob's attempt to queue", lambda: bool(queued.saw("queued")))
            # Reopened while grading waits: the window no longer takes the host.
            again = mallory.open_window("episode")
            assert again.attribution != "whole-host"
            assert first.wait()["end"] == "deadline"  # the daemon ended it at its bound
            assert waiting.join()["status"] == "resolved"
            # Reopened at once when it ends, with bob's attempt still to grade: not the host.
            third = mallory.open_window("episode")
            assert third.attribution != "whole-host"
            [tree] = Gate(d.data_dir).wait_held(1)
            Gate(d.data_dir).release(tree)
            assert queued.join()["status"] == "resolved"
            for w in (again, third):
                w.close()

            # Nobody waits now: a window holds the host again.
            def whole_host() -> bool:
                with mallory.op("episode") as w:
                    return w.attribution == "whole-host"

            wait_for("a whole-host window once grading is done", whole_host)
        docs = payloads(d, tmp_path)
        seq = {
            d_["body"].get("window_id") or d_["body"].get("idempotency_key"): d_["seq"]
            for d_ in docs
            if d_["kind"] in ("op", "result")
        }
        # Alice's result was signed after the window she waited for ended, and bob's too.
        assert seq[first.id] < seq["alice-waits"] < seq["bob-queued"]
    finally:
        assert d.stop() == 0, d.log.read_text()


def test_one_agent_cannot_hold_every_op_window(
    jd: Daemon, tokens: tuple[Path, dict[str, str]]
) -> None:
    with (
        as_agent(jd, tokens, "mallory") as mallory,
        as_agent(jd, tokens, "alice") as alice,
    ):
        windows = [mallory.open_window(f"w{i}") for i in range(4)]
        err = refused(lambda: mallory.open_window("w4"))
        assert err.kind == Kind.RESOURCE_EXHAUSTED and "per agent" in err.message
        with alice.op("mine") as w:
            assert w.id
        for w in windows:
            w.close()
