"""Authentication and role checks for the gRPC API, with grpcio's own parts.

- TCP: TLS (`grpc.ssl_server_credentials`, client certificates required when a
  client CA is configured) and bearer tokens in the `authorization` metadata,
  which clients send with `grpc.access_token_call_credentials`. Plaintext only
  on loopback with `--insecure`, through `grpc.local_server_credentials`, so
  clients can still attach their token.
- Unix socket: the kernel's peer credentials (`api/peercred.py`) mapped to roles
  by `PeerRules`; a token sent there wins over the peer's uid.

`RoleInterceptor` (a `grpc.ServerInterceptor`) wraps every jouled.v1 method:
it finds the caller's identity, refuses callers without the method's role
(UNAUTHENTICATED without a credential, PERMISSION_DENIED without the role),
and hands the identity to the servicer through `current_identity()`. Health and
reflection are not wrapped: they answer anybody.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from jouled.api.peercred import PeerCred, PeerRelay
from jouled.auth import Identity, PeerRules, TokenStore
from jouled.config import Config
from jouled.errors import ConfigError, JouledError, UnauthenticatedError

log = logging.getLogger("jouled")

SERVICE_PREFIX = "/jouled.v1.Jouled/"
_identity: contextvars.ContextVar[Identity | None] = contextvars.ContextVar(
    "jouled_identity", default=None
)


def current_identity() -> Identity:
    """The identity of the call being served (set by the interceptor)."""
    identity = _identity.get()
    if identity is None:  # only a method the interceptor did not wrap gets here
        raise UnauthenticatedError("this call carries no identity")
    return identity


class Authenticator:
    """Finds who is calling, from the call's metadata and its peer."""

    def __init__(self, tokens: TokenStore, peers: PeerRules) -> None:
        self.tokens = tokens
        self.peers = peers
        self.relay: PeerRelay | None = None

    @classmethod
    def from_config(cls, config: Config) -> Authenticator:
        tokens = TokenStore.load(config.tokens_file) if config.tokens_file else TokenStore()
        return cls(tokens, PeerRules(config.peer_rules, own_uid_operator=config.own_uid_operator))

    def identify(self, context: grpc.ServicerContext) -> Identity | None:
        for key, value in context.invocation_metadata():
            if key == "authorization":
                return self._token(str(value))
        if self.relay is not None:
            cred = self.relay.credentials(context.peer())
            if cred is not None:
                return self.peers.identify(cred.uid, cred.gid)
        return None

    def peer(self, context: grpc.ServicerContext) -> PeerCred | None:
        """The kernel's credentials of a Unix-socket caller; None over TCP."""
        return None if self.relay is None else self.relay.credentials(context.peer())

    def _token(self, header: str) -> Identity:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise UnauthenticatedError(
                "the authorization header is not `Bearer <token>`",
                hint="pass the token with --token or $JB_TOKEN",
            )
        identity = self.tokens.lookup(token.strip())
        if identity is None:
            raise UnauthenticatedError(
                "the daemon does not know this token",
                hint="check --token / $JB_TOKEN; the operator lists tokens in the daemon's "
                "tokens file",
            )
        return identity


def _deny(context: grpc.ServicerContext, err: JouledError) -> None:
    code = (
        grpc.StatusCode.UNAUTHENTICATED
        if isinstance(err, UnauthenticatedError)
        else grpc.StatusCode.PERMISSION_DENIED
    )
    context.set_trailing_metadata((("jouled-error", code.name.lower()),))
    context.abort(code, err.diagnostics())


class RoleInterceptor(grpc.ServerInterceptor):
    def __init__(self, auth: Authenticator) -> None:
        self.auth = auth

    def _admit(self, method: str, context: grpc.ServicerContext) -> Identity:
        try:
            identity = self.auth.identify(context)
            if identity is None:
                raise UnauthenticatedError(
                    f"{method} needs a credential; this call has none",
                    hint="over TCP pass a token (--token or $JB_TOKEN); on the Unix socket "
                    "ask the operator to map your user or group to a role (--peer-role)",
                )
            identity.check(method)
        except JouledError as err:
            log.info("refused %s: %s", method, err.message)
            _deny(context, err)
            raise  # unreachable: abort raises
        return identity

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        full: str = handler_call_details.method  # type: ignore[attr-defined]
        if handler is None or not full.startswith(SERVICE_PREFIX):
            return handler
        method = full[len(SERVICE_PREFIX) :]
        h: Any = handler
        if h.unary_unary is not None:
            return h._replace(unary_unary=self._unary(method, h.unary_unary))
        if h.unary_stream is not None:
            return h._replace(unary_stream=self._stream(method, h.unary_stream))
        raise TypeError(f"{full}: only unary requests are served")  # the proto has no others

    def _unary(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            token = _identity.set(self._admit(method, context))
            try:
                return behaviour(request, context)
            finally:
                _identity.reset(token)

        return wrapped

    def _stream(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            identity = self._admit(method, context)
            token = _identity.set(identity)
            try:
                yield from behaviour(request, context)
            finally:
                _identity.reset(token)

        return wrapped


# -- transport credentials ---------------------------------------------------------------


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read the {what} {path}: {err.strerror}") from err


def server_credentials(config: Config, address: str) -> grpc.ServerCredentials:
    """TLS for a TCP listener; loopback plaintext only with --insecure."""
    if config.tls_cert and config.tls_key:
        client_ca = _read(config.tls_client_ca, "client CA") if config.tls_client_ca else None
        return grpc.ssl_server_credentials(
            [(_read(config.tls_key, "TLS key"), _read(config.tls_cert, "TLS certificate"))],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )
    if is_loopback(address) and config.insecure:
        return grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    raise ConfigError(
        f"refusing to listen on {address} without TLS",
        hint="give --tls-cert and --tls-key (tokens then travel encrypted), listen on a "
        "Unix socket, or on loopback with --insecure",
    )


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")
