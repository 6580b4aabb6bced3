"""The client's one error: what the daemon refused, or why it could not be asked, and what to do.

A gRPC failure is translated here, at the boundary: the daemon names the kind
of every refusal it makes (and its reason code, where it has one); anything
else is the transport's, and says how to reach the daemon.
"""

from __future__ import annotations

import re
from pathlib import Path

import grpc

from jouled.errors import JouledError, Kind

_KINDS = {
    grpc.StatusCode.INVALID_ARGUMENT: Kind.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND: Kind.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION: Kind.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Kind.RESOURCE_EXHAUSTED,
    grpc.StatusCode.PERMISSION_DENIED: Kind.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED: Kind.UNAUTHENTICATED,
    grpc.StatusCode.UNAVAILABLE: Kind.UNAVAILABLE,
}


# What to do about a refusal of each kind, where neither the daemon nor the client
# said anything more particular.
HINTS = {
    Kind.INVALID_ARGUMENT: "correct the request: docs/protocol.md lists what each call accepts",
    Kind.NOT_FOUND: "check the id or seq: `jb-client tasks` lists the tasks the daemon serves",
    Kind.FAILED_PRECONDITION: "the daemon is not in a state to do this now; its log says why",
    Kind.RESOURCE_EXHAUSTED: "wait and retry (a submission with the same idempotency key): "
    "nothing was recorded",
    Kind.UNAUTHENTICATED: "give a token (--token / $JB_TOKEN), or connect over the daemon's "
    "Unix socket as a user it gives a role",
    Kind.PERMISSION_DENIED: "ask the daemon's operator for a credential whose role allows this "
    "(README, Access)",
    Kind.UNAVAILABLE: "start it with `jouled serve`, or point --target / $JB_TARGET at it",
    Kind.INTERNAL: "a fault in jouled or in this client: the daemon's log has the details",
}


class ClientError(JouledError):
    """The daemon refused a request, could not be reached, or was asked something malformed.

    `kind` sorts it (`jouled.errors.Kind`, a str enum: "invalid_argument", ...);
    `hint` always says what to do about it; `code` is the daemon's reason code,
    where it sent one ("broken-environment").
    """

    def __init__(self, message: str, kind: Kind, hint: str = "", code: str = "") -> None:
        super().__init__(message, hint=hint or HINTS.get(kind, HINTS[Kind.INTERNAL]))
        self.kind = kind
        self.code = code


def rpc_error(err: grpc.RpcError, target: str, timeout_s: float | None) -> ClientError:
    """A failed call to the daemon at `target` as the ClientError that says what to do."""
    code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (err.details() if isinstance(err, grpc.Call) else None) or str(err)
    trailing = dict(err.trailing_metadata() or ()) if isinstance(err, grpc.Call) else {}
    message, _, hint = details.partition("\n  hint: ")
    # The daemon names the kind of every refusal it makes; anything else is the transport.
    if "jouled-error" in trailing:
        reason = trailing.get("jouled-code")
        return ClientError(
            message,
            _KINDS.get(code, Kind.INTERNAL),
            hint=hint,
            code=reason if isinstance(reason, str) else "",
        )
    if code == grpc.StatusCode.UNAVAILABLE and (
        "handshake" in details.lower() or "ssl" in details.lower()
    ):
        tls = (
            "pass the daemon's CA with --ca / $JB_CA (and --cert/--key when it wants "
            "client certificates)"
        )
        return ClientError(
            f"TLS with {target} failed: {tls_reason(transport_reason(details))}",
            Kind.UNAVAILABLE,
            hint=f"a daemon on this host may listen in plaintext: pass --insecure / "
            f"$JB_INSECURE=1; if it serves TLS, {tls}"
            if is_loopback(target)
            else tls,
        )
    if code == grpc.StatusCode.UNAVAILABLE:
        return ClientError(
            f"cannot reach the daemon at {target}: {transport_reason(details)}",
            Kind.UNAVAILABLE,
            hint="start it with `jouled serve`, or point --target / $JB_TARGET at it",
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ClientError(
            f"the call to {target} ran past its deadline ({timeout_s} s)",
            Kind.UNAVAILABLE,
            hint="give the Client a longer timeout_s, or none; a submission retried with "
            "the same idempotency key never yields a second result",
        )
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return ClientError(
            message,
            Kind.RESOURCE_EXHAUSTED,
            hint=hint
            or "a message over 16 MiB is refused whatever the daemon's load: "
            "send less at once (a patch may be 1 MiB)",
        )
    return ClientError(message, _KINDS.get(code, Kind.INTERNAL), hint=hint)


def is_loopback(target: str) -> bool:
    """Whether `target` (HOST:PORT) names this host: localhost, 127.0.0.0/8 or ::1."""
    import ipaddress

    host = target.removeprefix("dns:").removeprefix("ipv4:").removeprefix("ipv6:")
    host = host.rpartition(":")[0].strip("[]").lstrip("/")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_reason(text: str) -> str:
    """OpenSSL's reason for a failed handshake, without its error codes:
    "... SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER:
    ..." says "handshake failed (WRONG_VERSION_NUMBER: the daemon did not answer in TLS)"."""
    found = re.search(r"OPENSSL_internal:([A-Z0-9_]+)", text)
    if found is None:
        return text
    reason = found.group(1)
    if reason == "WRONG_VERSION_NUMBER":
        reason += ": the daemon did not answer in TLS"
    elif reason == "CERTIFICATE_VERIFY_FAILED":
        reason += ": its certificate does not chain to the CA trusted here"
    return f"handshake failed ({reason})"


def transport_reason(details: str) -> str:
    """gRPC's account of a failed connection as one readable line: "failed to connect
    to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to
    remote host: Connection refused" says "Connection refused"."""
    text = details.strip().splitlines()[0] if details.strip() else "no reason given"
    _, found, last = text.partition("last error:")
    if found:
        text = last.strip()
        text = re.sub(r"^[A-Z_]+: ", "", text)  # the status code's name
        text = re.sub(r"^(ipv4|ipv6|unix|unix-abstract):\S+: ", "", text)  # the address
        text = re.sub(r"^Failed to connect to remote host: ", "", text)
        text = re.sub(r"^connect failed: addr: \S+ error: ", "", text)
    return text or details


def write_error(path: Path, err: OSError) -> ClientError:
    return ClientError(
        f"cannot write {err.filename or path}: {err.strerror or err}",
        Kind.INVALID_ARGUMENT,
        hint="check the path and its permissions, and the free space there",
    )
