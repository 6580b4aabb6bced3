"""`jouled swebench prepare --check`: is an instance gradable in the environment prepared for it?

Grades the record's gold patch and the empty patch once, as the daemon grades
them (the same contract, baseline and sandbox; nothing is signed or recorded):
the instance is gradable when gold is `resolved` and the empty patch is not.
Otherwise the report says why: the environment is broken (its baseline shows
it cannot run the tests: `broken-environment`, with the evidence), the instance
cannot be graded here (`no-environment`, `no-checkout`, ...), gold did not
resolve (with its failing tests), or the empty patch resolved (the tests do not
tell the fix from no fix here).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jouled.contracts import swebench
from jouled.contracts.contract import Contract
from jouled.contracts.swebench_records import SweBenchRecord
from jouled.errors import BrokenEnvironmentError, JouledError
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.metering import Metering
from jouled.patch import parse_patch
from jouled.pipeline.evaluate import Attempt, Evaluator
from jouled.pipeline.verdicts import Expected

GRADABLE = "gradable"


class _Baselines:
    """Baselines kept for the one check, never in a ledger."""

    def load_baseline(self, contract: Contract) -> Expected | None:
        return None

    def record_baseline(self, contract: Contract, body: dict[str, Any]) -> int:
        return 0


@dataclass
class Checked:
    instance_id: str
    gradable: bool
    code: str  # GRADABLE, or why not: an error's code, "gold-unresolved", "empty-resolved"
    reason: str = ""
    gold: str = ""  # the gold patch's status
    empty: str = ""  # the empty patch's status

    def to_json(self) -> dict[str, Any]:
        return {
            "gradable": self.gradable,
            "code": self.code,
            "reason": self.reason,
            "gold": self.gold,
            "empty": self.empty,
        }


def check(
    record: SweBenchRecord,
    checkout_root: Path,
    envs: Path,
    *,
    timeout_s: int = 1800,
    memory_modules: str = "withhold",
) -> Checked:
    """Grade gold and the empty patch for `record` in its prepared environment, under the
    memory-module policy the daemon will grade with (`jouled serve --memory-modules`)."""
    iid = record.instance_id
    try:
        contract = swebench.to_contract(
            record, checkout_root.resolve(), environments=envs.resolve(), timeout_s=timeout_s
        )
    except swebench.Unsupported as err:
        return Checked(iid, False, err.code, err.message)
    except JouledError as err:
        return Checked(iid, False, "refused", err.message)
    metering = Metering(EstimatorMeter(), None, "exclusive")
    statuses: dict[str, str] = {}
    verdicts: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="jouled-check-") as work:
        evaluator = Evaluator(metering, _Baselines(), Path(work), memory_modules=memory_modules)
        for name, text in (("gold", record.patch), ("empty", "")):
            patch = parse_patch(text.encode()) if text else None
            try:
                body = evaluator.evaluate(Attempt(contract, patch, name if text else "noop"))
            except BrokenEnvironmentError as err:
                return Checked(iid, False, err.code, err.message, **statuses)
            except JouledError as err:
                return Checked(iid, False, "refused", err.message, **statuses)
            statuses[name] = str(body.get("status", ""))
            verdicts[name] = body.get("verdict") or {}
    if statuses["gold"] != "resolved":
        failed = ", ".join(verdicts["gold"].get("failed", [])[:5])
        why = f"the gold patch is {statuses['gold']}" + (f" (failed: {failed})" if failed else "")
        return Checked(iid, False, "gold-unresolved", why, **statuses)
    if statuses["empty"] == "resolved":
        why = "the empty patch resolves: the tests do not tell the fix from no fix here"
        return Checked(iid, False, "empty-resolved", why, **statuses)
    return Checked(iid, True, GRADABLE, "", **statuses)
