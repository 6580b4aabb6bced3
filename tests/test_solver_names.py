"""Which solver name a caller's results carry (`Identity.solver_for`)."""

from __future__ import annotations

import pytest

from jouled.auth import AGENT, OPERATOR, Identity
from jouled.errors import DeniedError, UsageError


def agent(name: str, prefix: str | None) -> Identity:
    return Identity(name, frozenset({AGENT}), "token", prefix)


def test_a_prefixed_credential_asked_for_no_name_is_told_to_give_one() -> None:
    alice = agent("alice", "alice/")
    with pytest.raises(UsageError) as err:
        alice.solver_for("")  # signing the bare prefix "alice/" would name no solver
    assert "alice/" in err.value.message and "alice/<something>" in err.value.hint
    assert alice.solver_for("alice/v1") == "alice/v1"
    with pytest.raises(DeniedError):
        alice.solver_for("bob/v1")


def test_a_prefixed_credential_whose_name_fits_signs_its_name_by_default() -> None:
    assert agent("team/bot", "team/").solver_for("") == "team/bot"


def test_an_unprefixed_credential_signs_its_own_name_and_an_operator_any() -> None:
    assert agent("carol", None).solver_for("") == "carol"
    with pytest.raises(DeniedError):
        agent("carol", None).solver_for("someone-else")
    operator = Identity("ops", frozenset({OPERATOR}), "token")
    assert operator.solver_for("") == "ops" and operator.solver_for("any/name") == "any/name"
