"""Who may do what, over real sockets: TLS with tokens on loopback, and the Unix socket."""

from __future__ import annotations

import base64
import grp
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2
from jb_client.api import Client
from jb_client.errors import ClientError

from jouled.auth import add_token
from jouled.errors import Kind
from jouled.ledger.signing import load_public_key, raw_public

from .certs import Certs, make_certs
from .conftest import TASKS, Daemon, start_daemon
from .test_listen import free_port

LRU = TASKS / "smoke" / "lrucache"


class Tls:
    def __init__(self, daemon: Daemon, certs: Certs, tokens: dict[str, str]) -> None:
        self.daemon, self.certs, self.tokens = daemon, certs, tokens

    def client(self, who: str | None) -> Client:
        return Client(
            self.daemon.target, token=self.tokens[who] if who else "", ca=self.certs.ca, env={}
        )

    def cli(self, who: str | None, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JB_")}
        env["JB_CA"] = str(self.certs.ca)
        if who:
            env["JB_TOKEN"] = self.tokens[who]
        return subprocess.run(
            [sys.executable, "-m", "jb_client", "--target", self.daemon.target, *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    root = tmp_path_factory.mktemp("tls")
    certs = make_certs(root / "certs")
    tokens_file = root / "tokens.toml"
    tokens = {
        "alice": add_token(tokens_file, "alice", ["agent"], None),
        "bob": add_token(tokens_file, "bob", ["agent"], "bob/"),
        "audit": add_token(tokens_file, "audit", ["auditor"], None),
        "ops": add_token(tokens_file, "ops", ["operator"], None),
    }
    d = start_daemon(
        root / "data",
        "--tls-cert",
        str(certs.server_cert),
        "--tls-key",
        str(certs.server_key),
        "--tokens",
        str(tokens_file),
        listen=f"127.0.0.1:{free_port()}",
        client_env={"JB_CA": str(certs.ca), "JB_TOKEN": tokens["ops"]},
    )
    yield Tls(d, certs, tokens)
    assert d.stop() == 0, d.log.read_text()


def _reference_patch() -> bytes:
    from jouled.contracts.task import reference_patch

    patch = reference_patch(LRU / "before", LRU / "reference")
    assert patch is not None
    return patch


def test_without_a_token_only_health_and_reflection_answer(tls: Tls) -> None:
    with tls.client(None) as c:
        c.wait_ready(30)  # health needs no credential
        with pytest.raises(ClientError) as err:
            c.tasks()
        assert err.value.kind == Kind.UNAUTHENTICATED
        assert "needs a credential" in err.value.message
    done = tls.cli(None, "tasks")
    assert done.returncode == 2 and "--token" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "service", ["grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"]
)
def test_reflection_answers_anybody_in_both_versions(tls: Tls, service: str) -> None:
    creds = grpc.ssl_channel_credentials(root_certificates=tls.certs.ca.read_bytes())
    with grpc.secure_channel(tls.daemon.target, creds) as channel:
        call = channel.stream_stream(
            f"/{service}/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        replies = list(
            call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=30)
        )
    names = {s.name for s in replies[0].list_services_response.service}
    assert {
        "jouled.v1.Jouled",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    } <= names


def test_an_unknown_token_is_unauthenticated(tls: Tls) -> None:
    tls.tokens["mallory"] = "jb_not-a-real-token"
    with tls.client("mallory") as c, pytest.raises(ClientError) as err:
        c.tasks()
    assert (
        err.value.kind == Kind.UNAUTHENTICATED and "does not know this token" in err.value.message
    )


def test_tls_without_the_ca_fails_with_a_hint(tls: Tls) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JB_")}
    done = subprocess.run(
        [sys.executable, "-m", "jb_client", "--target", tls.daemon.target, "--token", "x", "tasks"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(tls.certs.client_cert)},
    )
    assert done.returncode == 3
    assert "--ca" in done.stderr


@pytest.mark.parametrize(
    ("who", "call", "method"),
    [
        ("alice", lambda c: c.calibrate(1), "Calibrate"),
        ("alice", lambda c: c.run_solver("smoke/lrucache", "reference"), "RunSolver"),
        ("alice", lambda c: list(c.export_stream()), "Export"),
        ("alice", lambda c: c.register_swebench([]), "RegisterSwebench"),
        ("audit", lambda c: c.submit("smoke/lrucache", b""), "Submit"),
        ("audit", lambda c: c.fetch("smoke/lrucache", Path(tempfile.mkdtemp())), "FetchTask"),
        ("audit", lambda c: c.calibrate(1), "Calibrate"),
    ],
)
def test_roles_bound_what_each_caller_may_do(
    tls: Tls, who: str, call: Callable[[Client], object], method: str
) -> None:
    with tls.client(who) as c, pytest.raises(ClientError) as err:
        call(c)
    assert err.value.kind == Kind.PERMISSION_DENIED
    assert f"may not call {method}" in err.value.message


def test_an_auditor_reads_the_ledger(tls: Tls) -> None:
    with tls.client("audit") as c:
        assert c.checkpoint()["size"] >= 1
        assert sum(1 for kind, _ in c.export_stream() if kind == "entry") >= 1
        assert c.frontier()["rows"] is not None


def test_reserved_and_foreign_solver_names_are_refused(tls: Tls) -> None:
    patch = _reference_patch()
    with tls.client("alice") as c:
        for solver, message in (
            ("reference", "reserved"),
            ("noop", "reserved"),
            ("bob/x", "not yours"),
        ):
            with pytest.raises(ClientError) as err:
                c.submit("smoke/lrucache", patch, solver=solver)
            assert err.value.kind == Kind.PERMISSION_DENIED and message in err.value.message
    with tls.client("bob") as c, pytest.raises(ClientError) as err:
        c.submit("smoke/lrucache", patch, solver="alice")
    assert "does not start with 'bob/'" in err.value.message
    # Nothing was signed for any of them.
    with tls.client("audit") as c:
        bodies = [
            json.loads(base64.b64decode(json.loads(line)["payload"]))
            for kind, line in c.export_stream()
            if kind == "entry"
        ]
    assert not [
        b for b in bodies if b["kind"] == "result" and b["body"]["solver"] in ("reference", "noop")
    ]


def test_results_carry_the_credentials_names_and_receipts_come_back_by_key(tls: Tls) -> None:
    patch = _reference_patch()
    with tls.client("bob") as c:
        r = c.submit("smoke/lrucache", patch, solver="bob/v1", idempotency_key="bob-1")
        assert r["status"] == "resolved" and r["solver"] == "bob/v1"
        body = json.loads(base64.b64decode(r["entry"]["payload"]))["body"]
        assert body["agent"] == "bob"
        by_key = c.receipt(idempotency_key="bob-1")
        by_seq = c.receipt(seq=r["seq"])
    assert by_key["seq"] == by_seq["seq"] == r["seq"]
    assert by_key["entry"] == r["entry"] and by_key["proof"]["tree_size"] >= r["proof"]["tree_size"]
    with tls.client("alice") as c:
        default = c.submit("smoke/lrucache", patch)
        assert default["solver"] == "alice"
        with pytest.raises(ClientError) as err:
            c.receipt(idempotency_key="never-used")
        assert err.value.kind == Kind.NOT_FOUND
        with pytest.raises(ClientError) as err:
            c.receipt(seq=0)  # genesis
        assert "not a result" in err.value.message
        assert "jb-client export" in err.value.hint and "tasks" not in err.value.hint
        with pytest.raises(ClientError) as err:
            c.receipt(seq=10**6)
        assert err.value.kind == Kind.NOT_FOUND and "does not exist" in err.value.message
        assert "jb-client export" in err.value.hint and "tasks" not in err.value.hint


def test_public_keys_name_the_key_that_signs(tls: Tls) -> None:
    with tls.client("audit") as c:
        keys = c.public_keys()["keys"]
    pub = load_public_key(tls.daemon.pubkey)
    assert keys[0]["status"] == "current"
    assert keys[0]["keyid"] == hashlib.sha256(raw_public(pub)).hexdigest()
    assert keys[0]["pem"] == tls.daemon.pubkey.read_text()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"solver": "bob/" + "x" * 12_000}, "the limit is 128"),
        ({"solver": "bob/\x1b[2Jevil"}, "not a valid name"),
        ({"solver": "bob/v1", "model": "a b"}, "not a valid name"),
        ({"solver": "bob/v1", "claimed": {"tokens_in": 2**53}}, "out of range"),
        ({"solver": "bob/v1", "run_id": "\n"}, "not a valid name"),
    ],
)
def test_bounded_input_is_refused_before_anything_is_signed(
    tls: Tls, kwargs: dict, message: str
) -> None:
    with tls.client("audit") as c:
        before = c.checkpoint()["size"]
    with tls.client("bob") as c, pytest.raises(ClientError) as err:
        c.submit("smoke/lrucache", _reference_patch(), **kwargs)
    assert err.value.kind == Kind.INVALID_ARGUMENT and message in err.value.message
    with tls.client("audit") as c:
        assert c.checkpoint()["size"] == before
        assert c.tasks()  # still serving


def test_out_of_range_cli_integers_are_usage_errors(tls: Tls) -> None:
    done = tls.cli("audit", "proof", "--seq", str(2**64))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    done = tls.cli("bob", "submit", "--task", "smoke/lrucache", "--patch", "-", "--tokens-in", "-1")
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_mtls_needs_a_client_certificate(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    tokens_file = tmp_path / "tokens.toml"
    token = add_token(tokens_file, "carol", ["agent"], None)
    d = start_daemon(
        tmp_path / "data",
        "--tls-cert",
        str(certs.server_cert),
        "--tls-key",
        str(certs.server_key),
        "--tls-client-ca",
        str(certs.ca),
        "--tokens",
        str(tokens_file),
        listen=f"127.0.0.1:{free_port()}",
        client_env={
            "JB_CA": str(certs.ca),
            "JB_TOKEN": token,
            "JB_CERT": str(certs.client_cert),
            "JB_KEY": str(certs.client_key),
        },
    )
    try:
        assert "smoke/lrucache" in {t["task_id"] for t in d.client_json("tasks")["tasks"]}
        with Client(d.target, token=token, ca=certs.ca, env={}) as c, pytest.raises(ClientError):
            c.tasks()
    finally:
        assert d.stop() == 0


# -- the Unix socket ---------------------------------------------------------------------

NOBODY = 65534


def _as_nobody(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JB_")}
    return subprocess.run(
        [sys.executable, "-m", "jb_client", "--target", target, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "HOME": "/tmp"},
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
    )


@pytest.fixture
def shared_socket_dir() -> Iterator[Path]:
    if os.getuid() != 0:
        pytest.skip("needs root to run a client as another user")
    try:
        subprocess.run([sys.executable, "-c", "pass"], user=NOBODY, group=NOBODY, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("nobody cannot run this interpreter (it lives in a private directory)")
    d = Path(tempfile.mkdtemp(prefix="jouled-sock-"))
    d.chmod(0o755)
    yield d
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


def test_the_socket_group_decides_who_connects_and_peer_rules_give_roles(
    tmp_path: Path, shared_socket_dir: Path
) -> None:
    target = f"unix:{shared_socket_dir / 'jouled.sock'}"
    owner_only = start_daemon(tmp_path / "a", listen=target)
    try:
        done = _as_nobody(target, "tasks")
        assert done.returncode == 3  # mode 0600: nobody cannot even connect
        assert owner_only.client_json("tasks")["tasks"]  # the daemon's own uid is operator
    finally:
        assert owner_only.stop() == 0
    known = {g.gr_gid for g in grp.getgrall()}
    group = grp.getgrgid(NOBODY).gr_name if NOBODY in known else str(NOBODY)
    no_role = start_daemon(tmp_path / "b", "--socket-group", group, listen=target)
    try:
        done = _as_nobody(target, "tasks")
        assert done.returncode == 2 and "needs a credential" in done.stderr
    finally:
        assert no_role.stop() == 0
    agent = start_daemon(
        tmp_path / "c", "--socket-group", group, "--peer-role", f"uid:{NOBODY}=agent", listen=target
    )
    try:
        done = _as_nobody(target, "tasks", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["tasks"]
        done = _as_nobody(target, "calibrate", "--seconds", "1")
        assert done.returncode == 2 and "may not call Calibrate" in done.stderr
    finally:
        assert agent.stop() == 0
