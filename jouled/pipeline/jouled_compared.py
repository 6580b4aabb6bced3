"""Comparisons the patch's code decides for a test, for the integrity monitor.

The sixth of the monitor's files (`jouled_monitor.py` says how they run). While a test
runs, the trace (`jouled_traced.py`) watches every call a frame of the suite's own, or
a framework's assertion, makes. Where the caller is at an equality or membership test
(`==`, `in`) and what decides it is the patch's (a function of a file the patch changed,
or held by a class of one), the comparison decided the check, not the code under test,
if it holds whatever it is given: it is asked again before it runs, of the value it was
given, of a new object and, for an equality, of another value of the given value's
builtin type, salted anew each time (`probe`). An equality or membership that holds for
a probe, or answers the test otherwise than when asked again, is tampering. Orders are
not asked (an `Infinity` is greater than anything), nor is membership of another value
(a set of every integer holds it).
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_failures import _MISSING
    from jouled.pipeline.jouled_origins import (
        _FUNC_CODE,
        _TYPE_DICT,
        _TYPE_MRO,
        _TYPE_QUALNAME,
        Origins,
        _FunctionType,
    )

_opcodes = __import__("opcode").opmap
# The methods an equality or membership test calls, where the patch's code may decide it.
# A callable object put in a class's place of one is asked as an equality.
_SLOTS = ("__eq__", "__call__", "__contains__")


def probe(frame: Any, origins: "Origins") -> Any:
    """(what the trace keeps of it, the probe the tracer runs) where the call `frame` is an
    equality or membership test (its caller is at one) that code of the patch's decides;
    None otherwise. The probe asks it again, of the value it was given and of others
    (`_unlike`), and runs in the tracer, outside the hook: the patch's code runs watched.
    It is asked as it was reached: the function the compared value's class holds;
    through the comparison itself, where the class holds something else (a
    `partialmethod`); the patch's function itself, where no class holds it (a
    `staticmethod`)."""
    caller = frame.f_back
    op = _comparison(caller) if caller is not None else ""
    if not op:
        return None
    code = frame.f_code
    values, names, count = frame.f_locals, code.co_varnames, code.co_argcount
    given = [values.get(name, _MISSING) for name in names[:count]]
    if code.co_flags & 0x04:  # *args
        rest = values.get(names[count + code.co_kwonlyargcount], ())
        given += list(rest[:2]) if type(rest) is tuple else []
    if not given:
        return None
    found = _slot(given[0], code) if len(given) > 1 else None
    if op == "!=" and (found is None or found[0] != "__eq__"):
        return None  # (an equality a `!=` asks: a dict's values, `object.__ne__`)
    second = given[1] if len(given) > 1 else _MISSING
    if found is not None:  # (the patch's: its code, or the class that holds it)
        name, function, holder = found
        patch = origins.code_from_tree(code) or origins.class_from_tree(holder)
        call = _calling(function, given[0])
        what = getattr(function, "__qualname__", name)
    else:
        name = "__contains__" if op == "in" else "__eq__"
        holder = _holder(given[0], name) if len(given) > 1 else None
        patch = origins.class_from_tree(holder) if holder is not None else ""
        call = _operator(op, given[0]) if patch else None
        what = f"{_TYPE_QUALNAME(holder)}.{name}" if patch else ""
        if not patch and not _method_of(given[0], code):  # (a `__hash__` is one)
            patch = origins.code_from_tree(code)
            call = _rebuilt(frame, code, values, given)
            what, second = code.co_name, given[0]
    if not patch or call is None:
        return None
    probes = [object(), *(_unlike(second) if op != "in" else [])]

    def ask() -> "list[bool]":
        answers = []
        for value in [second, *probes]:
            try:
                got = call(value)
                answers.append(got is not NotImplemented and bool(got))
            except BaseException:
                answers.append(False)
        return answers

    return [frame, op, what, patch], ask


def _slot(value: Any, code: Any) -> Any:
    """(name, function, the class that holds it) of the comparison method of `value`'s
    class whose code is `code` (read from the classes' own namespaces: no code of the
    value's runs); None if none."""
    for klass in _TYPE_MRO(type(value))[:64]:
        namespace = _TYPE_DICT(klass)
        for name in _SLOTS:
            member = namespace.get(name)
            if type(member) is _FunctionType and _FUNC_CODE(member) is code:
                return name, member, klass
    return None


def _comparison(frame: Any) -> str:
    """ "==" or "in" where `frame` is at an equality or membership test, else ""."""
    code = frame.f_code.co_code
    at = frame.f_lasti
    if not 0 <= at < len(code) - 1:
        return ""
    op, arg = code[at], code[at + 1]
    if op == _CONTAINS_OP:
        return "in" if arg == 0 else ""
    if op != _COMPARE_OP:
        return ""
    index = arg >> 5 if sys.version_info >= (3, 13) else arg >> 4 if _SHIFTED else arg
    if index in (2, 3):
        return "==" if index == 2 else "!="
    return "in" if index == 6 and _OLD_IN else ""


_COMPARE_OP = _opcodes.get("COMPARE_OP", -1)
_CONTAINS_OP = _opcodes.get("CONTAINS_OP", -1)
_SHIFTED = sys.version_info >= (3, 12)  # COMPARE_OP's argument is shifted from 3.12
_OLD_IN = _CONTAINS_OP == -1  # before 3.9, `in` is a COMPARE_OP


def _calling(function: Any, first: Any) -> Any:
    return lambda value: function(first, value)


def _operator(op: str, first: Any) -> Any:
    if op == "in":
        return lambda value: value in first
    return lambda value: first == value


def _holder(value: Any, name: str) -> Any:
    """The class on `value`'s MRO whose own namespace holds `name`, where what it holds
    is no plain function (a descriptor: `partialmethod`); None otherwise."""
    for klass in _TYPE_MRO(type(value))[:64]:
        member = _TYPE_DICT(klass).get(name)
        if member is not None:
            return None if type(member) is _FunctionType else klass
    return None


def _method_of(value: Any, code: Any) -> bool:
    """Whether a class on `value`'s MRO holds a function of `code` (under any name)."""
    for klass in _TYPE_MRO(type(value))[:64]:
        for member in _TYPE_DICT(klass).values():
            if type(member) is _FunctionType and _FUNC_CODE(member) is code:
                return True
    return False


def _rebuilt(frame: Any, code: Any, values: Any, given: "list[Any]") -> Any:
    """The patch's function a comparison called, made again from its code (no class
    holds it: a `staticmethod`, handed the compared value alone), to be called as it was
    but for that value."""
    cells = [_CELL(values.get(name)) for name in code.co_freevars]
    try:
        function = _FunctionType(code, frame.f_globals, code.co_name, None, tuple(cells) or None)
    except (TypeError, ValueError):
        return None
    start = code.co_argcount
    kwonly = code.co_varnames[start : start + code.co_kwonlyargcount]
    named = {name: values[name] for name in kwonly if name in values}
    rest = given[1:]
    return lambda value: function(value, *rest, **named)


_CELL = getattr(__import__("types"), "CellType", None) or (lambda v: (lambda: v).__closure__[0])


def _unlike(value: Any) -> "list[Any]":
    """A value of `value`'s own builtin type that differs from it (none for other types),
    salted anew each time."""
    kind = type(value)
    salt = int.from_bytes(os.urandom(3), "big") + 1
    if kind is bool:
        return [not value]
    if kind is int:
        return [value ^ salt]
    if kind in (float, complex):
        return [v for v in (value + salt, -value - salt - 0.5) if v != value][:1]
    if kind is str:
        return [value + chr(0x4E00 + salt % 20000)]
    if kind is bytes:
        return [value + salt.to_bytes(3, "big")]
    if kind in (tuple, list, set, frozenset):
        return [kind([*value, object()])]
    if kind is dict:
        other = dict(value)
        other[object()] = None
        return [other]
    return []


def holds_anyway(entry: Any, answers: "list[Any]") -> str:
    """Why a comparison of the patch's holds whatever it is given: a probe it was asked
    (a new object, another value of the type it was given) it said holds too."""
    for index, held in enumerate(answers[1:]):
        if held is True:
            probe = "a new object" if index == 0 else "another value of the type it was given"
            return (
                f"a comparison of the test's was decided by {entry[2]} of {entry[3]}, which holds "
                f"for {probe} too"
            )
    return ""
