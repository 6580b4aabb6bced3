"""A real `jouled serve` subprocess on a Unix socket, driven by the real `jb-client`.

On the Unix socket the tests' own uid is the daemon's, so they call as operator
(the daemon maps its own uid and root to that role); `client_env` carries a
token, CA or loopback mode for daemons that listen on TCP.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jb_client.api import Client
from jb_client.errors import ClientError

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "tasks"


@dataclass
class Daemon:
    data_dir: Path
    proc: subprocess.Popen[bytes]
    log: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    listen: str = ""  # set when the daemon listens elsewhere than its default socket

    @property
    def target(self) -> str:
        return self.listen or f"unix:{self.data_dir / 'jouled.sock'}"

    @property
    def pubkey(self) -> Path:
        return self.data_dir / "jouled.pub"

    def client(self, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jb_client", "--target", self.target, *args],
            capture_output=True,
            text=True,
            timeout=300,
            input=None if input is None else input.decode(),
            env={**os.environ, **self.extra_env},
        )

    def client_json(self, *args: str) -> Any:
        done = self.client(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def ledger_size(self) -> int:
        return int(self.client_json("checkpoint")["size"])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)


def free_port() -> int:
    """A loopback TCP port free at the time of asking."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_serving(
    target: str, proc: subprocess.Popen[bytes], log: Path, env: dict[str, str] | None = None
) -> None:
    try:
        with Client(target, env={**os.environ, **(env or {})}) as client:
            client.wait_ready(60, alive=lambda: proc.poll() is None)
    except ClientError as err:
        raise AssertionError(f"{err.message}:\n{log.read_text()}") from None


def start_daemon(
    data_dir: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    tasks: Path = TASKS,
    listen: str = "",
    client_env: dict[str, str] | None = None,
) -> Daemon:
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir.parent / f"{data_dir.name}.log"
    argv = [
        sys.executable,
        "-m",
        "jouled",
        "serve",
        "--data-dir",
        str(data_dir),
        "--tasks",
        str(tasks),
        "--energy",
        "estimator",
        "--calibrate-seconds",
        "0",
        "--grace",
        "20",
        *(("--listen", listen) if listen else ()),
        *extra,
    ]
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    daemon = Daemon(data_dir, proc, log, extra_env=dict(client_env or {}), listen=listen)
    wait_serving(daemon.target, proc, log, daemon.extra_env)
    return daemon


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("jouled") / "data")
    yield d
    assert d.stop() == 0, d.log.read_text()


@pytest.fixture
def fresh_daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = start_daemon(tmp_path / "data")
    yield d
    if d.proc.poll() is None:
        d.stop(signal.SIGKILL)
