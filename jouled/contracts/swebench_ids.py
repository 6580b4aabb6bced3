"""Test ids as the SWE-bench dataset spells them, and matching observed ids to them.

The official log parsers read pytest's `-rA` lines word by word, so the ids
the dataset records in FAIL_TO_PASS and PASS_TO_PASS are not always pytest's
node ids: `dataset_id_forms` gives the spellings a node id may have there, and
`match_dataset_ids` keys a run's outcomes so that the dataset's ids find their
tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from jouled.documents import SEVERITY, Outcome

__all__ = ["dataset_id_forms", "match_dataset_ids"]

# Mouse buttons print as enum members in some matplotlib parameter ids; the
# dataset records their numeric values.
_MOUSE_BUTTONS = (("MouseButton.LEFT", "1"), ("MouseButton.RIGHT", "3"))
_PARAMETRIZED = re.compile(r"(.*?)\[(.*)\]\Z", re.DOTALL)


def _severity(outcome: str) -> int:
    known = outcome in Outcome.__members__.values()
    return SEVERITY[Outcome(outcome)] if known else SEVERITY[Outcome.ERROR]


def _first_word(text: str) -> str:
    words = text.split()
    return words[0] if words else text


def _short_path_parameter(test_id: str) -> str:
    """A parameter that is an absolute path, cut to its last component."""
    match = _PARAMETRIZED.match(test_id)
    if match is None:
        return test_id
    name, param = match.groups()
    if param.startswith("/") and not param.startswith("//") and "*" not in param:
        param = "/" + param.rsplit("/", 1)[-1]
    return f"{name}[{param}]"


def dataset_id_forms(node_id: str) -> tuple[str, ...]:
    """The spellings the official log parsers may have given a pytest node id.

    They read `-rA` lines word by word, so an id is cut at its first
    whitespace; some repositories' parsers also shorten absolute-path parameters
    to their last component, and matplotlib's spells mouse buttons as numbers.
    The node id itself comes first.
    """
    buttons = node_id
    for enum, number in _MOUSE_BUTTONS:
        buttons = buttons.replace(enum, number)
    forms = [node_id, _first_word(node_id)]
    forms.append(_short_path_parameter(forms[-1]))
    forms.append(_first_word(buttons))
    return tuple(dict.fromkeys(forms))


def match_dataset_ids(outcomes: Mapping[str, str], expected: Iterable[str]) -> dict[str, str]:
    """Outcomes keyed so that expected ids spelled the dataset's way find their tests.

    Every observed id stays. An expected id that did not run under its own
    name gets the outcome of the observed ids that the dataset would have
    recorded under it (the worst of them, when several collapse onto one).
    """
    matched = dict(outcomes)
    wanted = {t for t in expected if t not in outcomes}
    if not wanted:
        return matched
    for node_id, outcome in outcomes.items():
        for form in dataset_id_forms(node_id)[1:]:
            if form not in wanted:
                continue
            previous = matched.get(form)
            if previous is None or _severity(outcome) > _severity(previous):
                matched[form] = outcome
    return matched
