"""SIGTERM and SIGINT stop the daemon whichever of its threads the kernel hands them to.

A signal sent to a process goes to any one of its threads that does not block it,
and gRPC's threads block none. Python runs its handlers in the main thread only,
so a main thread asleep until an event is set would never hear of it: the daemon
would serve on until SIGKILL, its open op windows never signed. The test sends
the signal to one thread of the daemon (`tgkill`, as the kernel may pick any) and
waits for the daemon to stop as it does on a plain `kill`.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
from pathlib import Path

import pytest
from jb_client.api import Client

from .conftest import start_daemon

SYS_TGKILL = {"x86_64": 234, "aarch64": 131}.get(platform.machine())


def tgkill(pid: int, tid: int, sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(SYS_TGKILL, pid, tid, sig) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@pytest.mark.skipif(SYS_TGKILL is None, reason="tgkill's number is known for x86_64 and aarch64")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_any_thread_stops_the_daemon_and_signs_its_windows(
    tmp_path: Path, sig: signal.Signals
) -> None:
    d = start_daemon(tmp_path / "data")
    try:
        with Client(d.target) as client:
            window = client.open_window("interrupted")
            pid = d.proc.pid
            others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
            assert others, "the daemon runs no thread beside its main one"
            tgkill(pid, others[-1], sig)
            assert d.proc.wait(timeout=60) == 0, d.log.read_text()
            receipt = window.wait()  # sent before the daemon stopped
        assert receipt.abandoned and receipt.end == "shutdown"
    finally:
        if d.proc.poll() is None:
            d.stop(signal.SIGKILL)
