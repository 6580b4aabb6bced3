"""The Prometheus endpoint: the daemon's counts and gauges over HTTP.

A dedicated `CollectorRegistry` (never the library's global one) holds one
collector that reads `Daemon.counts` and `Daemon.gauges()` at scrape time,
plus the standard `process_*` metrics. It is served on its own listener
(`jouled serve --metrics-listen HOST:PORT`), apart from the gRPC API. It
carries no patches, prompts, tokens or keys, but it does show every
solver's counts, so it is not for anybody:

- on a loopback address (the default for a bare PORT) it answers loopback
  peers only, without credentials;
- on any other address the daemon needs TLS and a tokens file
  (`jouled.config` refuses to start otherwise): it serves HTTPS, and only to a
  bearer token (`Authorization: Bearer ...`) of an auditor or an operator.

Every label takes a bounded set of values whatever clients send
(`jouled.metrics`: unknown solvers share one value).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from jouled.auth import AUDITOR, OPERATOR, TokenStore
from jouled.config import Config, loopback_host
from jouled.errors import ConfigError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from jouled.daemon import Daemon

log = logging.getLogger("jouled")

STOP_TIMEOUT_S = 5.0
# How long one scrape's connection may sit idle (TLS handshake included).
HANDLER_TIMEOUT_S = 30.0


class DaemonCollector(Collector):
    """Every `jouled_*` metric, built from one read of the daemon's counts and gauges."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def collect(self) -> Iterator[Metric]:
        counts = self.daemon.counts.snapshot()
        g = self.daemon.gauges()

        attempts = CounterMetricFamily(
            "jouled_attempts",
            "Results signed since the daemon started, by status and solver.",
            labels=["status", "solver"],
        )
        for (status, solver), n in sorted(counts.attempts.items()):
            attempts.add_metric([status, solver], n)
        yield attempts

        aborts = CounterMetricFamily(
            "jouled_aborts",
            "Accepted attempts signed as aborts (the caller left, or the daemon stopped), "
            "by solver.",
            labels=["solver"],
        )
        for solver, n in sorted(counts.aborts.items()):
            aborts.add_metric([solver], n)
        yield aborts

        energy = CounterMetricFamily(
            "jouled_energy_joules",
            "Gross joules of the metered ops signed since the daemon started, by energy "
            "source and op (seed, apply, solve, grade, baseline; op_window for agents' op "
            "windows). Attested by the daemon's meter; estimator figures are a coefficient.",
            labels=["source", "op"],
        )
        for (source, op), mj in sorted(counts.energy_mj.items()):
            energy.add_metric([source, op], mj / 1000)
        yield energy

        invalid = CounterMetricFamily(
            "jouled_energy_invalid_windows",
            "Metered ops whose energy read failed (they add no joules), by op.",
            labels=["op"],
        )
        for op, n in sorted(counts.invalid_windows.items()):
            invalid.add_metric([op], n)
        yield invalid

        windows = CounterMetricFamily(
            "jouled_op_windows",
            "Agent-opened op windows signed since the daemon started; abandoned ones were "
            "closed by the daemon.",
            labels=["abandoned"],
        )
        for abandoned, n in sorted(counts.op_windows.items()):
            windows.add_metric(["true" if abandoned else "false"], n)
        yield windows

        yield CounterMetricFamily(
            "jouled_journal_refused",
            "Attempt journal rows refused at start: not written by this daemon, or out of "
            "bounds. Nothing is signed from them; the data dir's journal-refused.jsonl "
            "lists them.",
            value=counts.journal_refused,
        )

        if g.sampler_faults is not None:
            yield CounterMetricFamily(
                "jouled_sampler_faults",
                "Failed or implausible energy counter reads since the meter opened; a window "
                "holding one is invalid, never zero.",
                value=g.sampler_faults,
            )
        yield GaugeMetricFamily(
            "jouled_queue_depth", "Attempts waiting for a worker.", value=g.queue_depth
        )
        yield GaugeMetricFamily(
            "jouled_queue_limit",
            "Attempts that may wait for a worker before submissions are refused.",
            value=g.queue_limit,
        )
        yield GaugeMetricFamily(
            "jouled_attempts_running", "Attempts holding a worker.", value=g.running
        )
        yield GaugeMetricFamily("jouled_workers", "Attempts evaluated at once.", value=g.workers)
        yield GaugeMetricFamily(
            "jouled_op_windows_open", "Agent-opened op windows open now.", value=g.op_windows_open
        )
        yield GaugeMetricFamily(
            "jouled_ledger_entries",
            "Entries in the ledger (the size of its Merkle tree).",
            value=g.ledger_entries,
        )
        if g.checkpoint_age_s is not None:
            yield GaugeMetricFamily(
                "jouled_checkpoint_age_seconds",
                "Seconds since the signed checkpoint note was last written.",
                value=g.checkpoint_age_s,
            )
        if g.calibration_age_s is not None:
            yield GaugeMetricFamily(
                "jouled_calibration_age_seconds",
                "Seconds since the idle calibration in use was measured.",
                value=g.calibration_age_s,
            )
        meter = GaugeMetricFamily(
            "jouled_meter_info", "The energy source every figure carries.", labels=["source"]
        )
        meter.add_metric([g.energy_source], 1)
        yield meter


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# The roles whose bearer token may scrape a non-loopback endpoint.
SCRAPE_ROLES = frozenset({AUDITOR, OPERATOR})


def _refuse(start_response: Callable[..., Any], status: str, text: str) -> list[bytes]:
    headers = [("Content-Type", "text/plain; charset=utf-8")]
    if status.startswith("401"):
        headers.append(("WWW-Authenticate", "Bearer"))
    start_response(status, headers)
    return [text.encode("utf-8") + b"\n"]


def guarded(app: WSGIApp, tokens: TokenStore | None) -> WSGIApp:
    """`app` served to loopback peers only (`tokens` None), or to auditors' and operators'
    bearer tokens."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        peer = str(environ.get("REMOTE_ADDR", ""))
        if tokens is None:
            if not loopback_host(peer):
                log.info("refused a metrics scrape from %s: not loopback", peer)
                return _refuse(
                    start_response,
                    "403 Forbidden",
                    "metrics are served to this host's loopback only",
                )
            return app(environ, start_response)
        scheme, _, token = str(environ.get("HTTP_AUTHORIZATION", "")).partition(" ")
        identity = tokens.lookup(token.strip()) if scheme.lower() == "bearer" else None
        if identity is None:
            log.info("refused a metrics scrape from %s: no known bearer token", peer)
            return _refuse(
                start_response,
                "401 Unauthorized",
                "metrics need `Authorization: Bearer <token>` with an auditor's or "
                "operator's token",
            )
        if not identity.roles & SCRAPE_ROLES:
            log.info("refused a metrics scrape by %s (%s)", identity.name, peer)
            return _refuse(
                start_response,
                "403 Forbidden",
                f"{identity.name} may not scrape metrics: that needs the role auditor or operator",
            )
        return app(environ, start_response)

    return serve


class _QuietHandler(WSGIRequestHandler):
    timeout = HANDLER_TIMEOUT_S  # a client that stalls (or never finishes TLS) lets go

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _tls_context(config: Config) -> ssl.SSLContext:
    assert config.tls_cert is not None and config.tls_key is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(config.tls_cert), str(config.tls_key))
        if config.tls_client_ca is not None:
            context.load_verify_locations(cafile=str(config.tls_client_ca))
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"cannot load the TLS certificate for metrics: {err}") from err
    return context


class MetricsServer:
    """The HTTP listener serving one daemon's metrics, on a thread of its own.

    On loopback it answers loopback peers only, without credentials. Anywhere
    else (the configuration refuses it without TLS and a tokens file) it serves
    HTTPS, with client certificates when `--tls-client-ca` is set, to bearer
    tokens of auditors and operators only.
    """

    def __init__(self, daemon: Daemon, host: str, port: int, tokens: TokenStore) -> None:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(DaemonCollector(daemon))
        ProcessCollector(registry=self.registry)
        open_ = loopback_host(host)
        app = guarded(make_wsgi_app(self.registry), None if open_ else tokens)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Listener(ThreadingWSGIServer):
            address_family = family

        try:
            server = make_server(host, port, app, Listener, handler_class=_QuietHandler)
        except OSError as err:
            raise ConfigError(
                f"cannot serve metrics on {address}: {err.strerror or err}",
                hint="is another process listening there?",
            ) from err
        if not open_:
            server.socket = _tls_context(daemon.config).wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._server: WSGIServer = server
        self._thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
        self._thread.start()
        self.address = address
        if open_:
            log.info("metrics on http://%s/metrics (loopback peers only)", address)
        else:
            log.info("metrics on https://%s/metrics (auditor and operator tokens)", address)

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=STOP_TIMEOUT_S)
