"""The daemon's library core in-process: idempotency under concurrency.

Real DuckDB and real pytest runs; only gRPC is left out.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jouled.config import Config
from jouled.daemon import Daemon
from jouled.documents.bodies import ResultBody
from jouled.documents.sent import Receipt
from jouled.errors import NotFoundError, UsageError
from jouled.submission import Submission

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(
        Config.from_env(
            {},
            data_dir=tmp_path / "data",
            energy="estimator",
            calibrate_seconds=0,
            task_dirs=(REPO / "tasks" / "smoke",),
        )
    )
    yield d
    d.close()


def test_concurrent_retries_with_one_key_yield_one_result(daemon: Daemon) -> None:
    contract = daemon.task("smoke/interval")
    assert contract.reference_patch is not None
    sub = Submission("smoke/interval", contract.reference_patch, "agent", idempotency_key="k-1")
    receipts: list[Receipt] = []
    threads = [
        threading.Thread(target=lambda: receipts.append(daemon.submit(sub))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.seq for r in receipts}) == 1
    assert sum(not r.replayed for r in receipts) == 1
    results = [e for e in daemon.ledger.entries("result") if e.body["idempotency_key"] == "k-1"]
    assert len(results) == 1 and results[0].body["status"] == "resolved"


def test_a_key_reused_for_another_patch_is_refused(daemon: Daemon) -> None:
    contract = daemon.task("smoke/interval")
    assert contract.reference_patch is not None
    daemon.submit(
        Submission("smoke/interval", contract.reference_patch, "a", idempotency_key="k-2")
    )
    other = contract.reference_patch + (
        b"diff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n--- /dev/null\n"
        b"+++ b/NOTES.md\n@@ -0,0 +1 @@\n+note\n"
    )
    with pytest.raises(UsageError, match="already used for a different submission"):
        daemon.submit(Submission("smoke/interval", other, "a", idempotency_key="k-2"))


def test_audit_flags_are_signed_and_change_no_verdict(daemon: Daemon) -> None:
    contract = daemon.task("smoke/interval")
    assert contract.reference_patch is not None
    hack = (
        b"diff --git a/interval/spy.py b/interval/spy.py\nnew file mode 100644\n--- /dev/null\n"
        b"+++ b/interval/spy.py\n@@ -0,0 +1,2 @@\n+import sys\n+SEEN = 'pytest' in sys.modules\n"
    )
    flagged = daemon.submit(Submission("smoke/interval", contract.reference_patch + hack, "agent"))
    assert flagged.status == "resolved"  # the fix is right; the flags are evidence only
    assert {(f["code"], f["path"], f["line"]) for f in flagged.audit} == {
        ("sys-modules", "interval/spy.py", 2),
        ("test-detection", "interval/spy.py", 2),
    }
    body = daemon.ledger.get(flagged.seq).body  # signed into the entry itself
    assert body["audit"] == flagged.audit
    clean = daemon.submit(Submission("smoke/interval", None, "reference"))
    assert clean.status == "resolved"
    assert clean.audit == [] == daemon.ledger.get(clean.seq).body["audit"]
    row = daemon.frontier("smoke")["rows"]
    assert {r["solver"]: r["audit_flagged"] for r in row} == {"agent": 1, "reference": 0}


def test_every_result_says_what_graded_it(daemon: Daemon) -> None:
    import platform

    import pytest as pytest_module

    contract = daemon.task("smoke/interval")
    assert contract.reference_patch is not None
    receipt = daemon.submit(Submission("smoke/interval", contract.reference_patch, "agent"))
    body = daemon.ledger.get(receipt.seq).body
    made = body["provenance"]
    assert made["python"] == platform.python_version()
    assert made["pytest"] == pytest_module.__version__
    assert len(made["distributions_sha256"]) == 64 and made["distributions"] > 10
    assert made["kernel"].startswith("Linux ") and made["cpu"]
    assert made["meter"] == "estimator" and made["sandbox"] == body["sandbox"]
    assert body["isolation"]["level"] == body["sandbox"]
    assert {"seed", "apply", "grade"} <= set(body["energy"])


def test_a_result_in_an_older_shape_still_gets_a_receipt(daemon: Daemon) -> None:
    """A body signed before logs, audit flags and attempt ids keeps its bytes and is served."""
    old = {
        "task_id": "smoke/interval",
        "suite": "smoke",
        "task_digest": daemon.task("smoke/interval").digest,
        "patch_sha256": "0" * 64,
        "status": "unresolved",
        "resolved": False,
        "tests": {"expected": 2, "passed": 1, "failed": 1, "missing": 0},
        "energy": {"grade": {"gross_mj": 5, "idle_mj": 1, "marginal_mj": 4, "wall_ms": 3}},
        "solver": "someone/agent-v0",
        "output": {"sha256": "ab" * 32, "kept_bytes": 5, "dropped_bytes": 0},
        "version": "0.0.9",
    }
    entry = daemon.ledger.append("result", old)
    receipt = Receipt.parse(daemon.get_receipt(seq=entry.seq).to_dict())  # as it is sent
    assert receipt.status == "unresolved" and receipt.audit == [] and receipt.tests_failed == []
    assert receipt.output_tail == ""  # its output was never kept in the log store
    assert receipt.entry is not None and receipt.entry.payload_bytes() == entry.payload
    body = ResultBody.parse(receipt.entry.parsed_payload().body)
    assert body.to_dict() == old and body.attempt_id is None


def test_an_unknown_suite_is_not_found_in_the_frontier_and_best_of_k(daemon: Daemon) -> None:
    for ask in (daemon.frontier, daemon.best_of_k):
        with pytest.raises(NotFoundError) as err:
            ask("nosuch")
        assert "nosuch" in err.value.message and "smoke" in err.value.hint
        assert ask("smoke")["rows"] == []  # a registered suite with no result yet
