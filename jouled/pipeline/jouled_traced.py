"""A test's own frames, traced while it runs, for the integrity monitor.

The seventh of the monitor's files (`jouled_monitor.py` says how they run). The failures'
file hears a failure where a framework raises it; an exception of any other kind, or a
bare `assert` under a runner that does not rewrite it, is raised with no framework's
code on its way. So while a test runs (from the runner's word that it starts to its
report) the frames of the suite's own files are traced (`sys.settrace`, on Python 3.8
and later; their lines only while an exception is pending in them), and every
exception that reaches one is judged where it arrives. Every frame the trace is handed
must tell it of its end: one whose trace function was taken from it (a frame is
readable, and writing its `f_trace` raises no audit event) is found that way.

An exception that arrives inside a `with` block (or a later item of the statement)
whose context manager is the patch's, or the standard library's or a framework's
(which pass every exception on: `_context_of`), and that cuts short a check of the
test's (it is a failure itself; an `assert`, an `assert...`/`fail` call or a call of
the suite's own stands in the block at or after where it arrived, or in a loop around
it), is pending until the frame goes on (`_swallower`). Its next lines tell who
stopped it (`_after`): a handler's body, or a line inside the block past a catcher
inside it, is the test's own; a line past the block, or a return, is the context
manager's, which swallowed it, and the test's pass is not the test's. A check that
raises in a frame with no such block and leaves it for a function of the patch's,
which goes on to the next frame of the suite's own, was swallowed there (`_left`); so
was one the interpreter dropped as unraisable (`unraisable`). A library whose feature
is to suppress errors keeps its tests: where nothing of the test's is cut short, or
the test catches the error itself, nothing is swallowed.

Every call such a frame (or a framework's assertion: `_CHECKERS`) makes is traced too
(`_callee`): a comparison the patch's code decides is asked again as it starts, and
what the call returns to the test as it ends (`jouled_compared.py`); as it ends, the
frames out to the test's observer must have no trace function but the monitor's (one
put there rewrites the test's variables or skips its lines: `_retraced`), and it too
must tell of its end. A child the run forks is ended as the suite's code runs in it
(`_forked`).

What the tracer holds is read-only (frozen sets of file names, `sys.audit`); what it
sees is told to the hook, and judged there. The questions the hook hands back to ask
run in the tracer, outside the hook, so the patch's code they call is watched.
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_compared import (
        _opcodes,
        foreign_slots,
        judged,
        probe,
        returned,
        shuffled,
        truth,
    )
    from jouled.pipeline.jouled_failures import (
        _MISSING,
        _SWALLOWED_KEPT,
        _context_of,
        _resolve,
        around,
        function_checks,
        swallowers,
    )
    from jouled.pipeline.jouled_monitor import EVENT
    from jouled.pipeline.jouled_observe import _OBSERVERS, _TRACEBACK, _getframe
    from jouled.pipeline.jouled_origins import (
        _FUNC_CODE,
        _TYPE_MRO,
        Origins,
        _FunctionType,
        _MethodType,
        _module_file,
    )
    from jouled.pipeline.jouled_sealed import _SEALED, sealed_arguments

_PENDING_KEPT = 10000  # frames of the suite's own with an exception pending at once
_OWING_KEPT = 100000  # frames of the suite's own running at once

_RETURNS = frozenset(code for name, code in _opcodes.items() if name.startswith("RETURN_"))
_YIELDS = frozenset(code for name, code in _opcodes.items() if name == "YIELD_VALUE")
# Where an iteration or an `await` ends with StopIteration (a loop's end, traced on 3.8
# and 3.9; an awaited coroutine's return): the loop or the `await` takes it, and it
# never reaches a block of the frame's.
_ITERATION = (StopIteration, StopAsyncIteration)
_ITERATING = frozenset(
    _opcodes[name]
    for name in ("FOR_ITER", "YIELD_FROM", "SEND", "END_SEND", "END_ASYNC_FOR")
    if name in _opcodes
)
_get = dict.get
# Frameworks' modules whose assertions compare on the test's behalf.
_CHECKERS = ("unittest.case", "_pytest.python_api", "django.test.testcases")
CHILD_EXIT = 70  # a forked child that would run the suite's code is ended with this
_EXIT = os._exit  # (as it was: the child's `os` module is the patch's to write)
_ASKING_KEPT = 10000


def _is_failure(kind: Any) -> bool:
    """Whether an exception's class is a failure's, by its MRO (asking `isinstance` would
    run the object's own `__class__`)."""
    return isinstance(kind, type) and any(k is AssertionError for k in _TYPE_MRO(kind))


_SUSPENDS = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine (two kinds), async generator


class Trace:
    """The trace of the suite's own frames while a test runs, and what it found."""

    def __init__(self, origins: "Origins", audit: Any, given_root: str) -> None:
        self.origins = origins
        # The suite's files as their code may name them: by real path, and under the
        # tree's path as the run was given it.
        real_root = origins.root.rstrip(os.sep) + os.sep
        given = given_root.rstrip(os.sep) + os.sep
        names = set(origins.protected)
        names.update(
            given + name[len(real_root) :]
            for name in origins.protected
            if name.startswith(real_root)
        )
        self.names = frozenset(names)
        self.audit = audit
        self.local, self.traced, self.answered = self._tracers(self.names)
        self.on = False
        self.able = audit is not None  # Python 3.8+ (and frames' `f_trace_lines`, 3.7+)
        # id(frame) -> [frame, error, *what `_swallower` found]: one a frame
        self.pending: dict[int, Any] = {}
        self.leaving: dict[int, Any] = {}  # id(frame) -> (frame, error): `_left`
        self.overflowed = False
        self.owing: dict[int, Any] = {}  # frames the trace was handed, until they leave
        self.asking: dict[int, Any] = {}  # id(frame) -> questions being asked (`_ask`)
        # id(frame) -> (frame, sealed files named by the arguments it was called with)
        self.handed: dict[int, Any] = {}
        self.child = False  # a process forked from the run's (`forked`)
        self._settrace, self._gettrace = sys.settrace, sys.gettrace

        def forked() -> None:  # in a child the run forked, before it goes on
            audit(EVENT, "traced", "forked", None)

        self.codes = (
            self.local.__code__,
            self.traced.__code__,
            self.answered.__code__,
            forked.__code__,
        )
        if self.able and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=forked)
        self._files: dict[str, bool] = {}  # file name -> whether it is the suite's own

    def _tracers(self, checking: "frozenset[str]") -> Any:
        """(the trace function of a frame of the suite's own, the global one, the one of a
        call such a frame, or a framework's assertion, made): each tells the hook."""
        names_, checking_, audit = self.names, checking, self.audit

        def local(frame: Any, event: str, arg: Any) -> Any:
            audit(EVENT, "traced", event, arg)
            return local

        def answered(frame: Any, event: str, arg: Any) -> Any:
            if event == "return":
                asked: list[Any] = []
                audit(EVENT, "traced", "answered", arg, asked)
                if asked:  # what it returned, asked (`_ask`)
                    audit(EVENT, "traced", "probed", asked[0]())
            return answered

        def traced(frame: Any, event: str, arg: Any) -> Any:
            # (a frame's globals, not its code: reading `f_code` is an audit event)
            if _get(frame.f_globals, "__file__") in names_:
                frame.f_trace_lines = False
                audit(EVENT, "traced", "call", None)
                return local
            back = frame.f_back
            if back is None or _get(back.f_globals, "__file__") not in checking_:
                return None
            asked: list[Any] = []
            audit(EVENT, "traced", "called", asked)
            if asked:  # a comparison of the patch's: asked again, and of other values
                audit(EVENT, "traced", "probed", asked[0]())
            frame.f_trace_lines = False
            return answered

        return local, traced, answered

    def start(self) -> None:
        """Trace the suite's own frames from now (a test starts)."""
        if self.child:  # a forked child does not run the suite's tests
            _EXIT(CHILD_EXIT)
        self.pending = {}
        self.overflowed = False
        self.owing = {}
        self.asking = {}
        self.handed = {}
        if not self.able:
            return
        checking = set(self.names)
        for name in _CHECKERS:
            found = _module_file(sys.modules.get(name))
            checking.update((found,) if found else ())
        self.local, self.traced, self.answered = self._tracers(frozenset(checking))
        self.on = True
        self._settrace(self.traced)

    def stop(self) -> "list[str]":
        """Stop tracing (the test's report); what says the trace did not hold throughout."""
        if not self.on:
            return []
        self.on = False
        self.pending, self.leaving, self.asking, self.handed = {}, {}, {}, {}
        held = self._gettrace() is self.traced
        self._settrace(None)
        live = set()  # frames still running (the runner's call that reports the test)
        current: Any = _getframe(0)
        while current is not None:
            live.add(id(current))
            current = current.f_back
        owing = [frame for key, frame in self.owing.items() if key not in live]
        self.owing = {}
        if not held:
            return ["the trace of the test's own frames was turned off while the test ran"]
        if owing:  # its trace function was taken from it: nothing it did since was seen
            code = owing[0].f_code
            return [f"the trace of {code.co_name} in {code.co_filename} was cut while it ran"]
        if self.overflowed:
            return ["more exceptions were pending or swallowed in the test's frames than are kept"]
        return foreign_slots(self.origins)  # (comparisons no frame of Python's runs)

    def heard(self, holder: "dict[str, Any]", tracer: Any, args: "tuple[Any, ...]") -> None:
        """The tracer's word (`tracer` its frame; `args`: "traced", the event, its
        argument) on a frame of the suite's own, or on a call one made (`_callee`)."""
        event = args[1] if len(args) > 1 else None
        if event == "forked":
            self._forked()
            return
        if self.child:  # a forked child runs the suite's code, or goes on with its test
            _EXIT(CHILD_EXIT)
        if event in ("called", "probed", "answered"):
            self._callee(holder, tracer.f_back, str(event), args[2:])
            return
        frame = tracer.f_back
        if not self.on or frame is None or not self._protected(frame.f_code.co_filename):
            return
        if event == "call":
            if tracer.f_code is self.codes[1] and len(self.owing) < _OWING_KEPT:
                self.owing[id(frame)] = frame
            return
        if event == "return":
            self.owing.pop(id(frame), None)
        if event == "exception":
            self._arrived(holder, frame, args[2])
            return
        if self.leaving and id(frame) in self.leaving:
            self._left(frame, str(event))
        entry = self.pending.get(id(frame))
        if entry is None:
            return
        if event == "line":
            verdict = _after(entry, frame.f_lineno)
        elif event == "return" and _returned(frame):
            verdict = _after(entry, 0)
        elif event == "return":  # left by a raise, or to wait (a generator's, ambiguous)
            verdict = "" if frame.f_code.co_flags & _SUSPENDS else "raised"
        else:
            verdict = ""
        if verdict:
            self._settle(entry)
        if verdict == "swallowed" and len(holder["swallowed"]) < _SWALLOWED_KEPT:
            holder["swallowed"].append((_observer_of(frame), entry[3]))
        elif verdict == "swallowed":
            self.overflowed = True

    def _forked(self) -> None:
        """In a child the run forked: from now the suite's code may not run in it (a test
        started, a frame of its own called or resumed): the child's monitor answers to no
        channel the run is graded by, so what the suite's code does there (a failure's
        message naming the expected value) would be unwatched. Workers of a library's
        (`multiprocessing`) run on."""
        self.child = True
        if self.able:
            self._settrace(self.traced)

    def _callee(self, holder: "dict[str, Any]", frame: Any, event: str, args: Any) -> None:
        """A call a frame of the suite's own, or a framework's assertion, made: "called"
        as it starts (a comparison the patch decides is asked again: `probe`),
        "answered" as it ends (the frames it returns to are checked; the comparison's
        own answer, or the value it returns to the test, is asked: `returned`), "probed"
        with the answers the tracer got."""
        if frame is None or not self.on or not args:
            return
        entry = self.asking.get(id(frame))
        entry = entry if entry is not None and entry[0] is frame else None
        why = ""
        if event == "called":
            if len(self.owing) < _OWING_KEPT:  # it too must tell of its end (`stop`)
                self.owing[id(frame)] = frame
            named = sealed_arguments(frame) if _SEALED else None
            if named and len(self.handed) < _OWING_KEPT:  # a test hands it a sealed file
                self.handed[id(frame)] = (frame, named)
            self._ask(frame, args[0], probe(frame, self.origins), "asked")
        elif event == "probed" and entry is not None and type(args[0]) is list:
            why = self._answers(entry, args[0])
        elif event == "answered" and len(args) > 1:
            why = self._retraced(frame.f_back)
            value, box = args[0], args[1]
            self.asking.pop(id(frame), None)
            self.owing.pop(id(frame), None)
            self.handed.pop(id(frame), None)
            if not (_returned(frame) or _opcode(frame) in _YIELDS):
                pass  # left by a raise: it answered nothing
            elif entry is not None and entry[1] == "asked":
                asked = [(lambda: value, "given", entry[3][1] if entry[3] else "")]
                self._ask(frame, box, asked, "answer", entry[3])
            elif entry is None and not self._protected(frame.f_code.co_filename):
                self._ask(frame, box, returned(value, self.origins), "returned")
        if why and len(holder["decided"]) < _SWALLOWED_KEPT:
            holder["decided"].append(why)

    def _ask(self, frame: Any, box: Any, questions: Any, stage: str, again: Any = None) -> None:
        """Hand the tracer `questions` to ask (in `box`), in an order of their own; what
        each expects is kept with the frame until the answers come (`_answers`)."""
        if not questions or type(box) is not list or box or len(self.asking) >= _ASKING_KEPT:
            return
        order = shuffled(questions)
        calls = [question for question, _, _ in order]
        self.asking[id(frame)] = [frame, stage, [(e, why) for _, e, why in order], again]
        box.append(lambda: [truth(call) for call in calls])

    def _answers(self, entry: Any, answers: "list[Any]") -> str:
        """What the tracer's answers say: a question answered against what it expects;
        or the comparison's own answer, not the one it gave when asked again."""
        frame, stage, expected, again = entry
        why, given = judged(expected, answers)
        if stage == "asked":  # (the given value's answer, and whose it is)
            what = next((finding for expect, finding in expected if expect == "given"), "")
            entry[3] = (given, what)
            return why
        self.asking.pop(id(frame), None)
        if stage == "answer" and again and None not in (given, again[0]) and given != again[0]:
            return (
                f"{again[1]}, which answered the test's comparison {given} and the same "
                f"comparison asked again {again[0]}"
            )
        return why

    def _retraced(self, start: Any) -> str:
        """Whether a frame from `start` out to the test's observer has a trace function
        that is not the monitor's: one put there runs between the frame's lines, and may
        rewrite its variables (Python before 3.13 writes a trace function's `f_locals`
        back) or move it past a line (`f_lineno`), where no audit event says so."""
        mine = (self.local, self.answered)
        current = start
        for _ in range(1000):
            if current is None or current.f_code in _OBSERVERS:
                return ""
            found = current.f_trace
            if found is not None and not any(found is own for own in mine):
                code = current.f_code
                where = f"{code.co_name} in {code.co_filename}"
                return f"the trace function of {where} was replaced while the test ran"
            current = current.f_back
        return ""

    def _protected(self, filename: str) -> bool:
        known = self._files.get(filename)
        if known is None:
            known = self._files[filename] = self.origins.is_protected(filename)
        return known

    def unraisable(self, holder: "dict[str, Any]", unraisable: Any) -> None:
        """An exception the interpreter drops where it was raised (a finalizer's, a
        `__del__`'s: `sys.unraisablehook`) that cut a check of the test's short is kept
        as swallowed off the test's call (`holder`'s): while a test's call runs, one
        whose traceback passes through a frame of the suite's own where it is a failure,
        or a check stands at or after its line."""
        why = self._dropped(unraisable)
        if why and len(holder["swallowed"]) < _SWALLOWED_KEPT:
            holder["swallowed"].append((None, why))

    def _dropped(self, unraisable: Any) -> str:
        error = getattr(unraisable, "exc_value", None) if self.on else None
        raised = any(k is BaseException for k in _TYPE_MRO(type(error)))
        trace = _TRACEBACK(error) if raised else None
        failure = _is_failure(type(error))
        for _ in range(1000):
            if trace is None:
                return ""
            frame, line = trace.tb_frame, trace.tb_lineno
            code = frame.f_code
            if self._protected(code.co_filename):
                checks, loops = function_checks(code.co_filename, code.co_firstlineno, line)
                if failure or _cut(checks, loops, line, frame, self.origins):
                    where = f"{code.co_name} in {code.co_filename}:{line}"
                    return f"the interpreter, which dropped a {type(error).__name__} of {where}"
            trace = trace.tb_next
        return ""

    def _left(self, frame: Any, event: str) -> None:
        """A frame a check of the test's was cut short in (`leaving`) goes on: by a line
        of its own or a return, it handled the exception itself; left by the raise, the
        exception goes to its caller, and where code of the patch's stands between it and
        the next frame of the suite's own, that frame is pending until it goes on."""
        error = self.leaving.pop(id(frame))[1]
        if not self.pending.get(id(frame)):
            frame.f_trace_lines = False
        raised = event == "return" and not _returned(frame)
        if not raised or frame.f_code.co_flags & _SUSPENDS:
            return
        patch = ""
        current = frame.f_back
        while current is not None and current.f_code not in _OBSERVERS:
            code = current.f_code
            if self._protected(code.co_filename):
                break
            found = self.origins.code_from_tree(code)
            patch = patch or (f"{code.co_name} of {found}" if found else "")
            current = current.f_back
        else:
            return
        if not patch or id(current) in self.pending:
            return
        code = frame.f_code
        where = f"{code.co_name} in {code.co_filename}:{frame.f_lineno}"
        why = f"{patch}, which caught a {type(error).__name__} raised in the test's {where}"
        self.pending[id(current)] = [current, error, None, why, [], [], []]
        current.f_trace_lines = True

    def _settle(self, entry: Any) -> None:
        self.pending.pop(id(entry[0]), None)
        entry[0].f_trace_lines = False

    def _arrived(self, holder: "dict[str, Any]", frame: Any, arg: Any) -> None:
        """An exception reached `frame` (raised there, or by a call it made)."""
        error = arg[1] if type(arg) is tuple and len(arg) > 1 else None
        kind = type(error)
        if error is None or (issubclass(kind, _ITERATION) and _opcode(frame) in _ITERATING):
            return
        self.pending.pop(id(frame), None)
        self.leaving.pop(id(frame), None)
        failure = _is_failure(kind)
        if failure and len(holder["swallowed"]) < _SWALLOWED_KEPT:
            # a failure no framework's path signalled (a bare `assert` under unittest, a
            # `raise AssertionError`): who may catch it on its way out, as for one that was
            # (judged within the test's observed call: SymPy's runner has no observer on
            # the stack, and its own frames would read as a library's handler)
            caught = swallowers(frame, self.origins, kind)
            if caught is not None and caught[0] is not None:
                holder["swallowed"].append(caught)
        found = _swallower(frame, self.origins, kind, failure)
        if found is None:
            code = frame.f_code
            checks, loops = function_checks(code.co_filename, code.co_firstlineno, frame.f_lineno)
            if failure or _cut(checks, loops, frame.f_lineno, frame, self.origins):
                self.leaving[id(frame)] = (frame, error)  # where it goes from here, `_left`
                frame.f_trace_lines = True
            return
        if len(self.pending) >= _PENDING_KEPT:
            self.overflowed = True
            return
        self.pending[id(frame)] = [frame, error, *found]
        frame.f_trace_lines = True


def _swallower(frame: Any, origins: "Origins", kind: Any, failure: bool) -> Any:
    """What is pending where an exception of class `kind` arrives at `frame`'s line: the
    innermost `with` block around it whose context manager is the patch's, the standard
    library's or a framework's (`_context_of`: "patch" or "passes"), where a check of the
    test's there is cut short (`failure`: the exception is itself one; a framework's
    catcher inside the block that it arrived in is one too); None where there is none,
    or a framework's catcher around that block fails the test if nothing reaches it. As
    [the block, why, spans of lines that settle it (the body of a handler of a `try`
    inside the block: "caught"; a `finally`: ""; a handler of a `try` around the block,
    which the exception reached: "caught"), the blocks inside it that the exception is
    in (first and last line, whether it may stop it there, whether it is a `with`), the
    blocks around it that may catch it].

    Nothing is decided here that the frame's next lines can tell: where the frame goes
    on inside the block, out of the blocks inside it that could stop the exception, one
    of them did; a line in the body of a handler stopped it. A catcher's class is read
    by the exception's MRO (`_may_catch`), never by asking the class."""
    code = frame.f_code
    line = frame.f_lineno
    found: Any = None
    proved = False
    caught: list[Any] = []  # bodies of the inner `try` blocks' handlers
    final: list[Any] = []
    reached: list[Any] = []  # handlers of the `try` blocks around the block
    inner: list[Any] = []
    outer: list[Any] = []
    for block in around(code.co_filename, code.co_firstlineno, line, headers=True):
        if block[0] == "try":
            final += [(block[5][0], block[5][1], "")] if block[5] else []
            if found is None:
                caught += [(first, last, "caught") for _, first, last in block[4]]
                inner.append((block[1], block[6], False, False))  # its handler's body says
            else:
                reached += [(at, last, "caught") for at, _, last in block[4]]
            continue
        if line < block[1] and len(block[3]) < 2 and block[7]:
            continue  # raised by its only item, bound to a name: nothing was entered
        for item in reversed(block[3]):
            verdict = _context_of(item, frame, origins)
            kind_of = verdict[0] if verdict is not None else None
            if kind_of in ("patch", "passes"):
                if found is None:
                    cut = _cut(block[5], block[6], line, frame, origins)
                    if not (failure or proved or cut):
                        return None
                    where = f"{code.co_name} in {code.co_filename}:{line}"
                    why = f"{verdict[1]}, which swallowed a {kind.__name__} at {where}"
                    found = (block, why)
                continue
            catches = _may_catch(kind_of, item, frame, kind)
            if found is None:
                proved = proved or kind_of == "proves"
                inner.append((block[4], block[2], catches, True))
            elif catches and kind_of == "proves":
                return None  # it fails the test where the exception never reaches it
            elif catches:
                outer.append((block[4], block[2]))
    if found is None:
        return None
    return [found[0], found[1], caught + final + reached, inner, outer]


def _may_catch(verdict: Any, item: Any, frame: Any, kind: Any) -> bool:
    """Whether a `with` item that is not a candidate may catch an exception of `kind`: a
    library's context manager (None) or a subtest may; a catcher (`pytest.raises(X)`,
    `assertRaises(X)`, `suppress(X, ...)`) only where `kind` is one of the classes its
    arguments name, by `kind`'s MRO; one whose classes cannot be read, may."""
    if verdict not in ("proves", "ignores"):
        return True
    named: list[Any] = []
    for arg in getattr(item, "args", None) or []:
        value = _resolve(arg, frame)
        named += list(value) if type(value) is tuple else [value]
    classes = [value for value in named if isinstance(value, type)]
    if not classes:
        return True
    mro = _TYPE_MRO(kind)
    return any(any(klass is cls for klass in mro) for cls in classes)


def _cut(checks: Any, loops: Any, line: int, frame: Any, origins: "Origins") -> bool:
    """Whether a check of the test's in a block (or a function) stands at or after `line`
    (or anywhere in a loop around `line`, which would have run it again): an `assert`,
    an `assert...`/`fail` call, or a call of what may be one (`_checks_something`)."""
    start = min([first for first, last in loops if first <= line <= last] or [line])
    for _, end, func in checks:
        if end >= start and (func is None or _checks_something(_resolve(func, frame), origins)):
            return True
    return False


def _checks_something(value: Any, origins: "Origins") -> bool:
    """Whether what a call in a test's block calls may be a check: a function of the
    suite's own files, or one named `assert...`/`fail...` (through methods, static and
    class methods and partials: `equal = self.assertEqual`), or what cannot be told."""
    for _ in range(8):
        if type(value) in _WRAPPING:
            value = value.__func__
        elif type(value) is _partial:
            value = value.func
        else:
            break
    if value is _MISSING:
        return True
    if type(value) is not _FunctionType:
        return False
    code = _FUNC_CODE(value)
    named = code.co_name.lower().startswith(("assert", "fail"))
    return named or origins.is_protected(code.co_filename)


_WRAPPING = (_MethodType, staticmethod, classmethod)
_partial = __import__("functools").partial


def _after(entry: Any, line: int) -> str:
    """How a line the frame runs after a pending exception (`line`; 0: the frame
    returned) settles it: "" (still in the blocks it was in, or in a `finally`:
    pending), "caught" (in a handler's body, or a handler of a `try` around the block;
    inside the block but out of a block inside it that could stop it; past a block
    around it that may have caught it), "swallowed" (past the block, where nothing else
    could have stopped it first)."""
    block, spans, inner, outer = entry[2], entry[4], entry[5], entry[6]
    if block is None:  # the test's check, handed out, raised and was caught on its way
        return "swallowed"
    if block[4] <= line < block[1]:
        return ""  # its own `with` line, as its exit runs (3.10 and later say so)
    for first, last, verdict in spans:
        if first <= line <= last:
            return verdict
    if block[4] <= line <= block[2]:
        # (3.9 tells the exit of a `with` as its body's last line: nothing stopped it yet)
        if any(first <= line <= last for first, last, _, _ in inner):
            return ""
        return "caught" if any(stops for _, _, stops, _ in inner) else ""
    if any(stops and is_with for _, _, stops, is_with in inner):
        return "caught"  # a `with` inside it may have taken it, and the block then ended
    if outer and not outer[0][0] <= line <= outer[0][1]:
        return "caught"  # past a block around it that may have caught it
    return "swallowed"


def _returned(frame: Any) -> bool:
    """Whether a frame's 'return' event is a return (not a yield, nor a raise leaving it)."""
    return _opcode(frame) in _RETURNS


def _opcode(frame: Any) -> int:
    """The operation a frame is at (-1 where its offset is not in its code)."""
    code = frame.f_code.co_code
    at = frame.f_lasti
    return code[at] if 0 <= at < len(code) else -1


def _observer_of(frame: Any) -> Any:
    """The running test's observer on the stack from `frame` outward; None off its call."""
    current = frame
    while current is not None:
        if current.f_code in _OBSERVERS:
            return current
        current = current.f_back
    return None
