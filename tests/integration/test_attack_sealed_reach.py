"""More ways to reach a sealed hidden test's text, against a real daemon.

As in test_attack_sealed.py, each patch keeps the bug of `sealedcalc` and tries to learn
`double(21) == 42` from the hidden test file while it is graded; none may be `resolved`.
These go for the text where it is held or handed out rather than for the file:

- `globals`, `fspath`: the monitor's namespace, through `open.__globals__` (the runner's
  `open` is the monitor's) or a path-like object whose `__fspath__` reads its caller
  frame's globals. Every value reachable from it (dicts, lists, sets, functions'
  closures) is searched: the text lives only in the audit hook's closure, none of it.
- `rewrite`: pytest's `rewrite_asserts`, swapped as the library is first imported (before
  the hidden file is collected), handed the text and put back at once.
- `pathstr`: `pathlib.PurePath.__str__`, swapped likewise: pytest calls `str(fn)` right
  after its read and the swap reads `source` from pytest's frame.
- `reload`, `execfresh`: the approved read set off again after collection, from a
  `weakref.finalize` made of C callables (no frame of the patch's on the stack): the
  hidden module reloaded, or a fresh module run by its loader, with `pathstr`'s swap.

Each payload says what it did as the run ends (`JBSEALED <route> ...`, printed at exit
since pytest keeps what is printed while it collects).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from . import attacks as A
from .test_attack_grading import Build, Outcome
from .test_attack_sealed import BUGGY, CALC, HIDDEN, graded_on_calc

HIDDEN_BASE = HIDDEN

COMMON = """
import os
import re
import sys

_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
_TABLE = {}
_HIDDEN = __HIDDEN__


def _say(*words):
    print("JBSEALED", __ROUTE__, *words, flush=True)


def _from_text(text):
    for x, want in re.findall(r"double\\((\\d+)\\) == (\\d+)", text):
        _TABLE[int(x)] = int(want)
        _say("learned", x, want)


def _from_consts(consts, x):
    ints = [c for c in consts if type(c) is int and c not in (0, 1, x)]
    _say("consts", repr([c for c in consts if type(c) in (int, str)][:12]))
    if x in consts and ints:
        _TABLE[x] = ints[0]
        _say("learned", x, ints[0])


_buggy = double
_tried = set()


def _search(namespace):
    # Every value reachable from `namespace` (containers, classes, functions' closures):
    # the sealed text, wherever it is held.
    seen, todo, found = set(), list(namespace.values()), []
    while todo and len(seen) < 200000:
        value = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        kind = type(value)
        if kind in (bytes, str):
            text = value.decode("latin-1") if kind is bytes else value
            if "def test_twenty_one" in text:
                found.append(text)
        elif kind is dict:
            todo.extend(value.keys())
            todo.extend(value.values())
        elif kind in (list, tuple, set, frozenset):
            todo.extend(value)
        elif kind is type:
            todo.extend(vars(value).values())
        elif kind is type(_search):
            for cell in value.__closure__ or ():
                try:
                    todo.append(cell.cell_contents)
                except ValueError:
                    pass
    _say("searched", len(seen), "found", len(found))
    return found


import atexit

atexit.register(lambda: _say("exit", "learned" if _TABLE else "nothing"))


def double(x):
    if x not in _TABLE and x not in _tried:
        _tried.add(x)
        try:
            _learn(x)
        except BaseException as err:
            _say("crash", type(err).__name__, str(err)[:300].replace("\\n", " "))
    return _TABLE.get(x, _buggy(x))
"""

ROUTES: dict[str, str] = {}


def _find_hidden() -> str:
    return """
def _hidden_module():
    for name, module in list(sys.modules.items()):
        if os.path.basename(str(getattr(module, "__file__", "") or "")) == _HIDDEN:
            return module
    return None
"""


ROUTES["globals"] = """
def _learn(x):
    for text in _search(open.__globals__):
        _from_text(text)
"""

ROUTES["fspath"] = """
class _Path:
    got = None

    def __fspath__(self):
        if _Path.got is None:
            _Path.got = sys._getframe(1).f_globals
        return os.devnull


def _learn(x):
    with open(_Path()) as fh:
        fh.read()
    for text in _search(_Path.got or {}):
        _from_text(text)
"""

# What a swap saw: said as the run ends, learned from as the library is called.
FROM_SEEN = """
atexit.register(lambda: _say("seen", len(_SEEN)))


def _learn(x):
    _say("seen", len(_SEEN))
    for text in _SEEN:
        _say(_HIDDEN, "read", len(text))
        _from_text(text)
"""

ROUTES["rewrite"] = (
    """
import _pytest.assertion.rewrite as _rw

_SEEN = []
_real_rewrite = _rw.rewrite_asserts


def _spy(mod, source, module_path=None, config=None):
    if b"def test_" in bytes(source) and _HIDDEN in str(module_path):
        _SEEN.append(bytes(source).decode())
        _rw.rewrite_asserts = _real_rewrite  # put back at once
    return _real_rewrite(mod, source, module_path, config)


_rw.rewrite_asserts = _spy
"""
    + FROM_SEEN
)

# A swap for `pathlib.PurePath.__str__`: pytest calls `str(fn)` right after its read of a
# test module, and the swap reads `source` from pytest's frame (only once a C-level
# `warnings.warn(stacklevel=2)` says the caller is pytest's rewrite.py).
PATH_SPY = (
    """
import pathlib
import warnings

_SEEN = []
_real_str = pathlib.PurePath.__str__


def _str(self):
    text = _real_str(self)
    if text.endswith(_HIDDEN) and not _SEEN:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.warn("where", stacklevel=2)
        where = caught[0].filename if caught else ""
        if where.endswith("rewrite.py"):
            source = sys._getframe(1).f_locals.get("source")
            if type(source) is bytes:
                _SEEN.append(source.decode())
    return text
"""
    + FROM_SEEN
)

ROUTES["pathstr"] = PATH_SPY + "\npathlib.PurePath.__str__ = _str\n"

# `importlib.reload` of the hidden module, run where none of the patch's frames is on the
# stack: the first `double` call (from the visible test_basic, after every module was
# collected) returns an int carrying an object with a `weakref.finalize` whose callback is
# C callables only (`functools.partial(list, map(importlib.reload, [module]))`); the test
# frame drops the int (pytest's rewriting clears its temporaries), the finalizer fires
# with only the test's and pytest's frames above it, and the reload goes through pytest's
# rewriting hook (`exec_module` -> `_rewrite_test`), the read the seal lets through; a
# swapped `pathlib.PurePath.__str__` (as in `pathstr`, installed only then) sees the text.
ROUTES["reload"] = (
    _find_hidden()
    + PATH_SPY
    + """
import functools
import importlib
import weakref


class _Token:
    pass


class _Carrier(int):
    pass


_first = []
_common_double = double


def double(x):
    if not _first:
        _first.append(x)
        module = _hidden_module()
        _say("module", getattr(module, "__name__", None))
        if module is not None:
            pathlib.PurePath.__str__ = _str
            carrier = _Carrier(_buggy(x))
            carrier.token = _Token()
            weakref.finalize(
                carrier.token, functools.partial(list, map(importlib.reload, [module]))
            )
            return carrier
    return _common_double(x)
"""
)

# As `reload`, but no module is rebound: a fresh module made from the hidden module's spec
# and run by the spec's loader (pytest's rewriting hook: `exec_module` -> `_rewrite_test`,
# the read the seal lets through), fired by C callables as the visible test drops the int.
ROUTES["execfresh"] = (
    ROUTES["reload"]
    .replace(
        "functools.partial(list, map(importlib.reload, [module]))",
        "functools.partial(module.__spec__.loader.exec_module, "
        "importlib.util.module_from_spec(module.__spec__))",
    )
    .replace("import importlib\n", "import importlib\nimport importlib.util\n")
)


def build(route: str, tasks: Path, token: str) -> bytes:
    info, buggy = CALC, BUGGY
    tail = COMMON.replace("__ROUTE__", repr(route)).replace("__HIDDEN__", repr(HIDDEN_BASE))
    source = buggy + tail + ROUTES[route]
    return A.build_patch(info.dir(tasks), files={info.module: source})


@pytest.fixture(scope="module")
def graded(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Outcome]]:
    routes: dict[str, tuple[str, Build]] = {
        route: (CALC.task_id, partial(build, route)) for route in ROUTES
    }
    yield from graded_on_calc(tmp_path_factory, request, "sealed-reach", routes)


def said(output: str, route: str) -> list[str]:
    return re.findall(rf"^JBSEALED {route} (.*)$", output, re.MULTILINE)


# How each route must come out: a swap of what reads the text is found (`tampered`); the
# namespace holds nothing, so its searches learn nothing and the bug fails the test.
STATUSES = {
    "globals": "unresolved",
    "fspath": "unresolved",
    "rewrite": "tampered",
    "pathstr": "tampered",
    "reload": "tampered",
    "execfresh": "tampered",
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_text_is_reached_nowhere(graded: dict[str, Outcome], route: str) -> None:
    out = graded[route]
    lines = said(out.output, route)
    # The library ran, and learned nothing (but where the run was already found tampered).
    assert "exit nothing" in lines or route == "rewrite", out.why()
    if route in ("globals", "fspath"):
        searched = [line.split() for line in lines if line.startswith("searched")]
        assert searched and int(searched[0][1]) > 100, out.why()  # it looked everywhere
        assert searched[0][3] == "0", out.why()
    elif route == "rewrite":  # pytest's own code changed: found as the text is handed out,
        assert any(line.startswith("seen") for line in lines), out.why()  # (the run tampered)
    else:
        assert "seen 0" in lines, out.why()  # its swap was in place, and saw nothing
    assert out.status == STATUSES[route], out.why()
