"""A submit that names no rollout is numbered by the daemon: never on an earlier one's index.

Two attempts by one solver at one task in one run both recorded at rollout 0 would
read, in best-of-k, as two samples of the first rollout: k = 1 would count both.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from jb_client.api import Client

from jouled.v1 import jouled_pb2 as pb

from .conftest import Daemon
from .test_daemon import LRU, make_patch, submit


def rollout(receipt: dict[str, Any]) -> int:
    return int(json.loads(base64.b64decode(receipt["entry"]["payload"]))["body"]["rollout"])


def test_submits_without_a_rollout_take_the_next_free_index(
    fresh_daemon: Daemon, tmp_path: Path
) -> None:
    fix = make_patch(tmp_path, LRU, {}, reference=True)
    first = submit(fresh_daemon, fix, "smoke/lrucache", "--solver", "me", "--run-id", "r")
    second = submit(fresh_daemon, fix, "smoke/lrucache", "--solver", "me", "--run-id", "r")
    assert [rollout(first), rollout(second)] == [0, 1]
    # Best-of-k reads them as two rollouts: one sample each, k = 1 and k = 2.
    rows = [r for r in fresh_daemon.client_json("bestofk")["rows"] if r["solver"] == "me"]
    assert [(r["k"], r["attempts"]) for r in rows] == [(1, 1), (2, 2)]

    # Another run, another solver: each numbered from 0.
    other_run = submit(fresh_daemon, fix, "smoke/lrucache", "--solver", "me", "--run-id", "s")
    other_solver = submit(fresh_daemon, fix, "smoke/lrucache", "--solver", "you", "--run-id", "r")
    assert [rollout(other_run), rollout(other_solver)] == [0, 0]

    # A named index is taken as given; the next unnamed one goes above it.
    named = submit(
        fresh_daemon, fix, "smoke/lrucache", "--solver", "me", "--run-id", "r", "--rollout", "5"
    )
    after = submit(fresh_daemon, fix, "smoke/lrucache", "--solver", "me", "--run-id", "r")
    assert [rollout(named), rollout(after)] == [5, 6]

    # A retry under the same key replays its receipt and uses up no index.
    key = ("--idempotency-key", "retry-1")
    once = submit(fresh_daemon, fix, "smoke/lrucache", "--solver", "me", "--run-id", "r", *key)
    again = submit(fresh_daemon, fix, "smoke/lrucache", "--solver", "me", "--run-id", "r", *key)
    assert again["replayed"] and rollout(once) == rollout(again) == 7
    last = submit(fresh_daemon, fix, "smoke/lrucache", "--solver", "me", "--run-id", "r")
    assert rollout(last) == 8

    # The receipt line says which rollout the daemon recorded.
    shown = fresh_daemon.client(
        "submit", "--task", "smoke/lrucache", "--patch", str(fix), "--solver", "me", "--run-id", "r"
    )
    assert shown.returncode == 0, shown.stderr
    assert "rollout 9" in shown.stdout


def test_submits_in_flight_together_never_share_an_index(
    fresh_daemon: Daemon, tmp_path: Path
) -> None:
    fix = make_patch(tmp_path, LRU, {}, reference=True)
    argv = [
        sys.executable,
        "-m",
        "jb_client",
        "--target",
        fresh_daemon.target,
        "submit",
        "--task",
        "smoke/lrucache",
        "--patch",
        str(fix),
        "--solver",
        "me",
        "--json",
    ]

    def one(_: int) -> dict[str, Any]:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True)
        return dict(json.loads(done.stdout))

    with ThreadPoolExecutor(3) as pool:
        receipts = list(pool.map(one, range(3)))
    assert sorted(rollout(r) for r in receipts) == [0, 1, 2]


def test_a_rollout_and_next_rollout_together_are_refused(fresh_daemon: Daemon) -> None:
    with Client(fresh_daemon.target) as c:
        request = pb.SubmitRequest(
            task_id="smoke/lrucache",
            patch=b"",
            rollout=3,
            next_rollout=True,
            idempotency_key="both",
        )
        with pytest.raises(grpc.RpcError) as caught:
            list(c._stub.Submit(request))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "rollout 3 and next_rollout both set" in str(caught.value.details())
    assert fresh_daemon.client("tasks").returncode == 0  # and the daemon serves on
