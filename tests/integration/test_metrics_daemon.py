"""A real `jouled serve --metrics-listen`, scraped over HTTP after real submissions."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from .conftest import TASKS, free_port, start_daemon
from .test_daemon import make_patch, submit

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode("utf-8")
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def test_scraping_a_daemon_after_submissions(tmp_path: Path) -> None:
    port = free_port()
    daemon = start_daemon(tmp_path / "data", "--metrics-listen", f"127.0.0.1:{port}")
    try:
        # The daemon answers gRPC only once its metrics listener is bound.
        before = scrape(port)
        assert before["jouled_ledger_entries"][()] == daemon.ledger_size()
        assert before["jouled_queue_depth"][()] == 0
        assert "jouled_attempts_total" not in before

        fix = make_patch(tmp_path, TASKS / "smoke" / "lrucache", {}, reference=True)
        resolved = submit(daemon, fix, "smoke/lrucache", "--solver", "scrape-me")
        empty = tmp_path / "empty.patch"
        empty.write_bytes(b"")
        unresolved = submit(daemon, empty, "smoke/lrucache", "--solver", "scrape-me")
        assert (resolved["status"], unresolved["status"]) == ("resolved", "unresolved")

        # A receipt is sent after its result is counted: no waiting, no polling.
        m = scrape(port)
        attempts = m["jouled_attempts_total"]
        assert attempts[(("solver", "scrape-me"), ("status", "resolved"))] == 1
        assert attempts[(("solver", "scrape-me"), ("status", "unresolved"))] == 1
        grade_mj = sum(r["energy"]["grade"]["gross_mj"] for r in (resolved, unresolved))
        energy = m["jouled_energy_joules_total"]
        assert energy[(("op", "grade"), ("source", "estimator"))] == grade_mj / 1000
        assert energy[(("op", "grade"), ("source", "estimator"))] > 0
        assert m["jouled_ledger_entries"][()] == daemon.ledger_size() >= 3
        assert m["jouled_queue_depth"][()] == 0
        assert m["jouled_attempts_running"][()] == 0
        assert m["jouled_sampler_faults_total"][()] == 0
        assert 0 <= m["jouled_checkpoint_age_seconds"][()] < 3600
        assert m["jouled_meter_info"][(("source", "estimator"),)] == 1
    finally:
        assert daemon.stop() == 0, daemon.log.read_text()


def test_a_bad_metrics_address_stops_the_daemon_at_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jouled",
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--energy",
            "estimator",
            "--calibrate-seconds",
            "0",
            "--metrics-listen",
            "localhost:http",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3
    assert "--metrics-listen 'localhost:http' is not HOST:PORT" in done.stderr
