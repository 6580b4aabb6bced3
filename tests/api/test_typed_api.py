"""The Python API's answers are typed documents whose `to_dict()` is the CLI's --json, and
every failure is a ClientError with a kind and a hint, bad inputs included."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from jb_client.api import Client
from jb_client.documents import Checkpoint, Receipt
from jb_client.errors import HINTS, ClientError

from jouled.documents.parts import Energy
from jouled.errors import Kind
from tests.integration.conftest import Daemon, start_daemon

HERE = Path(__file__).resolve().parent
FIX = HERE.parent / "docs" / "fixtures" / "lrucache-fix.diff"
TASK = "smoke/lrucache"


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("typed") / "data")
    yield d
    assert d.stop() == 0, d.log.read_text()


def test_the_typed_users_script_runs(typed: Daemon, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "typed_user.py"), typed.target, str(tmp_path), str(FIX)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok ")


def test_to_dict_is_what_the_cli_prints(typed: Daemon, tmp_path: Path) -> None:
    with Client(typed.target) as client:
        tasks = client.tasks()
        receipt = client.submit(TASK, FIX.read_bytes(), solver="typed/raw")
        frontier = client.frontier()
        best = client.best_of_k()
        again = client.receipt(seq=receipt.seq)
    assert typed.client_json("tasks") == {"tasks": [t.to_dict() for t in tasks]}
    assert typed.client_json("frontier")["rows"] == frontier.to_dict()["rows"]
    assert typed.client_json("bestofk")["rows"] == best.to_dict()["rows"]
    shown = typed.client_json("receipt", "--seq", str(receipt.seq))
    for key in ("seq", "status", "energy", "entry", "tests", "leaf_hash"):
        assert shown[key] == again.to_dict()[key] == receipt.to_dict()[key], key
    assert receipt["seq"] == receipt.seq and "energy" in receipt  # the raw form by key


def test_a_receipt_parsed_and_written_back_is_the_same_object(typed: Daemon) -> None:
    with Client(typed.target) as client:
        receipt = client.submit(TASK, FIX.read_bytes(), solver="typed/roundtrip")
    raw = receipt.to_dict()
    assert Receipt.parse(json.loads(json.dumps(raw))).to_dict() == raw
    assert isinstance(receipt.joules["grade"], Energy)


def test_energy_is_in_joules_and_seconds() -> None:
    window: Any = {
        "gross_mj": 9640,
        "idle_mj": 2632,
        "marginal_mj": 7008,
        "wall_ms": 642,
        "wall_us": 642417,
        "domains": {"package-0": 9640, "dram": None},
        "source": "rapl",
        "attribution": "exclusive",
        "valid": True,
        "reliable": True,
    }
    e = Energy.of(window)
    assert (e.gross_j, e.idle_j, e.marginal_j, e.wall_s) == (9.64, 2.632, 7.008, 0.642417)
    assert e.domains_j == {"package-0": 9.64, "dram": None}
    assert e.to_dict() == window
    invalid = Energy.of({"gross_mj": None, "valid": False, "wall_ms": 5, "source": "rapl"})
    assert invalid.gross_j is None and invalid.wall_s == 0.005 and not invalid.valid


# -- bad inputs are ClientErrors, before anything is sent ------------------------------------


@pytest.fixture
def offline(tmp_path: Path) -> Iterator[Client]:
    """A client whose daemon does not exist: these calls must fail before any is sent."""
    with Client(tmp_path / "nobody.sock") as client:  # a Path target
        yield client


@pytest.mark.parametrize(
    ("claimed", "words"),
    [
        ({"usd": 0.5}, "usd_micros=round(usd * 1e6)"),
        ({"joules": 3}, "joules_mj"),
        ({"usd_micros": 1.5}, "as an int"),
        ({"usd_micros": -1}, "from 0 to"),
        ({"tokens_in": 2**53}, "from 0 to"),
        ({"tokens_out": True}, "as an int"),
    ],
)
def test_claims_are_checked_with_a_hint(
    offline: Client, claimed: dict[str, Any], words: str
) -> None:
    with pytest.raises(ClientError) as caught:
        offline.submit(TASK, b"", claimed=claimed)
    assert caught.value.kind == Kind.INVALID_ARGUMENT and words in caught.value.hint


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.submit(TASK, "--- a/x\n+++ b/x\n"),  # text, not bytes
        lambda c: c.submit(TASK, b"", rollout=-1),
        lambda c: c.submit(1, b""),
        lambda c: c.receipt(seq=-1),
        lambda c: c.receipt(),
        lambda c: c.logs(-3),
        lambda c: c.proof(2**64),
        lambda c: c.calibrate(1.5),
        lambda c: c.register_swebench([{"bad": object()}]),
    ],
)
def test_malformed_calls_are_client_errors(offline: Client, call: Any) -> None:
    with pytest.raises(ClientError) as caught:
        call(offline)
    assert caught.value.kind == Kind.INVALID_ARGUMENT and caught.value.hint


@pytest.mark.parametrize(
    ("call", "bound"),
    [
        (lambda c: c.submit(TASK, b"", rollout=10_001), "from 0 to 10,000"),
        (lambda c: c.calibrate(601), "from 0 to 600"),
    ],
)
def test_a_range_hint_names_the_daemon_s_own_bound(offline: Client, call: Any, bound: str) -> None:
    with pytest.raises(ClientError) as caught:
        call(offline)
    assert caught.value.kind == Kind.INVALID_ARGUMENT and bound in caught.value.hint


def test_a_closed_client_says_so(tmp_path: Path) -> None:
    client = Client(tmp_path / "nobody.sock")
    client.close()
    with pytest.raises(ClientError) as caught:
        client.tasks()  # gRPC's own "Cannot invoke RPC on closed channel!" is a ValueError
    assert caught.value.kind == Kind.FAILED_PRECONDITION and "new Client" in caught.value.hint


@pytest.mark.parametrize("timeout_s", [-1, 0, "30"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(tmp_path: Path, timeout_s: Any) -> None:
    with pytest.raises(ClientError) as caught:
        Client(tmp_path / "nobody.sock", timeout_s=timeout_s)
    assert caught.value.kind == Kind.INVALID_ARGUMENT and "seconds" in caught.value.hint


def test_an_absent_daemon_is_unavailable_with_a_hint(offline: Client) -> None:
    with pytest.raises(ClientError) as caught:
        offline.tasks()
    assert caught.value.kind == Kind.UNAVAILABLE and "jouled serve" in caught.value.hint


def test_every_kind_has_a_hint() -> None:
    assert set(HINTS) == set(Kind) and all(HINTS.values())
    assert ClientError("x", Kind.NOT_FOUND).hint == HINTS[Kind.NOT_FOUND]


def test_the_daemons_refusals_carry_a_hint(typed: Daemon) -> None:
    with Client(typed.target) as client:
        with pytest.raises(ClientError) as unknown:
            client.task("smoke/no-such-task")
        with pytest.raises(ClientError) as bad_name:
            client.submit(TASK, b"", solver="has a space")
        with pytest.raises(ClientError) as no_result:
            client.receipt(idempotency_key="nobody-used-this-key")
    for err, kind in (
        (unknown.value, Kind.NOT_FOUND),
        (bad_name.value, Kind.INVALID_ARGUMENT),
        (no_result.value, Kind.NOT_FOUND),
    ):
        assert err.kind == kind and err.hint and err.message, err.diagnostics()


class _Refusal(grpc.RpcError, grpc.Call):
    """A gRPC error as the channel raises it, without a daemon to make it."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: Any = ()) -> None:
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing

    def initial_metadata(self) -> Any:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float | None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Any) -> bool:
        return False


@pytest.mark.parametrize(
    ("refusal", "kind", "words"),
    [
        (_Refusal(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"), Kind.UNAVAILABLE,
         "timeout_s"),
        (_Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, "Sent message larger than max"),
         Kind.RESOURCE_EXHAUSTED, "16 MiB"),
        (_Refusal(grpc.StatusCode.NOT_FOUND, "no task 'x'", (("jouled-error", "not_found"),)),
         Kind.NOT_FOUND, "jb-client tasks"),
        (_Refusal(grpc.StatusCode.INVALID_ARGUMENT, "bad\n  hint: do this",
                  (("jouled-error", "invalid_argument"),)), Kind.INVALID_ARGUMENT, "do this"),
        (_Refusal(grpc.StatusCode.UNKNOWN, "odd"), Kind.INTERNAL, "log"),
    ],
)  # fmt: skip
def test_every_grpc_error_becomes_a_client_error_with_a_hint(
    offline: Client, refusal: _Refusal, kind: Kind, words: str
) -> None:
    err = offline._error(refusal)
    assert err.kind == kind and words in err.hint, err.diagnostics()


def test_answers_the_client_cannot_read_are_client_errors() -> None:
    from jb_client.api import _answer

    with pytest.raises(ClientError) as caught:
        _answer(Checkpoint, {"size": "3"})
    assert caught.value.kind == Kind.INTERNAL and "upgrade" in caught.value.hint


def test_grpc_errors_never_escape(typed: Daemon) -> None:
    """A refusal is never grpc.RpcError, whichever call made it."""
    with Client(typed.target) as client:
        for call in (lambda: client.logs(10**9), lambda: client.proof(10**9)):
            try:
                call()
            except ClientError as err:
                assert err.hint
            except grpc.RpcError as err:  # pragma: no cover - the failure this guards
                raise AssertionError(f"a raw gRPC error: {err}") from None
