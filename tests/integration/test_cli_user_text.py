"""What a user types, or a daemon says, reaches the screen as written.

The CLI prints through rich, whose markup reads `[...]` as a style: a path, task
id, suite or target with square brackets in it (and a gRPC detail, which has
them) must show as text, never crash the CLI or lose its brackets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import Daemon


def jb(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real `jb-client ARGS`, with no daemon's target from the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("JB_TARGET", "JB_TOKEN", "JB_CA")}
    return subprocess.run(
        [sys.executable, "-m", "jb_client", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert "MarkupError" not in done.stderr, done.stderr


def test_a_patch_path_with_brackets_is_named_as_written(tmp_path: Path) -> None:
    done = jb("submit", "--task", "smoke/lrucache", "--patch", "[/]x.diff", cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    assert "cannot read [/]x.diff" in done.stderr


def test_a_target_with_brackets_is_named_as_written() -> None:
    done = jb("--target", "[/]", "tasks")
    no_traceback(done)
    assert done.returncode in (2, 3), done.stderr
    assert "[/]" in done.stderr


def test_a_fleet_file_without_hosts_names_the_table_it_needs(tmp_path: Path) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text("x = 1\n")
    done = jb("--fleet", str(fleet_file), "frontier")
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    assert "[[host]]" in done.stderr


def test_grpc_s_bracketed_detail_is_kept() -> None:
    done = jb("--target", "nosuch.invalid:50051", "tasks")
    no_traceback(done)
    assert done.returncode == 3, done.stderr
    assert "nosuch.invalid" in done.stderr
    assert "[" in done.stderr.split("nosuch.invalid", 1)[1], done.stderr


def test_a_suite_with_brackets_is_asked_for_as_written(daemon: Daemon) -> None:
    done = daemon.client("tasks", "--suite", "[/]")
    no_traceback(done)
    assert done.returncode in (0, 2), done.stderr


def test_a_task_id_with_brackets_is_named_as_written(daemon: Daemon, tmp_path: Path) -> None:
    done = daemon.client("fetch", "--task", "smoke/[/x]", "--out", str(tmp_path / "out"))
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    assert "smoke/[/x]" in done.stderr


def test_an_out_directory_with_brackets_is_named_as_written(daemon: Daemon, tmp_path: Path) -> None:
    out = tmp_path / "w[bold]x"
    done = daemon.client("fetch", "--task", "smoke/lrucache", "--out", str(out))
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    assert f"files in {out} " in done.stderr
