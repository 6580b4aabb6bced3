"""What a SWE-bench run did with each prediction: graded, or why not (`jb-client swebench`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jb_client.documents import Receipt, SkippedRecord

    from jouled.contracts.swebench_records import Prediction, SweBenchRecord


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """One prediction of a run: graded (its status, the official verdict) or why not
    (`code`, `reason`)."""

    instance_id: str
    graded: bool
    status: str | None = None
    resolved: bool = False
    seq: int | None = None
    official: str | None = None  # the contract's own verdict (SWE-bench's official one)
    strict_agrees: bool | None = None  # whether jouled's stricter grading agrees with it
    code: str | None = ""
    reason: str = ""

    def to_dict(self) -> dict[str, str | bool | int | None]:
        """The row as `jb-client swebench --json` lists it under `instances`."""
        return asdict(self)


def coverage(
    preds: dict[str, Prediction],
    records: list[SweBenchRecord],
    skipped: list[SkippedRecord],
    malformed: list[dict[str, str]],
    receipts: list[Receipt],
) -> list[Coverage]:
    """One row per prediction: graded (its status, the official verdict) or why not."""
    graded = {r.task_id.split("/", 1)[1]: r for r in receipts}
    refused = {s.instance_id: s for s in skipped}
    bad = {m["instance_id"]: m for m in malformed if m["instance_id"]}
    known = {r.instance_id for r in records}
    rows = []
    for iid in sorted(set(preds) | set(bad)):
        if iid in graded:
            r = graded[iid]
            verdict = r.verdict or {}
            strict = verdict.get("strict") or {}
            row = Coverage(
                instance_id=iid,
                graded=True,
                status=r.status.value,
                resolved=r.resolved,
                seq=r.seq,
                official=verdict.get("status"),
                strict_agrees=strict.get("agrees"),
            )
        elif iid not in known:
            row = Coverage(
                instance_id=iid,
                graded=False,
                code="not-in-dataset",
                reason="no record for this instance",
            )
        elif iid in refused:
            s = refused[iid]
            # A record the daemon skipped without naming a code was refused.
            code = "refused" if "code" in s.absent else s.code
            row = Coverage(instance_id=iid, graded=False, code=code, reason=s.reason)
        elif iid in bad:
            row = Coverage(
                instance_id=iid,
                graded=False,
                code="malformed-prediction",
                reason=bad[iid]["reason"],
            )
        else:
            row = Coverage(instance_id=iid, graded=False, code="not-submitted", reason="not graded")
        rows.append(row)
    return rows
