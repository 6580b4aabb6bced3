"""The credentials of a channel to the daemon: peer credentials, TLS, bearer tokens."""

from __future__ import annotations

from pathlib import Path

import grpc
from jb_client.errors import ClientError

from jouled.errors import Kind

# What each TLS file is given by, and the PEM block it must hold.
_FILES = {
    "CA certificate": ("--ca / $JB_CA", b"-----BEGIN CERTIFICATE-----"),
    "client certificate": ("--cert / $JB_CERT", b"-----BEGIN CERTIFICATE-----"),
    "client key": ("--key / $JB_KEY", b"PRIVATE KEY-----"),
}


def _read_file(path: str | Path, what: str) -> bytes:
    """A TLS file's PEM text, read before any connection: gRPC would report a file it
    cannot use only as a failed handshake."""
    given, block = _FILES[what]
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise ClientError(
            f"cannot read the {what} {path}: {err.strerror}",
            Kind.INVALID_ARGUMENT,
            hint=f"check the path {given} names: a PEM file you can read",
        ) from None
    if block not in data:
        kind = "private key" if what == "client key" else "certificate"
        raise ClientError(
            f"the {what} {path} is not a PEM {kind}",
            Kind.INVALID_ARGUMENT,
            hint=f"{given} takes a PEM file (-----BEGIN ...-----), such as the daemon's "
            "operator gives out",
        )
    return data


def channel_credentials(
    target: str,
    *,
    token: str = "",
    ca: str | Path | None = None,
    cert: str | Path | None = None,
    key: str | Path | None = None,
    insecure: bool = False,
) -> grpc.ChannelCredentials | None:
    """The credentials a channel to `target` uses; None: a plain Unix-socket channel.

    On the Unix socket the daemon knows the caller by its uid; a token, when given,
    travels too (gRPC's local credentials let call credentials through). Over TCP:
    TLS, trusting `ca` (else the system's roots), with a client certificate for
    mTLS; or, with `insecure`, loopback plaintext. The token goes as a bearer token.
    """
    calls = [grpc.access_token_call_credentials(token)] if token else []
    if target.startswith("unix"):
        if not calls:
            return None
        base = grpc.local_channel_credentials(grpc.LocalConnectionType.UDS)
    elif insecure:
        base = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    else:
        if bool(cert) != bool(key):
            raise ClientError(
                "--cert and --key go together",
                Kind.INVALID_ARGUMENT,
                hint="give both the client certificate and its key, or neither",
            )
        base = grpc.ssl_channel_credentials(
            root_certificates=_read_file(ca, "CA certificate") if ca else None,
            private_key=_read_file(key, "client key") if key else None,
            certificate_chain=_read_file(cert, "client certificate") if cert else None,
        )
    return grpc.composite_channel_credentials(base, *calls) if calls else base
