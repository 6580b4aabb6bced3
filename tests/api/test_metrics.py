"""The Prometheus endpoint in-process: a real daemon core, scraped over HTTP."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families

from jouled.api.metrics import MetricsServer, guarded
from jouled.auth import TokenStore
from jouled.config import Config
from jouled.daemon import Daemon
from jouled.errors import ConfigError
from jouled.submission import Submission

REPO = Path(__file__).resolve().parents[2]


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of the exposition, by sample name, then by sorted labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        assert reply.status == 200
        text = reply.read().decode("utf-8")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(
        Config.from_env(
            {},
            data_dir=tmp_path / "data",
            energy="estimator",
            calibrate_seconds=0,
            task_dirs=(REPO / "tasks" / "smoke",),
            metrics_solvers=("metrics-a",),
        )
    )
    yield d
    d.close()


@pytest.fixture
def server(daemon: Daemon) -> Iterator[MetricsServer]:
    s = MetricsServer(daemon, "127.0.0.1", 0, TokenStore())
    yield s
    s.close()


def test_a_fresh_daemon_reports_its_state_and_no_attempts(
    daemon: Daemon, server: MetricsServer
) -> None:
    m = scrape(server.port)
    assert m["jouled_ledger_entries"][()] == daemon.ledger.size >= 1  # genesis
    assert m["jouled_queue_depth"][()] == 0
    assert m["jouled_queue_limit"][()] == daemon.config.queue_limit
    assert m["jouled_attempts_running"][()] == 0
    assert m["jouled_workers"][()] == daemon.config.workers
    assert m["jouled_op_windows_open"][()] == 0
    assert m["jouled_sampler_faults_total"][()] == 0
    assert m["jouled_checkpoint_age_seconds"][()] >= 0
    assert m["jouled_meter_info"][(("source", "estimator"),)] == 1
    assert "jouled_attempts_total" not in m
    assert "process_cpu_seconds_total" in m


def test_a_signed_result_moves_the_counters(daemon: Daemon, server: MetricsServer) -> None:
    contract = daemon.task("smoke/interval")
    assert contract.reference_patch is not None
    receipt = daemon.submit(Submission("smoke/interval", contract.reference_patch, "metrics-a"))
    daemon.submit(Submission("smoke/interval", b"", "metrics-b"))
    m = scrape(server.port)
    attempts = m["jouled_attempts_total"]
    assert attempts[(("solver", "metrics-a"), ("status", "resolved"))] == 1
    # An undeclared solver is counted, under the one label every such solver shares.
    assert attempts[(("solver", "_other"), ("status", "unresolved"))] == 1
    energy = m["jouled_energy_joules_total"]
    grade = energy[(("op", "grade"), ("source", "estimator"))]
    graded = [e.body["energy"]["grade"]["gross_mj"] for e in daemon.ledger.entries("result")]
    assert grade == pytest.approx(sum(graded) / 1000)
    assert receipt.energy["grade"]["gross_mj"] in graded
    assert m["jouled_ledger_entries"][()] == daemon.ledger.size


def test_a_port_in_use_is_a_startup_error(daemon: Daemon, server: MetricsServer) -> None:
    with pytest.raises(ConfigError, match="cannot serve metrics"):
        MetricsServer(daemon, "127.0.0.1", server.port, TokenStore())


@pytest.mark.parametrize("address", ["host:", "host:http", "1.2.3.4:70000", "[::1]:0"])
def test_a_bad_metrics_address_is_refused(tmp_path: Path, address: str) -> None:
    with pytest.raises(ConfigError, match="--metrics-listen"):
        Config.from_env({}, data_dir=tmp_path, metrics_listen=address)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("9464", ("127.0.0.1", 9464)),
        ("127.0.0.2:1", ("127.0.0.2", 1)),
        ("[::1]:9464", ("::1", 9464)),
    ],
)
def test_metrics_addresses(tmp_path: Path, address: str, expected: tuple[str, int]) -> None:
    config = Config.from_env({}, data_dir=tmp_path, metrics_listen=address)
    assert config.metrics_address == expected
    assert Config.from_env({}, data_dir=tmp_path).metrics_address is None  # off by default


@pytest.mark.parametrize("address", ["0.0.0.0:9464", "[::]:9464", "192.0.2.7:9464", "host:9464"])
def test_metrics_beyond_loopback_need_tls_and_tokens(tmp_path: Path, address: str) -> None:
    with pytest.raises(ConfigError, match="not a loopback address"):
        Config.from_env({}, data_dir=tmp_path, metrics_listen=address)
    with pytest.raises(ConfigError, match="not a loopback address"):
        Config.from_env({}, data_dir=tmp_path, metrics_listen=address, tokens_file=tmp_path / "t")
    secured = Config.from_env(
        {},
        data_dir=tmp_path,
        metrics_listen=address,
        tls_cert=tmp_path / "cert.pem",
        tls_key=tmp_path / "key.pem",
        tokens_file=tmp_path / "tokens.toml",
    )
    assert secured.metrics_address is not None


def _call(app: Any, environ: dict[str, str]) -> str:
    statuses: list[str] = []
    b"".join(app(environ, lambda status, headers: statuses.append(status)))
    return statuses[0]


@pytest.mark.parametrize(
    ("peer", "status"),
    [
        ("127.0.0.1", "200 OK"),
        ("::1", "200 OK"),
        ("::ffff:127.0.0.1", "200 OK"),
        ("192.0.2.9", "403 Forbidden"),
        ("::ffff:192.0.2.9", "403 Forbidden"),
        ("", "403 Forbidden"),
    ],
)
def test_an_open_endpoint_answers_loopback_peers_only(
    server: MetricsServer, peer: str, status: str
) -> None:
    app = guarded(make_wsgi_app(server.registry), None)
    assert (
        _call(app, {"REMOTE_ADDR": peer, "REQUEST_METHOD": "GET", "PATH_INFO": "/metrics"})
        == status
    )
