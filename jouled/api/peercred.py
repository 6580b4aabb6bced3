"""Who is on the other end of the Unix socket: SO_PEERCRED, carried into gRPC.

gRPC accepts Unix-socket connections itself and tells a servicer only
`unix:` as the peer: no uid, and its local credentials never read
SO_PEERCRED. So the daemon accepts on the public socket itself, reads the
peer's uid, gid and pid from the kernel, and relays the connection's bytes to
gRPC's listener on a private socket in the data dir (mode 0700: only the
daemon's own user and root can reach it). Each relayed connection binds its
end to a fresh random abstract name, which gRPC reports as the call's peer
(`unix-abstract:jouled-peer-<id>`); the relay maps that name back to the
credentials until the connection closes. A name the relay did not hand out
maps to nothing, i.e. to no role.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("jouled")

PEER_PREFIX = "unix-abstract:jouled-peer-"
_UCRED = struct.Struct("3i")  # pid, uid, gid
_CHUNK = 256 << 10


@dataclass(frozen=True)
class PeerCred:
    pid: int
    uid: int
    gid: int


class PeerRelay:
    """Accepts on `public`, relays each connection to gRPC's listener at `private`."""

    def __init__(self, public: Path, private: Path, *, group: int | None = None) -> None:
        self.public, self.private = public, private
        self._peers: dict[str, PeerCred] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        public.parent.mkdir(parents=True, exist_ok=True)
        if public.exists() or public.is_symlink():
            public.unlink()  # a stale socket from a daemon that did not exit cleanly
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Nobody may connect before the mode and group below are in place.
        old = os.umask(0o177)
        try:
            self._listener.bind(str(public))
        finally:
            os.umask(old)
        if group is not None:
            os.chown(public, -1, group)
            os.chmod(public, 0o660)
        self._listener.listen(128)
        self._thread = threading.Thread(target=self._accept, name="peer-relay", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with contextlib.suppress(OSError):
            self.public.unlink()

    def credentials(self, peer: str) -> PeerCred | None:
        """The kernel's credentials for a gRPC peer string, if it came through the relay."""
        if not peer.startswith(PEER_PREFIX):
            return None
        with self._lock:
            return self._peers.get(peer[len(PEER_PREFIX) :])

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                if self._closed.is_set():
                    return
                log.exception("the Unix socket stopped accepting")
                return
            try:
                self._relay(conn)
            except OSError as err:
                log.warning("cannot relay a connection on %s: %s", self.public, err)
                conn.close()

    def _relay(self, conn: socket.socket) -> None:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        cred = PeerCred(*_UCRED.unpack(raw))
        conn_id = secrets.token_hex(16)
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.bind(f"\0jouled-peer-{conn_id}")
            upstream.connect(str(self.private))
        except OSError:
            upstream.close()
            raise
        with self._lock:
            self._peers[conn_id] = cred
        done = threading.Barrier(2, action=lambda: self._finish(conn_id, conn, upstream))
        for src, dst, name in ((conn, upstream, "in"), (upstream, conn, "out")):
            threading.Thread(
                target=_pump, args=(src, dst, done), name=f"peer-{name}", daemon=True
            ).start()

    def _finish(self, conn_id: str, *socks: socket.socket) -> None:
        # Forget the name before the socket that holds it closes, so it can never be reused
        # by another connection while still mapped.
        with self._lock:
            self._peers.pop(conn_id, None)
        for s in socks:
            s.close()


def _pump(src: socket.socket, dst: socket.socket, done: threading.Barrier) -> None:
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    try:
        while True:
            n = src.recv_into(buf)
            if n == 0:
                break
            dst.sendall(view[:n])
    except OSError:
        pass
    # HTTP/2 never half-closes: when either side ends, end both, so the other pump wakes.
    for s in (dst, src):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(threading.BrokenBarrierError):
        done.wait()
