"""A real `jouled serve --metrics-listen`, scraped over HTTP after real submissions.

Attacks: a scrape from off the host (the endpoint shows every solver's
counts), and clients naming solvers without end to make a time series each.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import duckdb
import pytest
from jb_client.api import Client
from prometheus_client.parser import text_string_to_metric_families

from jouled.auth import add_token
from jouled.ledger import journal
from jouled.ledger.entry import utc_now
from jouled.ledger.signing import load_private

from .certs import make_certs
from .conftest import TASKS, free_port, start_daemon
from .gate import fix_patch, write_tasks
from .test_daemon import make_patch, submit

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        return parse(reply.read().decode("utf-8"))


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def test_scraping_a_daemon_after_submissions(tmp_path: Path) -> None:
    port = free_port()
    daemon = start_daemon(
        tmp_path / "data",
        "--metrics-listen",
        f"127.0.0.1:{port}",
        "--metrics-solver",
        "scrape-me",
    )
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


def _serve(data_dir: Path, metrics: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "jouled",
            "serve",
            "--data-dir",
            str(data_dir),
            "--energy",
            "estimator",
            "--calibrate-seconds",
            "0",
            "--metrics-listen",
            metrics,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _off_loopback() -> str | None:
    """An address of this host that is not loopback (None where it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.123", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_metrics_off_loopback_without_tls_and_tokens_stop_the_daemon_at_start(
    tmp_path: Path,
) -> None:
    for address in ("0.0.0.0", "[::]"):
        done = _serve(tmp_path / "data", f"{address}:{free_port()}")
        assert done.returncode == 3, done.stderr
        assert "is not a loopback address" in done.stderr
        assert "--tls-cert, --tls-key and --tokens" in done.stderr
    tokens = tmp_path / "tokens.toml"
    add_token(tokens, "ops", ["operator"], None)
    done = _serve(tmp_path / "data", f"0.0.0.0:{free_port()}", "--tokens", str(tokens))
    assert done.returncode == 3 and "is not a loopback address" in done.stderr


def test_the_default_endpoint_cannot_be_reached_from_off_loopback(tmp_path: Path) -> None:
    address = _off_loopback()
    if address is None:
        pytest.skip("this host has no address but loopback to scrape from")
    port = free_port()
    daemon = start_daemon(tmp_path / "data", "--metrics-listen", str(port))  # a bare PORT
    try:
        assert "jouled_ledger_entries" in scrape(port)  # serving, on loopback
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, port), timeout=30).close()
    finally:
        assert daemon.stop() == 0, daemon.log.read_text()


def _https(address: str, port: int, ca: Path, token: str | None) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False  # the test certificate names loopback; the chain is checked
    conn = http.client.HTTPSConnection(address, port, context=context, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", "/metrics", headers=headers)
        reply = conn.getresponse()
        return reply.status, reply.read().decode("utf-8")
    finally:
        conn.close()


def _crashed_attempts(data_dir: Path, solvers: list[str]) -> None:
    """Journal rows as a daemon writes them (with its key), as if it crashed under them."""
    key = journal.mac_key(load_private(data_dir / "jouled.key"))
    rows = []
    for solver in solvers:
        attempt_id, accepted = uuid.uuid4().hex, utc_now()
        request = json.dumps({"solver": solver, "run_id": "", "rollout": 0})
        tag = journal.mac(key, attempt_id, None, "gate/hold", accepted, request)
        rows.append((attempt_id, None, "gate/hold", accepted, request, tag))
    with duckdb.connect(str(data_dir / "ledger.duckdb")) as db:
        db.executemany("INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)", rows)


def test_off_loopback_metrics_need_an_auditors_token_and_solver_labels_stay_bounded(
    tmp_path: Path,
) -> None:
    certs = make_certs(tmp_path / "certs")
    tasks = write_tasks(tmp_path / "tasks")
    tokens_file = tmp_path / "tokens.toml"
    tokens = {
        "bob": add_token(tokens_file, "bob", ["agent"], "bob/"),
        "audit": add_token(tokens_file, "audit", ["auditor"], None),
        "ops": add_token(tokens_file, "ops", ["operator"], None),
    }
    data, port = tmp_path / "data", free_port()
    args = (
        "--tls-cert",
        str(certs.server_cert),
        "--tls-key",
        str(certs.server_key),
        "--tokens",
        str(tokens_file),
        "--metrics-listen",
        f"0.0.0.0:{port}",
        "--metrics-solver",
        "bob/declared",
    )
    target = f"127.0.0.1:{free_port()}"
    env = {"JB_CA": str(certs.ca), "JB_TOKEN": tokens["ops"]}
    daemon = start_daemon(data, *args, tasks=tasks, listen=target, client_env=env)
    scraper = _off_loopback() or "127.0.0.1"
    try:
        # The agent names solvers of its own without end: each attempt a new name.
        fix = fix_patch(tasks, tmp_path)
        names = [f"bob/run-{i}" for i in range(6)] + ["bob/declared"]
        with Client(target, token=tokens["bob"], ca=certs.ca, env={}) as bob:
            for name in names:
                assert bob.submit("gate/hold", fix, solver=name)["status"] == "resolved"

        assert _https(scraper, port, certs.ca, None)[0] == 401
        assert _https(scraper, port, certs.ca, "jb_not-a-token")[0] == 401
        status, text = _https(scraper, port, certs.ca, tokens["bob"])
        assert status == 403 and "needs the role auditor or operator" in text
        with (
            pytest.raises(http.client.HTTPException),
            urllib.request.urlopen(f"http://{scraper}:{port}/metrics", timeout=30),
        ):
            pass  # plain HTTP gets no answer from the TLS listener
        for who in ("audit", "ops"):
            status, text = _https(scraper, port, certs.ca, tokens[who])
            assert status == 200
        attempts = parse(text)["jouled_attempts_total"]
        assert attempts == {
            (("solver", "_other"), ("status", "resolved")): 6,
            (("solver", "bob/declared"), ("status", "resolved")): 1,
        }
    finally:
        assert daemon.stop() == 0, daemon.log.read_text()

    # A thousand distinct names, signed at once: attempts a crash cut off become aborts
    # at the next start, each under the solver its request named.
    _crashed_attempts(data, [f"bob/crashed-{i}" for i in range(1000)])
    daemon = start_daemon(data, *args, tasks=tasks, listen=target, client_env=env)
    try:
        status, text = _https(scraper, port, certs.ca, tokens["audit"])
        assert status == 200
        assert parse(text)["jouled_aborts_total"] == {(("solver", "_other"),): 1000}
        out = tmp_path / "export.jsonl"
        assert daemon.client("export", "--out", str(out)).returncode == 0
        docs = [
            json.loads(base64.b64decode(json.loads(line)["payload"]))
            for line in out.read_text().splitlines()
        ]
        signed = {d["body"]["solver"] for d in docs if d["kind"] == "abort"}
        assert len(signed) == 1000  # every name was signed as asked, and counted as one
    finally:
        assert daemon.stop() == 0, daemon.log.read_text()
