"""Export lines for report tests: payloads only (the report checks no signature)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from jb_client.documents import BestOfKRow, FrontierRow
from jb_client.taskinfo import TaskInfo

from jouled.best_of_k import best_of_k
from jouled.frontier import frontier_rows

# Names no daemon would accept, as a ledger from elsewhere might hold them.
HOSTILE = '"><img src=x onerror="console.error(1)"><script>console.error(2)</script>$x$'


def result(
    seq: int,
    task: str,
    status: str,
    *,
    solver: str = "agent",
    model: str = "m1",
    rollout: int = 0,
    grade_mj: int = 5000,
    reliable: bool = True,
    audit: list[dict[str, Any]] | None = None,
    usd_micros: int = 0,
    integrity: str = "monitor",
) -> dict[str, Any]:
    window = {
        "attribution": "exclusive",
        "gross_mj": grade_mj,
        "idle_mj": 100,
        "marginal_mj": grade_mj - 100,
        "reliable": reliable,
        "source": "rapl",
        "valid": True,
        "wall_ms": 400,
    }
    if not reliable:
        window["reasons"] = ["window 4 ms is under the 10 ms floor"]
    return {
        "seq": seq,
        "kind": "result",
        "time": "2026-01-01T00:01:00.000Z",
        "body": {
            "task_id": task,
            "suite": task.split("/")[0],
            "status": status,
            "resolved": status == "resolved",
            "tests": {"expected": 4, "passed": 4 if status == "resolved" else 1},
            "solver": solver,
            "model": model,
            "agent": "alice",
            "run_id": "r1",
            "rollout": rollout,
            "claimed": {"usd_micros": usd_micros} if usd_micros else {},
            "audit": audit or [],
            "energy": {"grade": window, "seed": {**window, "gross_mj": 9, "reliable": False}},
            "energy_total": {**window, "gross_mj": grade_mj + 9},
            "isolation": {"level": "bwrap"},
            "integrity": {"report": "channel", "canaries": 2, "level": integrity},
            "provenance": {"jouled": "0.1.0", "host": "h1", "meter": "rapl", "calibration_seq": 1},
        },
    }


def calibration(seq: int) -> dict[str, Any]:
    return {
        "seq": seq,
        "kind": "calibration",
        "time": "2026-01-01T00:00:10.000Z",
        "body": {
            "domains": {"package-0": {"idle_mw": 4100, "stddev_mw": 120}},
            "seconds": 10,
            "source": "rapl",
        },
    }


def hostile_ledger() -> list[dict[str, Any]]:
    flag = {"code": "conftest", "path": HOSTILE, "line": 3, "detail": HOSTILE}
    docs = [calibration(1)]
    for rollout in range(2):
        for n, task in enumerate(("s/a", "s/b", f"s/{HOSTILE}")):
            seq = len(docs) + 1
            docs.append(
                result(
                    seq,
                    task,
                    "resolved" if n < 2 - rollout else "unresolved",
                    rollout=rollout,
                    usd_micros=20000,
                )
            )
            docs.append(
                result(
                    seq + 1,
                    task,
                    "tampered" if n == 0 else "resolved",
                    solver=HOSTILE,
                    model=HOSTILE,
                    rollout=rollout,
                    grade_mj=900,
                    reliable=False,
                    audit=[flag] if n == 0 else [],
                )
            )
    return docs


def write_export(path: Path, docs: list[dict[str, Any]], note: str = "") -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for doc in docs:
            payload = json.dumps({"prev": "", **doc}, sort_keys=True).encode()
            line = {
                "seq": doc["seq"],
                "payload": base64.b64encode(payload).decode(),
                "payloadType": "application/vnd.jouled.event.v1+json",
                "signatures": [],
                "leaf_hash": "",
            }
            fh.write(json.dumps(line) + "\n")
    if note:
        history = path.with_name(path.name + ".checkpoints.jsonl")
        history.write_text(json.dumps({"note": note}) + "\n", encoding="utf-8")
    return path


def frontier(results: Iterable[Mapping[str, Any]], **options: Any) -> list[FrontierRow]:
    """The frontier of result bodies (`frontier_rows`) as the client's tables and figures
    take it: a `FrontierRow` each, as a daemon's answer or an export is read."""
    return [FrontierRow.parse(r) for r in frontier_rows(results, **options)]


def bestofk(results: Iterable[Mapping[str, Any]], **options: Any) -> list[BestOfKRow]:
    """Best-of-k of result bodies (`best_of_k`), a `BestOfKRow` each."""
    return [BestOfKRow.parse(r) for r in best_of_k(results, **options)]


def task(**fields: Any) -> TaskInfo:
    """A task as ListTasks answers it, with `fields`; the ones not given are empty."""
    empty: dict[str, Any] = {
        "suite": "",
        "name": "",
        "test_cmd": [],
        "test_files": [],
        "fail_to_pass": [],
        "pass_to_pass": [],
        "source": "",
        "license": "",
    }
    return TaskInfo(**{**empty, **fields})
