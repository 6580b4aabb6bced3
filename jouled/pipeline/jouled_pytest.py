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
kept out of the processes the tests start.

Before each test runs, the plugin also checks that the test function runs no
code from the tree other than the protected test files (`protected.json`
beside this file lists them) and that no trace or profile function is
installed; what it finds goes on the channel as a `tamper` record. Code
running inside this process can still find the key and the pipe in memory:
the channel raises the cost of a forgery, the daemon's canary tests detect
the forgeries that do not know them.
"""

# No `from __future__ import annotations` (Python 3.7+), and every annotation that
# names a generic or a pytest class is a string: environments as old as Python 3.6
# and pytest releases that do not export those classes import this file too.

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
        self._root, self._protected = _load_protected()

    def _emit(self, record: "dict[str, Any]") -> None:
        record["n"] = self._n
        self._n += 1
        line = json.dumps(record, sort_keys=True, separators=(",", ":"))
        mac = hmac.new(self._key, line.encode(), hashlib.sha256).hexdigest()
        data = f"{line} {mac}\n".encode()
        while data:
            data = data[os.write(self._fd, data) :]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: "pytest.Item") -> None:
        why = _tampering(item, self._root, self._protected)
        if why:
            self._emit({"event": "tamper", "id": item.nodeid, "why": why})

    def pytest_sessionstart(self, session: "pytest.Session") -> None:
        self._emit({"event": "start", "pytest": pytest.__version__})

    def pytest_collectreport(self, report: "pytest.CollectReport") -> None:
        if report.failed:
            self._emit({"event": "collect", "id": report.nodeid, "outcome": "error"})

    def pytest_runtest_logreport(self, report: "pytest.TestReport") -> None:
        self._emit(
            {
                "event": "test",
                "id": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "xfail": hasattr(report, "wasxfail"),
            }
        )

    def pytest_sessionfinish(self, session: "pytest.Session", exitstatus: int) -> None:
        self._emit({"event": "finish", "exit": int(exitstatus)})


def _load_protected() -> "tuple[str, frozenset[str]]":
    """The workdir and the files in it whose code tests may run (pristine tests, canaries)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "protected.json")
    try:
        with open(path) as fh:
            listing = json.load(fh)
    except (OSError, ValueError):
        return "", frozenset()
    root = os.path.realpath(listing["root"])
    return root, frozenset(os.path.join(root, rel) for rel in listing["files"])


def _tampering(item: "pytest.Item", root: str, protected: "frozenset[str]") -> str:
    """Why `item` no longer runs the code its file defines; "" when nothing says so.

    Every layer of the test function (decorators follow `__wrapped__`) must
    come from outside the workdir (the standard library, installed packages:
    read-only) or from one of its protected files: code from the tree the
    patch could change has no business standing in for a test.
    """
    if sys.gettrace() is not None or sys.getprofile() is not None:
        return "a trace or profile function is installed"
    function = getattr(item, "obj", None) if isinstance(item, pytest.Function) else None
    seen = 0
    while function is not None and seen < 100:
        seen += 1
        code = getattr(getattr(function, "__func__", function), "__code__", None)
        if code is not None and root:
            defined = os.path.realpath(code.co_filename)
            inside = defined == root or defined.startswith(root + os.sep)
            if inside and defined not in protected:
                return f"the test runs code from {code.co_filename}, which the patch can change"
        function = getattr(function, "__wrapped__", None)
    return ""


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
