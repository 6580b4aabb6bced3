"""More in-process forgers: routes past the integrity monitor beyond `test_attack_forgery`.

Same shape as there: each route keeps the bug, appends a payload to the
library the tests import, proves it ran (`ran`) and that its forgery step
took (`forge`, `flips`), and must come out `tampered`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import attacks as A
from .test_attack_forgery import TASKS, Case, Run, serve_cases

# A failing test made to end in an exception whose class is named "" (the monitor's
# observer reports how the test ended by the class's name: "" reads as "returned"),
# and its call report flipped to passed by an object put in the item's stash under
# pytest's xfail key: pytest's skipping wrapper asks that object for its truth after
# the report is made, and the object rewrites the report (an instance attribute) then.
FORGE_XFAIL_STASH = r"""
import builtins
from _pytest.skipping import xfailed_key

Real = builtins.AssertionError
Nameless = type("", (Real,), {"__module__": "builtins"})
builtins.AssertionError = Nameless  # what pytest's rewritten asserts raise

class Flipper:
    def __bool__(self):
        rep = sys._getframe(1).f_locals.get("rep")
        if rep is not None:
            flip(rep)
        return False

def arm_item():
    item = find_local("item", lambda v: hasattr(v, "stash") and hasattr(v, "nodeid"))
    if item is not None and visible(item.nodeid):
        item.stash[xfailed_key] = Flipper()

library = sys._getframe(2).f_globals
def arm(cls):
    init = cls.__init__
    def __init__(self, *args, **kwargs):
        arm_item()
        init(self, *args, **kwargs)
    cls.__init__ = __init__
armed = []
for value in list(library.values()):
    if isinstance(value, type) and value.__module__.startswith(library["__name__"]):
        arm(value)
        armed.append(value.__name__)
emit("forge", "OK", ",".join(armed))
"""

# The same, blind to which tests were given: every failure in a test module that uses the
# library is flipped. The canaries never import the code under test, so they fail as
# planted; the run's arguments also name them (pytest's invocation arguments hold the
# canary files, `sys.argv` does not), which the payload reports as `canaries-seen`.
FORGE_XFAIL_STASH_ALL = (
    FORGE_XFAIL_STASH.replace(
        "    if item is not None and visible(item.nodeid):",
        "    if item is not None and uses_library(item):",
    )
    .replace(
        "            flip(rep)",
        "            flip_any(rep)",
    )
    .replace(
        "library = sys._getframe(2).f_globals\n",
        r"""library = sys._getframe(2).f_globals

def uses_library(item):
    name = library["__name__"].split(".")[0]
    for value in list(vars(item.module).values()):
        owner = str(getattr(value, "__module__", ""))
        if getattr(value, "__name__", "") == name or owner.startswith(name):
            return True
    return False

def flip_any(report):
    if report.when == "call" and report.outcome != "passed":
        report.outcome, report.longrepr = "passed", None
        flips.append(report.nodeid)

def canaries_seen():
    config = find_config()
    given = set(sys.argv[1:])
    named = config.invocation_params.args
    return ",".join(a for a in named if a not in given and a.endswith(".py"))

_seen_once = []
""",
    )
    .replace(
        "        arm_item()\n",
        "        if not _seen_once:\n"
        "            _seen_once.append(1)\n"
        '            attempt("canaries-seen", canaries_seen)\n'
        "        arm_item()\n",
    )
)

FORGERS = {
    "xfail-stash-nameless": FORGE_XFAIL_STASH,
    "xfail-stash-blind": FORGE_XFAIL_STASH_ALL,
}
CASES: dict[str, Case] = {
    f"{name}-{kind}": Case(body, task)
    for name, body in FORGERS.items()
    for kind, task in TASKS.items()
}


@pytest.fixture(scope="module")
def forgeries(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Run]:
    with serve_cases(tmp_path_factory, request, "attack-forgery-more", CASES, {}) as run:
        yield run


@pytest.mark.parametrize("name", list(CASES))
def test_a_further_in_process_forgery_is_tampered(forgeries: Run, name: str) -> None:
    out = forgeries.futures[name].result(timeout=600)
    assert out.receipt is not None, out.why()
    found = out.found
    assert "ran" in found, f"the payload did not run (no marker)\n{out.why()}"
    assert "crash" not in found, f"the payload crashed: {found['crash']}\n{out.why()}"
    forge = found.get("forge", "")
    assert forge.startswith(("OK", "denied:Refused")), f"no forgery step ran\n{out.why()}"
    if forge.startswith("OK"):
        assert int(A.detail(found.get("flips", "info:0")) or 0) > 0, out.why()
    assert out.status == "tampered", f"the forgery is {out.status}\n{out.why()}"
