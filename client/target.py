"""Where the client dials: the target from the command line, `JB_TARGET`, or the daemon's socket.

Free of gRPC, so the CLI's fast path resolves a target exactly as the client does.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

# Where the systemd unit and the DaemonSet in deploy/ listen.
SYSTEM_SOCKET = "/run/jouled/jouled.sock"


def default_target(env: Mapping[str, str] | None = None, system_socket: str = SYSTEM_SOCKET) -> str:
    """`$JB_TARGET`; else the socket in `$JOULED_HOME` when that is set; else the system
    daemon's socket where one is listening there; else the default data dir's socket."""
    env = os.environ if env is None else env
    if env.get("JB_TARGET"):
        return env["JB_TARGET"]
    from jouled.config import default_home  # the daemon's config: loaded only when needed

    if not env.get("JOULED_HOME") and _is_socket(system_socket):
        return f"unix:{system_socket}"
    return f"unix:{default_home(env) / 'jouled.sock'}"


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def normalise(target: str) -> str:
    """A gRPC target: a bare absolute path is a Unix socket."""
    if target.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return target
    if target.startswith("/"):
        return f"unix:{target}"
    return target


def socket_path(target: str) -> str | None:
    """The Unix socket a normalised target names; None when it names none."""
    if target.startswith("unix://"):
        return target.removeprefix("unix://")
    if target.startswith("unix:"):
        return target.removeprefix("unix:")
    return None
