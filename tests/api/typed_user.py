"""A user's script against `jb_client`, as the README shows it: mypy checks it with the
rest of tests/ (`make lint`), and test_typed_api.py runs it against a daemon.

`assert_type` pins what each call returns, so a change that widens an answer back
to a dict, or energy back to integers, fails the type check.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import assert_type

from jb_client import Client, ClientError
from jb_client.documents import (
    BestOfK,
    Checkpoint,
    Energy,
    Frontier,
    FrontierRow,
    MeterStatus,
    PublicKeys,
    Receipt,
    Status,
    TaskInfo,
)


def main(target: str, workdir: Path, patch: Path) -> None:
    with Client(target) as client:
        tasks = client.tasks("smoke")
        assert_type(tasks, list[TaskInfo])
        task = client.task("smoke/lrucache")
        assert_type(task, TaskInfo)
        assert task.task_id in {t.task_id for t in tasks} and task.prompt

        written = client.fetch("smoke/lrucache", str(workdir / "work"))  # a str path
        assert_type(written, list[str])
        assert (workdir / "work" / written[0]).is_file()

        receipt = client.submit(
            "smoke/lrucache",
            patch.read_bytes(),
            solver="typed-user",
            model="none",
            claimed={"usd_micros": 1200, "tokens_in": 300},
        )
        assert_type(receipt, Receipt)
        assert receipt.status is Status.RESOLVED and receipt.resolved
        grade = receipt.joules["grade"]
        assert_type(grade, Energy)
        assert_type(grade.gross_j, float | None)
        assert grade.gross_j is not None and grade.gross_j >= 0
        assert grade.wall_s is not None and grade.wall_s > 0
        raw = receipt.to_dict()
        assert raw["energy"]["grade"]["gross_mj"] / 1000 == grade.gross_j

        frontier = client.frontier("smoke")
        assert_type(frontier, Frontier)
        row = next(r for r in frontier.rows if r.solver == "typed-user")
        assert_type(row, FrontierRow)
        assert_type(row.joules_total, float)
        assert row.usd_total == 0.0012 and row.resolved == row.attempts

        assert_type(client.best_of_k("smoke"), BestOfK)
        assert_type(client.checkpoint(), Checkpoint)
        assert_type(client.meter(), MeterStatus)
        assert_type(client.public_keys(), PublicKeys)

        try:
            client.submit("smoke/lrucache", b"", claimed={"usd": 1})
        except ClientError as err:
            assert err.kind == "invalid_argument" and "usd_micros" in err.hint
        else:
            raise AssertionError("a claim named 'usd' was sent")
        try:
            client.task("smoke/no-such-task")
        except ClientError as err:
            assert err.kind == "not_found" and err.hint, (err.kind, err.hint)
        else:
            raise AssertionError("an unknown task was found")
    print("ok", receipt.seq, f"{grade.gross_j:.3f} J")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
