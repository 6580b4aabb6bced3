"""`jb-client`'s entry point: `tasks --json` answered before the full CLI loads.

An agent that loops over submissions polls `jb-client tasks --json`; the full
CLI (typer, rich, gRPC, every command's modules) costs several times the call
itself to import. This parses exactly that command line, with an optional
global `--target`, and, on the daemon's Unix socket, makes the one unary
`ListTasks` call over HTTP/2 itself (gRPC's wire format: a POST whose body is
the length-prefixed protobuf message), printing what `jb_client.cli` prints.

Anything else goes to the full CLI unchanged: another command line (`--help`,
any other option, a TCP target), and any answer this path does not take as a
success (no connection, a refused call, an HTTP/2 frame it does not expect).
The full CLI then makes the call again through gRPC and reports it the usual
way; `ListTasks` only reads, so asking twice changes nothing.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from collections.abc import Mapping

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
_END_STREAM, _ACK, _END_HEADERS = 0x1, 0x1, 0x4
_STREAM = 1
_WINDOW = 2**31 - 1
_TIMEOUT_S = 30.0
_MAX_MESSAGE = 64 << 20


def _tasks_json(argv: list[str]) -> tuple[str | None, str] | None:
    """(target, suite) for `[--target T] tasks --json [--suite S]`; None for anything else."""
    target: str | None = None
    args = list(argv)
    if args and args[0].startswith("--target"):
        option = args.pop(0)
        if option == "--target" and args:
            target = args.pop(0)
        elif option.startswith("--target="):
            target = option.removeprefix("--target=")
        else:
            return None
        if target.startswith("-"):
            return None
    if not args or args.pop(0) != "tasks":
        return None
    suite, as_json = "", False
    while args:
        option = args.pop(0)
        if option == "--json" and not as_json:
            as_json = True
        elif option == "--suite" and args:
            suite = args.pop(0)
        elif option.startswith("--suite="):
            suite = option.removeprefix("--suite=")
        else:
            return None
    return (target, suite) if as_json else None


def _socket_path(target: str | None, env: Mapping[str, str]) -> str | None:
    """The Unix socket `jb_client.api.Client` would dial for `target`; None: not a socket."""
    from jb_client.target import default_target, normalise, socket_path

    return socket_path(normalise(target or default_target(env)))


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _length(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer (RFC 7541 section 5.1) whose first byte carries `first`'s high bits."""
    top = (1 << prefix_bits) - 1
    if value < top:
        return bytes([first | value])
    out = [first | top]
    value -= top
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _literal(name_index: int, name: bytes, value: bytes) -> bytes:
    """A header field without indexing: by static-table name index, else a literal name."""
    head = _length(name_index, 4, 0) if name_index else b"\x00" + _length(len(name), 7, 0) + name
    return head + _length(len(value), 7, 0x00) + value


def _request(method: str, message: bytes, token: str) -> bytes:
    headers = (
        b"\x83"  # :method POST (static table 3)
        + b"\x86"  # :scheme http (6)
        + _literal(4, b"", method.encode())  # :path
        + _literal(1, b"", b"localhost")  # :authority
        + _literal(31, b"", b"application/grpc")  # content-type
        + _literal(0, b"te", b"trailers")
    )
    if token:
        headers += _literal(23, b"", b"Bearer " + token.encode())  # authorization
    settings = struct.pack(">HI", 0x4, _WINDOW)  # SETTINGS_INITIAL_WINDOW_SIZE
    return (
        _PREFACE
        + _frame(_SETTINGS, 0, 0, settings)
        + _frame(0x8, 0, 0, struct.pack(">I", _WINDOW - 65535))  # the connection's window
        + _frame(_HEADERS, _END_HEADERS, _STREAM, headers)
        + _frame(_DATA, _END_STREAM, _STREAM, b"\x00" + struct.pack(">I", len(message)) + message)
    )


def _recv(sock: socket.socket, n: int, buf: bytearray) -> bytes:
    while len(buf) < n:
        chunk = sock.recv(max(65536, n - len(buf)))
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        buf += chunk
    out = bytes(buf[:n])
    del buf[:n]
    return out


def _unary(path: str, method: str, message: bytes, token: str) -> bytes | None:
    """The response message of one unary call, or None for anything but a plain success.

    Success is a whole response message followed by the end of the stream:
    a server sends the message only once its handler returned, and an error
    ends the stream with trailers alone. Headers are never decoded.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(_TIMEOUT_S)
        sock.connect(path)
        sock.sendall(_request(method, message, token))
        buf = bytearray()
        body = bytearray()
        while True:
            head = _recv(sock, 9, buf)
            size = int.from_bytes(head[:3], "big")
            kind, flags = head[3], head[4]
            stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
            payload = _recv(sock, size, buf)
            if kind == _SETTINGS and not flags & _ACK:
                sock.sendall(_frame(_SETTINGS, _ACK, 0))
            elif kind == _PING and not flags & _ACK:
                sock.sendall(_frame(_PING, _ACK, 0, payload))
            elif kind in (_RST_STREAM, _GOAWAY) and stream in (0, _STREAM):
                return None
            elif kind == _DATA and stream == _STREAM:
                pad = payload[0] if flags & 0x8 else 0
                body += payload[1 if flags & 0x8 else 0 : len(payload) - pad]
                if len(body) > _MAX_MESSAGE + 5:
                    return None
            if stream == _STREAM and kind in (_DATA, _HEADERS) and flags & _END_STREAM:
                break
    if len(body) < 5 or body[0] != 0:
        return None  # no message (an error's trailers), or a compressed one
    length = int.from_bytes(body[1:5], "big")
    return bytes(body[5:]) if len(body) == 5 + length else None


def _list_tasks(path: str, suite: str, env: Mapping[str, str]) -> list[dict[str, object]] | None:
    from jb_client.taskdoc import task_doc

    from jouled.v1 import jouled_pb2 as pb

    try:
        raw = _unary(
            path,
            "/jouled.v1.Jouled/ListTasks",
            pb.ListTasksRequest(suite=suite).SerializeToString(),
            env.get("JB_TOKEN", ""),
        )
        if raw is None:
            return None
        reply = pb.ListTasksResponse.FromString(raw)
    except (OSError, ValueError, IndexError, struct.error):
        return None
    except Exception as err:  # a message protobuf cannot parse
        if type(err).__name__ != "DecodeError":
            raise
        return None
    return [task_doc(t) for t in reply.tasks]


def main() -> None:
    request = _tasks_json(sys.argv[1:])
    path = None if request is None else _socket_path(request[0], os.environ)
    found = None if path is None or request is None else _list_tasks(path, request[1], os.environ)
    if found is None:
        from jb_client.cli import main as cli_main

        cli_main()
        return
    import json

    sys.stdout.write(json.dumps({"tasks": found}, indent=2, sort_keys=True, allow_nan=False) + "\n")
    sys.stdout.flush()
    os._exit(0)  # nothing is left to close; skips the interpreter's teardown
