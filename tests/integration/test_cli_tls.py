"""TLS going wrong, as a new user meets it: one error line and a hint that names the
fix, never gRPC's own log lines, and a file that is not PEM refused before dialling."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Daemon, free_port, start_daemon

# gRPC's C core logs as "I1207 03:17:31.024995   26429 file.cc:2563] ...".
CORE_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d", re.MULTILINE)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon listening in plaintext on loopback."""
    d = start_daemon(
        tmp_path_factory.mktemp("plain") / "data",
        "--insecure",
        listen=f"127.0.0.1:{free_port()}",
        client_env={"JB_INSECURE": "1"},
    )
    yield d
    if d.proc.poll() is None:
        d.stop(signal.SIGKILL)


def jb(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real `jb-client ARGS`, with none of the user's JB_ or GRPC_ settings."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JB_", "GRPC_"))}
    return subprocess.run(
        [sys.executable, "-m", "jb_client", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "COLUMNS": "400", **env},
    )


def test_tls_to_a_plaintext_loopback_daemon_hints_insecure(plain: Daemon) -> None:
    done = jb("--target", plain.target, "tasks")
    assert done.returncode == 3, done.stderr
    assert not CORE_LOG.search(done.stderr), done.stderr
    error, hint = done.stderr.splitlines()
    assert error.startswith(f"error: TLS with {plain.target} failed: "), error
    assert "last error" not in error and "the daemon did not answer in TLS" in error, error
    assert hint.startswith("  hint: ") and "--insecure" in hint, hint


def test_the_user_s_own_grpc_logging_is_left_alone(plain: Daemon) -> None:
    done = jb("--target", plain.target, "tasks", GRPC_VERBOSITY="INFO")
    assert done.returncode == 3, done.stderr
    assert CORE_LOG.search(done.stderr), done.stderr


def test_a_ca_that_is_not_pem_is_a_usage_error(plain: Daemon) -> None:
    done = jb("--ca", "/etc/passwd", "--target", plain.target, "tasks")
    assert done.returncode == 2, done.stderr
    assert not CORE_LOG.search(done.stderr), done.stderr
    error, hint = done.stderr.splitlines()
    assert error == "error: the CA certificate /etc/passwd is not a PEM certificate"
    assert "--ca" in hint


def test_a_missing_ca_names_the_option(plain: Daemon, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent.pem"
    done = jb("--ca", str(missing), "--target", plain.target, "tasks")
    assert done.returncode == 2, done.stderr
    error, hint = done.stderr.splitlines()
    assert error == f"error: cannot read the CA certificate {missing}: No such file or directory"
    assert "--ca" in hint, hint


def test_a_metered_command_sees_the_user_s_environment(daemon: Daemon) -> None:
    code = "import os, sys; sys.exit(3 if any(k.startswith('GRPC_') for k in os.environ) else 0)"
    done = jb(
        "--target", daemon.target, "meter-run", "--label", "env", "--", sys.executable, "-c", code
    )
    assert done.returncode == 0, done.stderr
