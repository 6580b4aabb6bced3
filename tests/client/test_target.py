"""Where the client dials by default: a real Unix socket stands in for the system daemon's."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jb_client.target import SYSTEM_SOCKET, default_target, normalise, problem


@pytest.fixture
def listening(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "run" / "jouled.sock"
    path.parent.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        sock.listen(1)
        yield path


def test_the_system_daemons_socket_is_the_default_where_it_listens(
    listening: Path, tmp_path: Path
) -> None:
    home = {"HOME": str(tmp_path)}
    assert default_target(home, str(listening)) == f"unix:{listening}"
    # An explicit data dir or target still wins.
    data = {**home, "JOULED_HOME": str(tmp_path / "data")}
    assert default_target(data, str(listening)) == f"unix:{tmp_path / 'data' / 'jouled.sock'}"
    assert default_target({**home, "JB_TARGET": "dns:h:1"}, str(listening)) == "dns:h:1"


def test_without_a_system_socket_the_data_dirs_socket_is_the_default(tmp_path: Path) -> None:
    not_a_socket = tmp_path / "jouled.sock"
    not_a_socket.write_text("")
    for missing in (str(not_a_socket), str(tmp_path / "absent.sock")):
        got = default_target({"JOULED_HOME": "", "HOME": str(tmp_path)}, missing)
        assert got.startswith("unix:") and got.endswith("/.local/share/jouled/jouled.sock"), got


def test_the_target_help_names_the_defaults_in_the_order_they_are_tried(tmp_path: Path) -> None:
    """`--target`'s help says where the client dials without it, in `default_target`'s
    order, and names the sockets it really falls back to."""
    done = jb("--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    said = text[text.index("--target") : text.index("--fleet")]
    # The last resort, as the user's home directory is written: ~/...
    last = default_target({}, str(tmp_path / "absent.sock")).removeprefix("unix:")
    home = str(Path.home())
    assert last.startswith(home + "/"), last
    tried = ["$JB_TARGET", "$JOULED_HOME", SYSTEM_SOCKET, "~" + last.removeprefix(home)]
    at = [said.find(name) for name in tried]
    assert -1 not in at and at == sorted(at), (tried, said)


@pytest.mark.parametrize(
    "target",
    ["unix:/run/jouled/jouled.sock", "localhost:50051", "127.0.0.1:1", "[::1]:65535", "dns:h:1"],
)
def test_addresses_the_client_can_dial(target: str) -> None:
    assert problem(normalise(target)) is None


@pytest.mark.parametrize(
    "target", ["127.0.0.1:99999", "127.0.0.1:0", "http://x", ":::", "bogus", "[/]", "h:", "unix:"]
)
def test_what_is_not_an_address_is_a_usage_error_naming_the_forms(target: str) -> None:
    done = jb("--target", target, "tasks")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"target {target!r} is not unix:PATH or HOST:PORT" in done.stderr, done.stderr
    assert "hint:" in done.stderr


def test_an_unreachable_daemon_is_one_readable_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a loopback port with nothing listening: bound, never listened
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        done = jb("--insecure", "--target", f"127.0.0.1:{port}", "tasks")
    assert done.returncode == 3, done.stderr
    first, hint = done.stderr.splitlines()
    assert first == f"error: cannot reach the daemon at 127.0.0.1:{port}: Connection refused"
    assert hint.startswith("  hint: ")
    missing = tmp_path / "no.sock"
    done = jb("--target", f"unix:{missing}", "tasks")
    assert done.returncode == 3, done.stderr
    assert done.stderr.splitlines()[0] == (
        f"error: cannot reach the daemon at unix:{missing}: No such file or directory"
    )


def jb(*args: str) -> subprocess.CompletedProcess[str]:
    """The real `jb-client ARGS`, wide enough that no line wraps."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JB_")}
    return subprocess.run(
        [sys.executable, "-m", "jb_client", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "COLUMNS": "400"},
    )
