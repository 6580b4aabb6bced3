"""The texts a result signs: kept in the log store, read back against their digests.

A result signs the sha256 of each captured run and of its long test-id lists;
`AttemptLogs` keeps those texts when the result is signed and serves them only
while they still hash to what was signed (`jouled.logstore`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jouled.ledger.entry import Entry
from jouled.logstore import LogStore
from jouled.pipeline.evaluate import Attempt

log = logging.getLogger("jouled")

# How much of a graded run's output a receipt carries (the tail; the sandbox keeps 1 MiB).
OUTPUT_TAIL_CHARS = 64 << 10
# How many bytes of stored text (run output and id lists together) one GetLogs answer
# carries: under gRPC's default 4 MiB message limit. Longer texts keep their tails.
LOGS_RESPONSE_BYTES = 3 << 20
# The order runs are served in, so that the bound clips the least useful first.
_LOG_PHASES = ("grade", "solve", "baseline", "reference")


class AttemptLogs:
    def __init__(self, store: LogStore, data_dir: Path) -> None:
        self.store = store
        self.data_dir = data_dir

    def keep(self, attempt: Attempt, body: dict[str, Any]) -> None:
        """Keep the texts the body will sign; one that cannot be kept is signed `missing`."""
        lost: set[str] = set()
        for digest, data in attempt.blobs.items():
            try:
                self.store.put(data)
            except OSError as err:  # the result stands; only this text is lost
                log.warning("cannot keep a log of attempt %s: %s", attempt.attempt_id, err)
                lost.add(digest)
        for run in body.get("logs", {}).values():
            if run["sha256"] in lost:
                run["status"] = "missing"

    def _legacy_output(self, attempt_id: str, digest: str) -> bytes | None:
        """A graded run's tail as results signed before the log store kept it, if unchanged."""
        if not attempt_id.isalnum():
            return None
        try:
            data = (self.data_dir / "output" / f"{attempt_id}.log").read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == digest else None

    def signed_text(self, body: Mapping[str, Any], digest: str) -> bytes | None:
        """The stored text whose sha256 is `digest`; None when absent or changed."""
        data = self.store.get(digest)
        if data is None:
            data = self._legacy_output(str(body.get("attempt_id", "")), digest)
        return data

    @staticmethod
    def runs(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """The captured runs a result signs (older results signed only the graded one)."""
        if "logs" in body:
            return {phase: dict(run) for phase, run in body["logs"].items()}
        if "output" in body:
            out = body["output"]
            status = "truncated" if out.get("dropped_bytes") else "complete"
            return {"grade": {**out, "status": status}}
        return {}

    def output_tail(self, body: Mapping[str, Any]) -> str:
        run = self.runs(body).get("grade")
        data = None if run is None else self.signed_text(body, str(run["sha256"]))
        if data is None:
            return ""
        return data.decode(errors="replace")[-OUTPUT_TAIL_CHARS:]

    def document(self, entry: Entry) -> dict[str, Any]:
        body = entry.body
        budget = LOGS_RESPONSE_BYTES
        ids: dict[str, Any] = {}
        for key in ("tests_failed", "tests_missing"):
            listed = [str(i) for i in body.get(key, [])]
            signed = body.get(f"{key}_all")
            item: dict[str, Any] = {"count": len(listed), "sha256": None, "status": "complete"}
            if signed is not None:
                item |= {"count": signed["count"], "sha256": signed["sha256"]}
                data = self.signed_text(body, str(signed["sha256"]))
                if data is None:
                    item["status"] = "missing"
                else:
                    listed = data.decode(errors="replace").splitlines()
            kept: list[str] = []
            for test_id in listed:
                cost = len(test_id.encode()) + 1
                if cost > budget:
                    break
                budget -= cost
                kept.append(test_id)
            item["ids"] = kept
            item["clipped"] = len(kept) < len(listed)
            ids[key] = item
        runs: dict[str, dict[str, Any]] = {}
        signed_runs = self.runs(body)
        for phase in sorted(signed_runs, key=lambda p: (*_LOG_PHASES, p).index(p)):
            run = signed_runs[phase]
            data = self.signed_text(body, str(run["sha256"]))
            run["signed_status"] = run["status"]
            if data is None:
                run |= {"status": "missing", "text": "", "clipped_bytes": 0}
            else:
                tail = data[len(data) - min(len(data), budget) :]
                budget -= len(tail)
                run |= {
                    "text": tail.decode(errors="replace"),
                    "clipped_bytes": len(data) - len(tail),
                }
            runs[phase] = run
        return {
            "seq": entry.seq,
            "task_id": body["task_id"],
            "attempt_id": body.get("attempt_id", ""),
            "status": body["status"],
            "runs": runs,
            **ids,
            "max_bytes": LOGS_RESPONSE_BYTES,
        }
