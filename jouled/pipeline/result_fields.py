"""What a result body says of an attempt's runs, beside its verdict.

The run's output and logs identified by hash (the texts themselves go to the
blobs the daemon stores before it signs), long test id lists by count and
hash, the energy of every op added up, the expected tests an agent could run
itself, and the patch's audit flags: evidence only, never part of the verdict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from jouled.contracts.contract import Contract
from jouled.patch import Patch
from jouled.pipeline.audit import audit_patch, to_wire
from jouled.pipeline.limits import RunResult
from jouled.pipeline.testreport import PASSED
from jouled.pipeline.verdicts import CheckRun, Expected

# How many failing (and missing) test ids a body lists inline; a longer list is
# signed as the sha256 of all of them, one per line, and stored like the logs.
INLINE_IDS = 50

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def run_counts(check: CheckRun) -> dict[str, Any]:
    values = list(check.outcomes.values())
    return {
        "exit_code": check.result.exit_code,
        "timed_out": check.result.timed_out,
        "report": check.report,
        "forged": check.forged,
        "passed": values.count(PASSED),
        "failed": len(values) - values.count(PASSED),
    }


def visible_tests(
    contract: Contract, expected: Expected, outcomes: Mapping[str, str]
) -> dict[str, int]:
    """The expected tests an agent could run itself (not in hidden files), and how many passed."""
    ids = [
        t
        for t in (*expected.fail_to_pass, *expected.pass_to_pass)
        if not contract.is_hidden(t.split("::", 1)[0])
    ]
    return {"expected": len(ids), "passed": sum(outcomes.get(t) == PASSED for t in ids)}


def energy_total(energy: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Every metered op of one attempt added up: what the attempt cost the host.

    Only valid windows add joules (`invalid_ops` says how many did not); the
    total is reliable only when each op is, and names every source it summed.
    """
    total = {"gross_mj": 0, "idle_mj": 0, "marginal_mj": 0, "wall_ms": 0}
    sources: set[str] = set()
    reliable, invalid = True, 0
    for window in energy.values():
        total["wall_ms"] += int(window.get("wall_ms") or 0)
        sources.add(str(window.get("source", "")))
        if window.get("valid") is False or window.get("gross_mj") is None:
            invalid += 1
            reliable = False
            continue
        for key in ("gross_mj", "idle_mj", "marginal_mj"):
            total[key] += int(window.get(key) or 0)
        reliable = reliable and bool(window.get("reliable"))
    return {
        **total,
        "ops": sorted(energy),
        "source": "mixed:" + ",".join(sorted(sources))
        if len(sources) > 1
        else next(iter(sources), ""),
        "reliable": reliable and bool(energy),
        "invalid_ops": invalid,
    }


def output_summary(result: RunResult) -> dict[str, Any]:
    """What the signed body says of the run's output: the kept tail is identified by hash."""
    kept = result.output.encode()
    return {
        "sha256": hashlib.sha256(kept).hexdigest(),
        "kept_bytes": len(kept),
        "dropped_bytes": result.output_dropped,
        "exit_code": result.exit_code,
        "signal": result.signal,
    }


def capture(result: RunResult, blobs: dict[str, bytes]) -> dict[str, Any]:
    """A run's captured output as signed: its kept bytes (added to `blobs`) by hash."""
    kept = result.output.encode()
    digest = hashlib.sha256(kept).hexdigest()
    blobs[digest] = kept
    return {
        "sha256": digest,
        "status": "truncated" if result.output_dropped else "complete",
        "kept_bytes": len(kept),
        "dropped_bytes": result.output_dropped,
        "exit_code": result.exit_code,
        "signal": result.signal,
    }


def id_list(ids: Sequence[str], blobs: dict[str, bytes]) -> dict[str, Any]:
    """All of `ids`, one per line, as signed: a count and a hash (the text added to `blobs`)."""
    text = "".join(f"{i}\n" for i in ids).encode()
    digest = hashlib.sha256(text).hexdigest()
    blobs[digest] = text
    return {"count": len(ids), "sha256": digest}


# -- patch audit ---------------------------------------------------------------------------

AUDIT_MAX_FILE_BYTES = 4 << 20


def audit_flags(contract: Contract, patch: Patch | None) -> list[dict[str, Any]]:
    """The signed audit flags of a patch, judged against the pristine files it changes."""
    if patch is None:
        return []
    before: dict[str, str] = {}
    for file in patch.files:
        if file.old_path is None:
            continue
        path = contract.pristine / file.old_path
        try:
            small = path.is_file() and path.stat().st_size <= AUDIT_MAX_FILE_BYTES
            if small and not path.is_symlink():
                before[file.old_path] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # judged by its added lines alone
    try:
        return to_wire(audit_patch(patch, before))
    except Exception as err:  # hostile input must never cost a result its verdict
        return [{"code": "audit-failed", "path": "", "line": 0, "detail": type(err).__name__}]
