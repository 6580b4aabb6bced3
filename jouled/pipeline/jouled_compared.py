"""Comparisons the patch's code decides for a test, for the integrity monitor.

The sixth of the monitor's files (`jouled_monitor.py` says how they run). While a test
runs, the trace (`jouled_traced.py`) watches every call a frame of the suite's own, or
a framework's assertion, makes; what such a call of the library's returns is asked
too (`returned`). Where the caller is at an equality or membership test
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
    from jouled.pipeline.jouled_failures import _MISSING, _TYPE_FLAGS
    from jouled.pipeline.jouled_origins import (
        _FUNC_CODE,
        _METHOD_FUNC,
        _MODULE_DICT,
        _TYPE_DICT,
        _TYPE_MRO,
        _TYPE_QUALNAME,
        Origins,
        _FunctionType,
        _MethodType,
        _Partial,
    )

_opcodes = __import__("opcode").opmap
# The methods an equality or membership test calls, where the patch's code may decide it.
# A callable object put in a class's place of one is asked as an equality.
_SLOTS = ("__eq__", "__call__", "__contains__")


def probe(frame: Any, origins: "Origins") -> Any:
    """The questions (each: a call, what it expects, why if not: `judged`) for the call
    `frame`, where it is an equality or membership test (its caller is at one) that code
    of the patch's decides; None otherwise. They ask it again, twice, of the value it was
    given, and of new objects and other values (`_unlike`), all in an order the patch
    cannot foretell (what tells the test's value from the others at its first sight, by
    order, is found at least three times in four), in the tracer, outside the hook: the
    patch's code runs watched.
    It is asked as it was reached: the function the compared value's class holds, or
    through the comparison itself, where the class holds something else (a
    `partialmethod`). (A `staticmethod` in its place is found by `foreign_slots`: what
    a comparison called with the other value alone cannot be told from a callback the
    interpreter ran meanwhile, a weak reference's or a signal's.)"""
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
        what = _text(getattr(function, "__qualname__", name))
    else:
        name = "__contains__" if op == "in" else "__eq__"
        holder = _holder(given[0], name) if len(given) > 1 else None
        patch = origins.class_from_tree(holder) if holder is not None else ""
        call = _operator(op, given[0]) if patch else None
        what = f"{_text(_TYPE_QUALNAME(holder))}.{name}" if patch else ""
    if not patch or call is None:
        return None
    where = f"a comparison of the test's was decided by {what} of {patch}, which holds for"
    again = (lambda: call(second), "given", f"{what} of {patch}")
    questions: list[Any] = [again, again]  # the same twice: a stateful answer tells itself
    unlike = _ASKED - 3 if op != "in" and type(second) in _UNLIKE_KINDS else 0
    for _ in range(_ASKED - 2 - unlike):
        questions.append((lambda: call(object()), False, f"{where} a new object too"))
    for _ in range(unlike):
        question = f"{where} another value of the type it was given too"
        questions.append((_unlike_asked(call, second), False, question))
    return questions


# Questions asked of a comparison: the test's value twice among them, an order-based
# answer (the first value it sees, the third) takes a probe for it at least three times
# in four.
_ASKED = 8


def returned(value: Any, origins: "Origins") -> Any:
    """The questions for a value a call of the library's (or of the standard library's,
    or a framework's) returned to the test, where its class has an equality or
    membership of its own (what a comparison of the test's runs, in Python or not:
    `int.__ne__` in `__eq__`'s place, a generator function, `mock.ANY`'s): equal to a new
    object, or, for a subclass of a number or a string, equal to another value than its
    own, it decides the test's checks whatever they ask. None where there is nothing to
    ask."""
    kind = type(value)
    if kind in _BUILTIN_VALUES:
        return None
    equality, member = _definer(kind, "__eq__"), _definer(kind, "__contains__")
    if equality is None and member is None:
        return None
    made = origins.class_from_tree(kind) or _text(_TYPE_DICT(kind).get("__module__"))
    what = f"a {_text(_TYPE_QUALNAME(kind))} of {made}, returned to the test,"
    questions = []
    if equality is not None:
        questions.append((lambda: value == object(), False, f"{what} is equal to a new object"))
        base = next((k for k in _TYPE_MRO(kind) if k in _SCALARS), None)
        plain = _SCALARS[base](value) if base is not None else None
        if base is not None and plain == plain:  # (a NaN is equal to nothing)
            same = f"{what} is equal to another {base.__name__} than its own value too"
            questions.append((_unlike_asked(lambda v: value == v, plain), False, same))
    if member is not None:
        questions.append((lambda: object() in value, False, f"{what} holds a new object"))
    return questions


def judged(expected: "list[Any]", answers: "list[Any]") -> "tuple[str, Any]":
    """(why a question was answered against what it expects, "" if none; the answer to
    the question asking what the test gave: None if none was asked or it raised).
    `expected`: each question's (what it expects, why if not)."""
    why, again = "", None
    for index in range(min(len(expected), len(answers))):
        (expect, finding), answer = expected[index], answers[index]
        if expect == "given" and again is not None and answer not in (None, again):
            why = why or (f"{finding}, which answered the same comparison {again}, then {answer}")
        elif expect == "given":
            again = answer if again is None else again
        elif answer is not None and answer != expect and not why:
            why = finding  # (one that raised tells nothing)
    return why, again


def truth(question: Any) -> Any:
    """Whether what `question` returns holds (None where it raises)."""
    try:
        got = question()
        return got is not NotImplemented and bool(got)
    except BaseException:
        return None


def shuffled(items: "list[Any]") -> "list[Any]":
    """`items` in an order no code of the patch's can foretell."""
    items = list(items)
    for at in range(len(items) - 1, 0, -1):
        other = int.from_bytes(os.urandom(2), "big") % (at + 1)
        items[at], items[other] = items[other], items[at]
    return items


def _unlike_asked(call: Any, value: Any) -> Any:
    """`call` of a value unlike `value`, made as it is asked (in the tracer: making it
    hashes the items of a set or a dict's keys, which may be the patch's)."""
    return lambda: call(_unlike(value)[0])


def _text(value: Any) -> str:
    """`value` as plain text where it is a string (a subclass's own `__str__` or
    `__format__` does not run), else "?"."""
    return str.__str__(value) if any(k is str for k in _TYPE_MRO(type(value))) else "?"


def _owner(kind: Any, name: str) -> Any:
    """(the first class on `kind`'s MRO whose own namespace holds `name`, what it holds);
    (None, None) where none does (read from the namespaces: no code of the class runs)."""
    for klass in _TYPE_MRO(kind)[:64]:
        namespace = _TYPE_DICT(klass)
        if name in namespace:
            return klass, namespace[name]
    return None, None


def _definer(kind: Any, name: str) -> Any:
    """The class on `kind`'s MRO that defines `name`, where it is not `object`'s or a
    builtin value's own; else None."""
    klass = _owner(kind, name)[0]
    return None if klass is object or klass in _BUILTIN_VALUES else klass


# A scalar builtin's own copy of a value of a subclass of it, as the builtin (no code of
# the subclass's runs). (A container's subclass may keep its items elsewhere: Django's
# `ErrorList` is a list whose own items are empty and whose `data` holds them.)
_SCALARS = {int: int.__int__, float: float.__float__, str: str.__str__}
_CONTAINERS = (bytes, tuple, list, dict, set, frozenset)
_BUILTIN_VALUES = frozenset((*_SCALARS, *_CONTAINERS, bool, complex, type(None)))


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
    """The test `frame` is at: "==", "!=" or "in"; "" where it is at none of them."""
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
    klass, member = _owner(type(value), name)
    return None if type(member) is _FunctionType else klass


_UNLIKE_KINDS = (bool, *_SCALARS, *_CONTAINERS)  # what `_unlike` makes another of


def _unlike(value: Any) -> "list[Any]":
    """A value of `value`'s own builtin type that differs from it, as a test's own might
    (none for other types): a number moved by a little, a letter put in a string, an
    item more or fewer, salted anew each time."""
    kind = type(value)
    salt = int.from_bytes(os.urandom(4), "big")
    step = (salt % 997 + 1) * (1 if salt & 0x400 else -1)
    if kind is bool:
        return [not value]
    if kind is int:
        return [value + step]
    if kind is float:
        finite = value == value and abs(value) != float("inf")
        return [value + step * (1.0 + abs(value)) / 64 if finite else float(step)]
    if kind in (str, bytes):
        letter = "abcdefghijklmnopqrstuvwxyz0123456789"[salt % 36]
        at = (salt >> 12) % (len(value) + 1)
        piece = letter if kind is str else letter.encode()
        return [value[:at] + piece + value[at:]]
    if kind in (tuple, list):
        items = list(value)
        return [kind(items[:-1] if items and salt & 1 else [*items, step])]
    if kind in (set, frozenset):
        return [kind([*value, object()])]
    if kind is dict:
        other = dict(value)
        if other and salt & 1:
            other.pop(next(iter(other)))
        else:
            other[str(step)] = step
        return [other]
    return []


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a `class` statement or `type()`


def _interpreter_code(value: Any, depth: int = 0) -> bool:
    """Whether `value` is a callable of the interpreter's own code (a builtin function or
    class, a slot, a C object that calls), or a partial or method of one."""
    kind = type(value)
    if kind is _Partial or kind is _MethodType:
        inner = value.func if kind is _Partial else _METHOD_FUNC(value)
        return depth > 3 or _interpreter_code(inner, depth + 1)
    if kind is _FunctionType:
        return False
    if kind is type:
        return not _TYPE_FLAGS(value) & _HEAP_TYPE
    calls = any("__call__" in _TYPE_DICT(k) for k in _TYPE_MRO(kind))
    return calls and not _TYPE_FLAGS(kind) & _HEAP_TYPE


def foreign_slots(origins: "Origins") -> "list[str]":
    """The classes of the patch's modules whose equality or membership is the
    interpreter's own code under another name (`__eq__ = int.__ne__`, a partial of a
    builtin), a comparison of the test's that runs no frame of Python's, which no
    question of the monitor's is ever asked of where the value reaches the test by no
    call (a class called as a function, a generator's items); or a static or class
    method, called with the other value alone."""
    problems: list[str] = []
    for module in list(sys.modules.values()):
        if type(module) is not type(sys):
            continue
        namespace = _MODULE_DICT(module)
        filename = namespace.get("__file__")
        if type(filename) is not str or origins.trusted_file(filename):
            continue
        for value in list(namespace.values())[:4096]:
            if not issubclass(type(value), type):
                continue
            own = _TYPE_DICT(value)
            for name in ("__eq__", "__contains__"):
                member = own.get(name)
                kind = type(member)
                if kind in (staticmethod, classmethod):
                    why = f"is a {kind.__name__}"
                elif member is None or not _interpreter_code(member):
                    continue
                elif kind in _NAME_OF and _text(_NAME_OF[kind](member)) == name:
                    continue  # a builtin's own slot of that name (`__eq__ = int.__eq__`)
                else:
                    why = "is code of the interpreter's own under another name"
                problems.append(f"{_text(_TYPE_QUALNAME(value))}.{name} of {filename} {why}")
                if len(problems) > 3:
                    return problems
    return problems


# How the interpreter's own callables are named.
_NAME_OF = {
    kind: kind.__dict__["__name__"].__get__
    for kind in (type(len), type((0).__add__), type(int.__add__), type(str.join))
}
