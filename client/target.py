"""Where the client dials: the target from the command line, `JB_TARGET`, or the daemon's socket.

Free of gRPC, so the CLI's fast path resolves a target exactly as the client does.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping

from jouled.home import DEFAULT_HOME, HOME_VARIABLE, SOCKET_NAME

# The environment variable that names the target.
TARGET_VARIABLE = "JB_TARGET"
# Where the systemd unit and the DaemonSet in deploy/ listen.
SYSTEM_SOCKET = "/run/jouled/jouled.sock"

# Where `default_target` looks, in its order (for `--target`'s help).
FALLBACKS = (
    f"${TARGET_VARIABLE}, else the socket in ${HOME_VARIABLE} when that is set, else the "
    f"system daemon's {SYSTEM_SOCKET} where one listens, else {DEFAULT_HOME}/{SOCKET_NAME}"
)


def default_target(env: Mapping[str, str] | None = None, system_socket: str = SYSTEM_SOCKET) -> str:
    """`$JB_TARGET`; else the socket in `$JOULED_HOME` when that is set; else the system
    daemon's socket where one is listening there; else the default data dir's socket."""
    env = os.environ if env is None else env
    if env.get(TARGET_VARIABLE):
        return env[TARGET_VARIABLE]
    from jouled.config import default_home  # the daemon's config: loaded only when needed

    if not env.get(HOME_VARIABLE) and _is_socket(system_socket):
        return f"unix:{system_socket}"
    return f"unix:{default_home(env) / SOCKET_NAME}"


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


def problem(target: str) -> str | None:
    """Why `target` (normalised) is not an address the client can dial; None when it is.

    unix:PATH, or HOST:PORT with a port from 1 to 65535 (HOST a name, an IPv4 address
    or a bracketed IPv6 one); gRPC's own dns:, ipv4: and ipv6: forms pass as given."""
    if target.startswith("unix:"):
        return None if socket_path(target) else "not unix:PATH or HOST:PORT (unix: names no path)"
    if target.startswith(("dns:", "ipv4:", "ipv6:")):
        return None
    if "://" in target:
        return "not unix:PATH or HOST:PORT (a URL: give its HOST:PORT alone)"
    host, colon, port = target.rpartition(":")
    if not colon or not host:
        return "not unix:PATH or HOST:PORT"
    if host.startswith("[") and host.endswith("]"):
        import ipaddress

        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return f"not unix:PATH or HOST:PORT ({host} is not an IPv6 address)"
    elif not _HOST.fullmatch(host):
        return "not unix:PATH or HOST:PORT"
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        return f"not unix:PATH or HOST:PORT (the port must be 1 to 65535, not {port!r})"
    return None


# A host name or IPv4 address: letters, digits, hyphens, underscores and dots.
_HOST = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")


def socket_path(target: str) -> str | None:
    """The Unix socket a normalised target names; None when it names none."""
    if target.startswith("unix://"):
        return target.removeprefix("unix://")
    if target.startswith("unix:"):
        return target.removeprefix("unix:")
    return None
