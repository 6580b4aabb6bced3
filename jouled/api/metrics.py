"""The Prometheus endpoint: the daemon's counts and gauges over plain HTTP.

A dedicated `CollectorRegistry` (never the library's global one) holds one
collector that reads `Daemon.counts` and `Daemon.gauges()` at scrape time,
plus the standard `process_*` metrics. It is served on its own listener
(`jouled serve --metrics-listen HOST:PORT`), apart from the gRPC API: it
carries no secrets (no patches, prompts, tokens or keys; solver names and
counts only) and no authentication, so it belongs on loopback or behind a
proxy that adds both.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from ipaddress import ip_address
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jouled.errors import ConfigError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from jouled.daemon import Daemon

log = logging.getLogger("jouled")

STOP_TIMEOUT_S = 5.0


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


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


class MetricsServer:
    """The HTTP listener serving one daemon's metrics, on a thread of its own."""

    def __init__(self, daemon: Daemon, host: str, port: int) -> None:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(DaemonCollector(daemon))
        ProcessCollector(registry=self.registry)
        try:
            server, thread = start_http_server(port, host, registry=self.registry)
        except OSError as err:
            raise ConfigError(
                f"cannot serve metrics on {address}: {err.strerror or err}",
                hint="is another process listening there?",
            ) from err
        self._server: WSGIServer = server
        self._thread: threading.Thread = thread
        self.address = address
        if not _loopback(host):
            log.warning(
                "metrics on %s are served to anyone who can reach it, without authentication",
                address,
            )
        log.info("metrics on http://%s/metrics", address)

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=STOP_TIMEOUT_S)
