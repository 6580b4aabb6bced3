"""Where the client dials by default: a real Unix socket stands in for the system daemon's."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from jb_client.target import default_target


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
