"""`jouled tokens add`, run as an operator runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ADD = [sys.executable, "-m", "jouled", "tokens", "add", "--name", "bob", "--role", "agent"]


def test_a_tokens_file_that_is_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run([*ADD, "--tokens", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2, done
    assert f"cannot write the tokens file {tmp_path}" in done.stderr, done.stderr
    assert "--tokens names a file" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""  # no token was handed out


def test_a_token_is_added_and_shown_once(tmp_path: Path) -> None:
    tokens = tmp_path / "conf" / "tokens.toml"
    done = subprocess.run([*ADD, "--tokens", str(tokens)], capture_output=True, text=True)
    assert done.returncode == 0, done
    token = done.stdout.strip()
    assert len(token) >= 32 and token not in tokens.read_text()
    assert 'name = "bob"' in tokens.read_text()
