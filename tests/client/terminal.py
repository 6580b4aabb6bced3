"""`jb-client` on a real terminal: a pseudo-terminal of a given width, as a user's shell
gives it (the terminal's window size, no `COLUMNS`)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios


def in_terminal(args: list[str], columns: int) -> tuple[int, str]:
    """Run `jb-client ARGS` on a pseudo-terminal `columns` wide; (exit status, screen text)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jb_client", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        close_fds=True,
    )
    os.close(follower)
    chunks = []
    while True:  # until the child's side closes: EOF, or EIO on Linux
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    status = proc.wait(timeout=120)
    text = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    return status, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # colours and cursor moves
