"""Listening on TCP: TLS, or plaintext on loopback with --insecure; never plaintext off it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jouled.auth import add_token

from .conftest import TASKS, Daemon, free_port, start_daemon


def test_a_loopback_tcp_listener_serves_a_token_holder(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    token = add_token(tokens, "alice", ["agent"], None)
    d = start_daemon(
        tmp_path / "data",
        "--insecure",
        "--tokens",
        str(tokens),
        listen=f"127.0.0.1:{free_port()}",
        client_env={"JB_INSECURE": "1", "JB_TOKEN": token},
    )
    try:
        tasks = d.client_json("tasks")["tasks"]
        assert "smoke/lrucache" in {t["task_id"] for t in tasks}
        assert not (d.data_dir / "jouled.sock").exists()
    finally:
        assert d.stop() == 0


def test_a_public_listener_without_tls_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jouled",
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--tasks",
            str(TASKS),
            "--energy",
            "estimator",
            "--calibrate-seconds",
            "0",
            "--listen",
            f"0.0.0.0:{free_port()}",
            "--insecure",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3
    assert "without TLS" in done.stderr
    assert "--tls-cert" in done.stderr


def test_an_unreachable_daemon_exits_3(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jb_client", "--target", f"unix:{tmp_path / 'none.sock'}", "tasks"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3
    assert "cannot reach the daemon" in done.stderr and "jouled serve" in done.stderr


def test_no_daemon_at_a_path_named_jouled_still_says_how_to_start_one(tmp_path: Path) -> None:
    # The default socket, and the systemd unit's, are /run/jouled/jouled.sock.
    missing = tmp_path / "jouled" / "jouled.sock"
    done = subprocess.run(
        [sys.executable, "-m", "jb_client", "--target", f"unix:{missing}", "tasks"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3
    assert "cannot reach the daemon" in done.stderr and "jouled serve" in done.stderr


def test_the_daemons_refusals_keep_their_hint_in_the_python_api(daemon: Daemon) -> None:
    from jb_client.api import Client
    from jb_client.errors import ClientError

    from jouled.errors import Kind

    with Client(daemon.target) as client:
        try:
            client.submit("smoke/no-such-task", b"", solver="me")
        except ClientError as err:
            refused = err
        else:
            raise AssertionError("an unknown task was accepted")
    assert refused.kind == Kind.NOT_FOUND
    assert "smoke/no-such-task" in refused.message and "hint:" not in refused.message
    assert refused.hint, refused.diagnostics()
