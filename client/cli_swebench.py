"""`jb-client swebench`: grade a SWE-bench predictions file and report its coverage."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from jb_client.cli_args import Option
from jb_client.cli_common import (
    Json,
    connect,
    emit,
    fail,
    render,
)

if TYPE_CHECKING:
    from jb_client.documents import Receipt

from jouled.errors import JouledError, Kind


def swebench(
    dataset: Annotated[Path, Option(help="SWE-bench records (JSON, JSONL).")],
    predictions: Annotated[Path, Option(help="Predictions (SWE-bench format).")],
    suite: Annotated[str, Option(help="Suite for the registered tasks.")] = "swebench-verified",
    run_id: Annotated[str, Option(help="Default: a fresh id.")] = "",
    as_json: Json = False,
) -> None:
    """Grade SWE-bench predictions: register the records with the daemon, submit each patch.

    A malformed prediction (not a prediction object, or a patch that does not parse or
    apply) is reported and skipped, and the rest are graded; an empty one is graded
    as the pristine tree and signed unresolved, as the official harness counts it.
    """
    import dataclasses
    from collections import Counter

    from jb_client.documents import SkippedRecord
    from jb_client.swebench_coverage import coverage

    from jouled.contracts.swebench_records import load_predictions, load_records
    from jouled.errors import BrokenEnvironmentError, PatchError, TaskError

    run_id = run_id or os.urandom(6).hex()
    receipts: list[Receipt] = []
    empty: list[str] = []
    malformed: list[dict[str, str]] = []
    declined: list[SkippedRecord] = []  # refused at submission

    def skip(instance_id: str, reason: str) -> None:
        malformed.append({"instance_id": instance_id, "reason": reason})
        shown = f"{instance_id}: {reason}" if instance_id else reason
        render.err.print(render.marked("[yellow]malformed prediction skipped:[/] {}", shown))

    try:
        records = load_records(dataset)
        refused: list[TaskError] = []
        preds = load_predictions(predictions, refused)
        for err in refused:
            skip("", err.message)  # names the file and line
        wanted = [r for r in records if r.instance_id in preds]
        missing = sorted(set(preds) - {r.instance_id for r in records})
        if missing:
            render.err.print(
                render.marked(
                    "[yellow]warning:[/] {}",
                    f"{len(missing)} predictions name instances "
                    f"not in {dataset}: {', '.join(missing[:5])}",
                )
            )
        with connect() as c:
            reg = c.register_swebench([dataclasses.asdict(r) for r in wanted], suite)
            for s in reg.skipped:
                render.err.print(
                    render.marked("[yellow]skipped[/] {}: {}", s.instance_id, s.reason)
                )
            for n, task_id in enumerate(reg.registered, 1):
                pred = preds[task_id.split("/", 1)[1]]
                render.err.print(f"[{n}/{len(reg.registered)}] {task_id}", highlight=False)
                try:
                    if pred.to_patch() is None:
                        # Graded all the same: the daemon signs it unresolved, as the
                        # official harness counts it.
                        empty.append(task_id)
                    r = c.submit(
                        task_id,
                        (pred.model_patch or "").encode("utf-8", errors="surrogateescape"),
                        solver=pred.model_name_or_path,
                        model=pred.model_name_or_path,
                        run_id=run_id,
                        idempotency_key=f"{run_id}:{task_id}",
                    )
                except PatchError as err:
                    skip(pred.instance_id, err.message)
                    continue
                except JouledError as err:
                    if err.code == BrokenEnvironmentError.code:
                        # Nothing signed: the environment, not the patch, failed its baseline.
                        declined.append(
                            SkippedRecord(
                                instance_id=pred.instance_id, code=err.code, reason=err.message
                            )
                        )
                        render.err.print(
                            render.marked(
                                "[yellow]not graded[/] {}: {}", pred.instance_id, err.code
                            )
                        )
                        continue
                    if err.kind != Kind.INVALID_ARGUMENT:
                        raise
                    skip(pred.instance_id, err.message)  # the daemon refused this one alone
                    continue
                receipts.append(r)
                if not as_json:
                    render.receipt_line(r)
    except JouledError as err:
        fail(err)
    resolved = sum(r.resolved for r in receipts)
    total = len(receipts)
    instances = coverage(preds, records, [*reg.skipped, *declined], malformed, receipts)
    not_graded = [i for i in instances if not i.graded]
    summary = {
        "run_id": run_id,
        "resolved": resolved,
        "submitted": len(receipts),
        "empty_patch": empty,
        "malformed": malformed,
        "skipped": [s.to_dict() for s in reg.skipped],
        "total": total,
        # Every prediction, graded or not: the denominator that leaves nothing out.
        "predictions": len(instances),
        "not_graded": len(not_graded),
        "not_graded_by_reason": dict(Counter(i.code for i in not_graded)),
        "instances": [i.to_dict() for i in instances],
        "receipts": [r.to_dict() for r in receipts],
    }
    if as_json:
        emit(summary)
    else:
        render.swebench_coverage(instances)
        by_reason = Counter(i.code for i in not_graded).most_common()
        reasons = ", ".join(f"{n} {code}" for code, n in by_reason)
        render.out.print(
            f"resolved {resolved}/{len(instances)} predictions (run {run_id}); "
            f"{total} graded, {len(not_graded)} not graded"
            + (f" ({reasons}), counted unresolved" if not_graded else "")
            + f"; {len(empty)} empty patches"
        )
