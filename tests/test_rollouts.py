"""NextRollout over a real ledger: above what is signed and what is in flight, and it holds
only what is in flight."""

from __future__ import annotations

from pathlib import Path

import pytest

from jouled import limits
from jouled.errors import UsageError
from jouled.rollouts import NextRollout
from tests.client.ledger import result
from tests.ledger.test_store import open_ledger


def test_indices_go_above_the_ledger_and_the_attempts_in_flight(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    for n in (0, 3):
        ledger.append("result", result(n, "s/a", "resolved", solver="me", rollout=n)["body"])
    rollouts = NextRollout(ledger)
    first, give_first = rollouts.take("s/a", "me", "r1", "m1")
    second, give_second = rollouts.take("s/a", "me", "r1", "m1")
    assert (first, second) == (4, 5)  # above the signed 3, and above the one in flight
    assert rollouts.take("s/a", "me", "other-run")[0] == 0
    give_first()
    give_second()
    rollouts.take("s/a", "you", "r1")[1]()
    assert rollouts.held() == 1  # only the other run's, whose attempt never ended
    # Refused and never signed: its index is free again, not a gap.
    assert rollouts.take("s/a", "me", "r1", "m1")[0] == 4


def test_invented_run_ids_hold_nothing_once_their_attempts_end(tmp_path: Path) -> None:
    rollouts = NextRollout(open_ledger(tmp_path))
    for n in range(1000):
        rollouts.take("s/a", "me", f"run-{n}")[1]()
    assert rollouts.held() == 0


def test_past_the_bound_the_next_index_is_refused(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    body = result(0, "s/a", "resolved", solver="me", rollout=limits.ROLLOUT_MAX)["body"]
    ledger.append("result", body)
    with pytest.raises(UsageError, match="has used rollout 10,000, the last index") as caught:
        NextRollout(ledger).take("s/a", "me", "r1", "m1")
    assert "--run-id" in caught.value.hint


def test_each_model_of_a_solver_numbers_its_own_rollouts(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.append("result", result(0, "s/a", "resolved", solver="me", model="m1")["body"])
    rollouts = NextRollout(ledger)
    assert rollouts.take("s/a", "me", "r1", "m1")[0] == 1
    assert rollouts.take("s/a", "me", "r1", "m2")[0] == 0  # best-of-k's k=1 sees it
