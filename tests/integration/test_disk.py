"""A data dir short of space: new attempts are refused, the daemon serves on, nothing is lost."""

from __future__ import annotations

import base64
import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from jb_client.api import Client
from jb_client.errors import ClientError

from jouled.errors import Kind

from .conftest import Daemon, start_daemon
from .gate import TASK, fix_patch, write_tasks


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("gate-tasks"))


def _results(d: Daemon, out: Path) -> list[str]:
    done = d.client("export", "--out", str(out))
    assert done.returncode == 0, done.stderr
    verified = d.client("verify", str(out), "--pubkey", str(d.pubkey))
    assert verified.returncode == 0, verified.stderr
    docs = [
        json.loads(base64.b64decode(json.loads(line)["payload"]))
        for line in out.read_text().splitlines()
    ]
    return [doc["body"]["idempotency_key"] for doc in docs if doc["kind"] == "result"]


def _still_serving(d: Daemon) -> None:
    with Client(d.target, timeout_s=60) as c:
        c.wait_ready(60)
        assert TASK in {t["task_id"] for t in c.tasks()}
        assert c.receipt(idempotency_key="kept")["status"] == "resolved"


def test_below_the_free_space_floor_new_attempts_are_refused(tasks: Path, tmp_path: Path) -> None:
    fix = fix_patch(tasks, tmp_path)
    d = start_daemon(tmp_path / "data", tasks=tasks)
    try:
        with Client(d.target) as c:
            assert c.submit(TASK, fix, idempotency_key="kept")["status"] == "resolved"
        size = d.ledger_size()
    finally:
        assert d.stop() == 0
    free_mb = shutil.disk_usage(tmp_path).free >> 20
    floor = free_mb + (1 << 20)  # a tebibyte more than there is
    d = start_daemon(tmp_path / "data", "--min-free-mb", str(floor), tasks=tasks)
    try:
        with Client(d.target) as c:
            for call in (
                lambda: c.submit(TASK, fix, idempotency_key="refused"),
                lambda: c.run_solver(TASK, "reference", idempotency_key="refused-solver"),
            ):
                with pytest.raises(ClientError) as err:
                    call()
                assert err.value.kind == Kind.RESOURCE_EXHAUSTED
                message = err.value.message
                assert str(d.data_dir) in message and "MiB free" in message
                assert f"below {floor} MiB" in message
        _still_serving(d)
        assert d.ledger_size() == size
        assert _results(d, tmp_path / "ledger.jsonl") == ["kept"]
        done = d.client("submit", "--task", TASK, "--patch", "-", input=fix)
        assert done.returncode == 2 and "MiB free" in done.stderr and "Traceback" not in done.stderr
    finally:
        assert d.stop() == 0


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs, for a data dir that really fills up (needs mount rights)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(mnt)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError as err:
        pytest.skip(f"cannot run mount: {err}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=60)


def _fill(fs: Path) -> Path:
    """Write until the file system has no byte left."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError as err:
                assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)
    assert shutil.disk_usage(fs).free == 0
    return filler


def test_a_full_data_dir_refuses_attempts_and_recovers_when_space_returns(
    tasks: Path, tmp_path: Path, small_fs: Path
) -> None:
    fix = fix_patch(tasks, tmp_path)
    d = start_daemon(small_fs, "--min-free-mb", "0", tasks=tasks)
    try:
        with Client(d.target) as c:
            assert c.submit(TASK, fix, idempotency_key="kept")["status"] == "resolved"
        size = d.ledger_size()
        filler = _fill(small_fs)
        with Client(d.target) as c, pytest.raises(ClientError) as err:
            c.submit(TASK, fix, idempotency_key="refused")
        assert err.value.kind == Kind.RESOURCE_EXHAUSTED
        assert "ran out of space" in err.value.message and str(small_fs) in err.value.message
        _still_serving(d)
        assert d.ledger_size() == size
        os.unlink(filler)
        with Client(d.target) as c:
            assert c.submit(TASK, fix, idempotency_key="after")["status"] == "resolved"
        assert _results(d, tmp_path / "ledger.jsonl") == ["kept", "after"]
    finally:
        assert d.stop() == 0, d.log.read_text()
