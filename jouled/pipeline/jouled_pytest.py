"""The daemon's pytest runner: runs inside the sandbox, imports nothing of jouled.

The sandbox shows this file read-only at /run/jouled and starts it as

    python -s -P -c "import sys; sys.path.insert(0, '/run/jouled'); import jouled_pytest; ..."
        MODE PYTEST_ARGS...

before anything of the tree is importable: pytest and this plugin load first,
then (MODE "module", as `python -m pytest` does) the working directory goes on
sys.path and pytest runs. Test outcomes do not come from pytest's junit or
terminal output, which the code under test can rewrite at will: this plugin
writes one record per report to a pipe the daemon reads (fd 4), each line
authenticated with a per-run key the daemon sends on fd 3. The key is read and
its descriptor closed before any code of the tree runs, and the report pipe is
kept out of the processes the tests start. Code running inside this process
can still find both in memory: the channel raises the cost of a forgery, the
daemon's canary tests detect the forgeries that do not know them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
from typing import Any

import pytest

KEY_FD, REPORT_FD = 3, 4


class Reporter:
    """A pytest plugin writing every test report to the authenticated channel."""

    def __init__(self, key: bytes, fd: int) -> None:
        self._key = key
        self._fd = fd
        self._n = 0

    def _emit(self, record: dict[str, Any]) -> None:
        record["n"] = self._n
        self._n += 1
        line = json.dumps(record, sort_keys=True, separators=(",", ":"))
        mac = hmac.new(self._key, line.encode(), hashlib.sha256).hexdigest()
        data = f"{line} {mac}\n".encode()
        while data:
            data = data[os.write(self._fd, data) :]

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._emit({"event": "start", "pytest": pytest.__version__})

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._emit({"event": "collect", "id": report.nodeid, "outcome": "error"})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._emit(
            {
                "event": "test",
                "id": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "xfail": hasattr(report, "wasxfail"),
            }
        )

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._emit({"event": "finish", "exit": int(exitstatus)})


def _read_key() -> bytes:
    key = b""
    while len(key) < 32:
        chunk = os.read(KEY_FD, 32 - len(key))
        if not chunk:
            break
        key += chunk
    os.close(KEY_FD)
    if len(key) != 32:
        raise SystemExit("jouled_pytest: no run key on fd 3")
    return key


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    key = _read_key()
    os.set_inheritable(REPORT_FD, False)
    reporter = Reporter(key, REPORT_FD)
    del key
    if mode == "module":
        sys.path.insert(0, os.getcwd())
    sys.argv = [sys.argv[0], *args]
    code = pytest.main(args, plugins=[reporter])
    sys.exit(int(code))


if __name__ == "__main__":  # pragma: no cover
    main()
