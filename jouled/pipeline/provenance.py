"""What graded a result: the interpreter, pytest, the installed distributions, the host.

Two results are comparable only when the task digests match and the
environment that ran the tests did too; every result signs this description
so a reader can tell. It is computed once per daemon process: none of it
changes while the daemon runs (a reinstall means a restart).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import socket
import sys
from typing import Any

from jouled import __version__


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _distributions() -> tuple[str, int]:
    """A hash over the installed distributions (name==version, sorted), and their count."""
    seen = sorted(
        {
            f"{(d.metadata['Name'] or '').lower()}=={d.version}"
            for d in importlib.metadata.distributions()
            if d.metadata["Name"]
        }
    )
    return hashlib.sha256("\n".join(seen).encode()).hexdigest(), len(seen)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


@functools.cache
def environment() -> dict[str, Any]:
    digest, count = _distributions()
    uname = os.uname()
    return {
        "jouled": __version__,
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "executable": sys.executable,
        "pytest": _version("pytest"),
        "pluggy": _version("pluggy"),
        "distributions_sha256": digest,
        "distributions": count,
        "host": socket.gethostname(),
        "kernel": f"{uname.sysname} {uname.release}",
        "machine": uname.machine,
        "cpu": _cpu_model(),
    }
