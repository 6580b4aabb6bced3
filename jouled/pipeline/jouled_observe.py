"""What runs as a test, and how it ended, for the integrity monitor.

The third of the monitor's files (`jouled_monitor.py` says how they run). A test's
function is followed through its layers (partials, methods, wrappers that hold what
they wrap) to the `def` its file defines; a test's report of a pass is believed only
for the running test whose own function ran and returned. The runners hear a test
end through observers: one around what the runner calls (`observer`), and one inside
its wrappers around the test's own function (`observe_within`), so that a wrapper
that swallows the test's raise is heard doing so.
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import functools as _functools
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_failures import swallowed
    from jouled.pipeline.jouled_monitor import EVENT
    from jouled.pipeline.jouled_origins import (
        _FUNC_CLOSURE,
        _FUNC_CODE,
        _FUNC_DICT,
        _METHOD_FUNC,
        _MODULE_DICT,
        _TYPE_DICT,
        _TYPE_MRO,
        Origins,
        _FunctionType,
        _held,
        _MethodType,
        _Partial,
        _top,
        nested_codes,
    )


def observing(observed: Any, function: Any) -> bool:
    """Whether an observer made by `observer` still wraps `function` (its closure's cell
    can be rewritten by code that reaches it)."""
    if type(observed) is not _FunctionType:
        return False
    code = _FUNC_CODE(observed)
    cells = _FUNC_CLOSURE(observed) or ()
    names = code.co_freevars
    if "function" not in names or len(cells) != len(names):
        return False
    return cells[names.index("function")].cell_contents is function


def passed_problems(
    holder: "dict[str, Any]", test_id: str, running: Any, origins: "Origins"
) -> "list[str]":
    """Why a call reported passed is not the running test's own function, run and
    returned (`holder`: what the runner said of the running test, `running` its id)."""
    if test_id != running:
        return [f"a passing report of {test_id} came while {running or 'no test'} was running"]
    problems = []
    within = holder["within"]
    if within is not None:  # the test's own function, inside its wrappers
        inner = holder["inner_ran"]
        slot = within[0]
        there = slot[0].get(slot[1]) if type(slot) is tuple else _held(slot)
        if there is not within[2]:
            problems.append("the observer of the test's own function was taken out")
        if inner is None and not holder["within"][3]:
            # (a coroutine a wrapper never awaits is the suite's own vacuous pass, as a
            # coroutine test is wherever it runs: only its raise counts)
            problems.append("the report says passed but the test's own function never ran")
        elif inner and inner.startswith(_ANOTHER_SELF):
            kind = inner[len(_ANOTHER_SELF) :]
            problems.append(f"the test's own function was called with a {kind} as self")
        elif inner:
            problems.append(
                f"the report says passed but the test's own function raised {inner}, "
                "which a wrapper around it did not pass on"
            )
    problems += holder["decided"][:1]  # a comparison of the patch's, a frame retraced
    elsewhere = [why for at, why in holder["swallowed"] if at is None]
    if elsewhere:  # `swallowers`: a check of the test's handed to another thread
        problems.append(f"a failure of the test was caught by {elsewhere[0]}, off its call")
    if test_id != holder["observed"]:
        return problems
    problems += stand_in_problems(holder["function"], origins)
    observed = holder["observer"]  # none where the runner observes no wrapper
    if observed is not None and not observing(observed, holder["function"]):
        problems.append("the test's observer no longer calls the test's function")
    ran = holder["ran"]
    if ran is None and holder["strict"]:
        problems.append("the report says passed but the test's function never ran")
    elif ran:
        problems.append(f"the report says passed but the test raised {ran}")
    return problems


def stand_in_problems(function: Any, origins: "Origins") -> "list[str]":
    """Why what ran for a test is not shown to be a function of the suite's: followed
    through partials, methods and wrappers that hold what they wrap (`__wrapped__`
    alone is a claim anything can carry), it must end in a Python function of a file
    in the tree, not a builtin or a function of Python's or a library's."""
    layers = _layers(function)
    last = layers[-1]
    if type(last) is not _FunctionType:
        return [f"the test is a {_TYPE_NAME(type(last))}, not a function of the suite's"]
    for layer in layers[:-1]:
        if type(layer) is not _FunctionType:
            continue
        for value in (_held(cell) for cell in _FUNC_CLOSURE(layer) or ()):
            # A context manager of the patch's, or one the patch's generator drives.
            found = "" if type(value) is _FunctionType else origins.from_tree(value)
            found = found or _drives(value, origins)
            if found:
                name = _FUNC_CODE(layer).co_name
                return [f"the test runs in {name}, driven by code from {found}"]
    code = _FUNC_CODE(last)
    if _FUNC_DICT(last).get("__wrapped__") is not None:
        return [f"the test's {code.co_name} says it wraps what it does not hold"]
    name = code.co_filename
    if name.startswith("<") or origins.inside(origins.realpath(name)):
        return []
    return [f"the test runs {code.co_name} of {name}, not a function of the suite's"]


def _layers(function: Any) -> "list[Any]":
    """What a call of `function` goes through: partials and methods followed to what
    they call, wrappers to what they hold in their closure and name as `__wrapped__`;
    the last is where that stops (a function wrapping nothing it holds, or no function)."""
    layers, layer = [], function
    for _ in range(100):
        layers.append(layer)
        if type(layer) is _Partial:
            layer = layer.func
        elif type(layer) is _MethodType:
            layer = _METHOD_FUNC(layer)
        elif type(layer) is not _FunctionType:
            slot = _object_slot(layer)  # an object that calls what it holds
            if slot is None:
                break
            layer = _unobserved(slot[0][slot[1]])
        else:
            wrapped = _FUNC_DICT(layer).get("__wrapped__")
            cells = _FUNC_CLOSURE(layer) or ()
            handle = _handle(layer)
            if wrapped is not None and any(_holds(cell, wrapped) for cell in cells):
                layer = wrapped
            elif handle is not None:
                layer = _unobserved(handle["inner_test"])
            else:
                break
    return layers


def _object_slot(value: Any) -> Any:
    """(its attributes, the name) under which an object that names what it wraps as
    `__wrapped__` holds it to call (asgiref's `async_to_sync`, which Django puts on an
    async test); None where it holds it under no other name."""
    try:
        namespace = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return None
    if type(namespace) is not dict or namespace.get("__wrapped__") is None:
        return None
    wrapped = namespace["__wrapped__"]
    for key, held in list(namespace.items()):
        if key != "__wrapped__" and (held is wrapped or _unobserved(held) is wrapped):
            return namespace, key
    return None


def _handle(function: Any) -> "dict[str, Any] | None":
    """The attributes of a property test's handle: hypothesis runs each example through
    the handle's `inner_test` (the test's own function, or what a runner put there), which
    it looks up on the function pytest calls. None where the function has none."""
    handle = _FUNC_DICT(function).get("hypothesis")
    if handle is None:
        return None
    try:
        namespace = object.__getattribute__(handle, "__dict__")
    except AttributeError:
        return None
    return namespace if type(namespace) is dict and "inner_test" in namespace else None


def _unobserved(value: Any) -> Any:
    """What the monitor's observer `value` calls; `value` itself where it is none of them."""
    if type(value) is not _FunctionType or _FUNC_CODE(value) not in _OBSERVERS:
        return value
    cells = _FUNC_CLOSURE(value) or ()
    names = _FUNC_CODE(value).co_freevars
    return _held(cells[names.index("function")]) if "function" in names else value


def innermost(function: Any) -> Any:
    """What `function` runs in the end (`_layers`); None where that is no Python function."""
    last = _layers(function)[-1]
    return last if type(last) is _FunctionType else None


def _drives(value: Any, origins: "Origins") -> str:
    """The file of the patch's generator an object holds (`contextlib`'s context managers
    run one: its `except` decides whether the test's raise goes on), "" when none."""
    try:
        namespace = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return ""
    if type(namespace) is not dict:
        return ""
    for held in list(namespace.values()):
        kind = type(held)
        if kind is _types.GeneratorType or kind is _types.AsyncGeneratorType:
            code = held.gi_code if kind is _types.GeneratorType else held.ag_code
            found = origins.code_from_tree(code)
            if found:
                return found
    return ""


def _holds(cell: Any, wrapped: Any) -> bool:
    """Whether a wrapper's cell holds `wrapped`, or the monitor's observer of it
    (`observe_within`), which calls it and nothing else."""
    value = _held(cell)
    if value is wrapped:
        return True
    if type(value) is not _FunctionType or _FUNC_CODE(value) not in _OBSERVERS:
        return False
    return observing(value, wrapped)


def observe_within(audit: Any, function: Any, test_id: str, instance: Any = None) -> Any:
    """Put an observer in the cell by which the innermost wrapper around a test holds what
    runs the test's own function (`_layers`): (the cell, what it held, the observer, ...), for
    the monitor and `put_back`; None where no wrapper of Python code stands between the
    runner's call and that function. An observer there hears how the test's own call
    ended, whatever a wrapper above it (a decorator of the patch's, made of the standard
    library's parts) then does with a raise. The last item: whether a pass without it
    running may be the suite's own (`_vacuous`). `instance`: the test case, which a def
    whose first parameter is `self` must be called with (not an object that answers
    every assertion)."""
    layers = _layers(function)
    if type(layers[-1]) is not _FunctionType:
        return None
    for index in range(len(layers) - 2, -1, -1):
        layer = layers[index]
        held = layers[index + 1]
        if type(layer) in (_Partial, _MethodType):
            continue  # partials and methods call what they hold: they cannot swallow
        if type(layer) is not _FunctionType:  # an object of Python code that holds it
            slot = _object_slot(layer)
            if slot is None or slot[0][slot[1]] is not held:
                return None
            watcher = observer(audit, held, test_id, _self_of(held, instance))
            slot[0][slot[1]] = watcher
            return slot, held, watcher, _vacuous(held, instance)
        for cell in _FUNC_CLOSURE(layer) or ():
            if _held(cell) is held:
                watcher = observer(audit, held, test_id, _self_of(held, instance))
                try:
                    cell.cell_contents = watcher
                except (AttributeError, TypeError):  # cells are read-only before 3.7
                    return None
                return cell, held, watcher, _vacuous(held, instance)
        handle = _handle(layer)  # a property test's: hypothesis calls its `inner_test`
        if handle is not None and handle["inner_test"] is held:
            watcher = observer(audit, held, test_id, _self_of(held, instance))
            handle["inner_test"] = watcher
            return (handle, "inner_test"), held, watcher, _vacuous(held, instance)
        return None
    return None


def _vacuous(function: Any, instance: Any) -> bool:
    """Whether a pass without `function` running may be the suite's own: a coroutine
    function nothing awaits (a plain test case's), not one an async test case runs."""
    return _iscoroutinefunction(function) and not awaits(instance)


def awaits(instance: Any) -> bool:
    """Whether `instance` is an async test case (unittest's, which awaits its tests)."""
    module = sys.modules.get("unittest.async_case")
    case = _MODULE_DICT(module).get("IsolatedAsyncioTestCase") if module is not None else None
    return case is not None and any(k is case for k in _TYPE_MRO(type(instance)))


def guard_part_executor(audit: Any, case: Any) -> None:
    """Make unittest's part executor (`case._Outcome.testPartExecutor`, which runs a test,
    its setUp, a subtest) tell the monitor of a `_ShouldStop` it swallows that unittest's
    own `subTest` did not raise: code of the patch's raising it inside a subtest stops the
    subtest's assertions unheard, and unittest files a pass."""
    outcome, stop = case._Outcome, case._ShouldStop
    original = outcome.__dict__["testPartExecutor"]
    subtest = getattr(case.TestCase.__dict__["subTest"], "__wrapped__", None)
    own = getattr(subtest, "__code__", None)
    run = getattr(case.TestCase.__dict__["run"], "__code__", None)

    def testPartExecutor(self: Any, *args: Any, **kwargs: Any) -> Any:
        # The part runs under the outcome its test's run made: one put in its place
        # (`test._outcome`, a plain attribute) would file a subtest's failure where the
        # run never reads it, and the run would file a pass.
        frame: Any = _getframe(1)
        while frame is not None and frame.f_code is not run:
            frame = frame.f_back
        made = frame.f_locals.get("outcome", self) if frame is not None else self
        if made is not self:
            audit(EVENT, "tamper", "a test part ran under an outcome its run did not make")
        with original(self, *args, **kwargs):
            try:
                yield
            except stop as raised:
                trace = _TRACEBACK(raised)
                while trace is not None and trace.tb_next is not None:
                    trace = trace.tb_next
                if trace is None or trace.tb_frame.f_code is not own:
                    audit(EVENT, "tamper", "a _ShouldStop unittest did not raise ended a test part")
                raise

    guarded = _functools.wraps(original)(_contextmanager(testPartExecutor))
    setattr(outcome, "testPartExecutor", guarded)  # noqa: B010


_contextmanager = __import__("contextlib").contextmanager
_getframe = sys._getframe


def _self_of(function: Any, instance: Any) -> Any:
    """`instance` where `function` is a def whose first parameter is `self` (what it
    must be called with), else `_ANY`."""
    if instance is None or type(function) is not _FunctionType:
        return _ANY
    code = _FUNC_CODE(function)
    return instance if code.co_argcount and code.co_varnames[0] == "self" else _ANY


_ANY = object()
_ANOTHER_SELF = "\x00self:"  # how an observer reports a call with another `self`


def put_back(within: Any) -> None:
    """Give the wrapper (an object, or the property test's handle) `observe_within`
    observed in back what it held."""
    if within is None:
        return
    slot, held, watcher = within[0], within[1], within[2]
    if type(slot) is tuple:  # (an object's or a handle's attributes, the name)
        if slot[0].get(slot[1]) is watcher:
            slot[0][slot[1]] = held
    elif _held(slot) is watcher:
        slot.cell_contents = held


def observer(audit: Any, function: Any, test_id: str, expect: Any = None) -> Any:
    """`function` wrapped to tell the monitor (through `audit`) how each call of it ended:
    the name of what it raised, or "" when it returned; a coroutine function's observer
    is one too, and hears how the coroutine ended, not the event loop that runs it.
    `expect`: what the call's `self` must be (`_self_of`), told as `_ANOTHER_SELF`."""
    expect = _ANY if expect is None else expect

    def other(args: Any, kwargs: Any) -> str:
        if expect is _ANY:
            return ""
        given = args[0] if args else kwargs.get("self", expect)
        return "" if given is expect else _ANOTHER_SELF + _TYPE_NAME(type(given))

    if _iscoroutinefunction(function):

        @_functools.wraps(function)
        async def observed_coroutine(*args: Any, **kwargs: Any) -> Any:
            wrong = other(args, kwargs)
            if wrong:
                audit(EVENT, "ran", test_id, wrong)
            try:
                result = await function(*args, **kwargs)
            except BaseException as raised:
                audit(EVENT, "ran", test_id, _raised(raised), raised)
                raise
            audit(EVENT, "ran", test_id, "")
            return result

        return observed_coroutine

    @_functools.wraps(function)
    def observed(*args: Any, **kwargs: Any) -> Any:
        wrong = other(args, kwargs)
        if wrong:
            audit(EVENT, "ran", test_id, wrong)
        try:
            result = function(*args, **kwargs)
        except BaseException as raised:
            audit(EVENT, "ran", test_id, _raised(raised), raised)
            raise
        audit(EVENT, "ran", test_id, "")
        return result

    return observed


_TYPE_NAME = type.__dict__["__name__"].__get__
_types = __import__("types")
# What a test's own function may raise on its way to a pass, where a framework calls it
# more than once and rejects a call (hypothesis: an example ruled out, or out of data).
_CONTROL = {"hypothesis": ("StopTest", "UnsatisfiedAssumption", "BackendCannotProceed")}


def heard(
    holder: "dict[str, Any]",
    frame: Any,
    args: "tuple[Any, ...]",
    origins: "Origins",
    patch_on_stack: Any,
    item_check: Any,
) -> "list[str]":
    """Take an observer's word of how a call ended ("ran", test id, "" or the name of what
    it raised, the raise), `frame` the observer's; what says the call was not the test's.

    Only the observer of the test's function counts (another one, made around something
    else, would say what its maker likes), and a raise always wins; a report naming no
    test is the running test's (SymPy's runner observes the call from the framework's
    frame, not through a wrapper of its own). The observer inside the test's wrappers
    (`observe_within`) is heard apart. An observer called with code of the patch's on the
    stack was fed a call of the patch's choosing; and the running test is checked again
    as its call ends (a wrapper may change its class around the call and put it back).
    """
    wrapped = frame.f_locals.get("function")
    test_id = holder["observed"] if args[1] is None else args[1]
    ours = test_id is not None and test_id == holder["observed"]
    raised = args[2] if type(args[2]) is str else "an exception"  # all but "" is a raise
    if ours and wrapped is holder["function"] and (raised or holder["ran"] is None):
        holder["ran"] = raised
    within = holder["within"]
    if within is not None and wrapped is within[1] and args[1] == holder["item_id"]:
        error = args[3] if len(args) > 3 else None
        holder["inner_ran"] = ending(holder["inner_ran"], raised, error, origins)
    found = patch_on_stack(frame.f_back)
    problems = [f"the test's observer was called by {found}"] if found else []
    problems += swallowed(holder, frame, raised) if holder["swallowed"] else []
    if item_check is not None and holder["item"] is not None and test_id == holder["item_id"]:
        problems += item_check(holder["item"], origins)
    return problems


def ending(before: Any, raised: str, error: Any, origins: "Origins") -> Any:
    """How the test's own calls ended so far (None: not called, "": returned, else the
    name of what it raised), given one more call's ending (`error`: what it raised): a
    raise wins over returns; a framework's rejection of one call (`_CONTROL`) counts as
    neither, unless code of the patch's raised it or stood on its way (a library made to
    reject every example it gets wrong)."""
    kind = type(error)
    if raised and type(kind) is type and not origins.class_from_tree(kind):
        module = _TYPE_DICT(kind).get("__module__")
        control = type(module) is str and _TYPE_NAME(kind) in _CONTROL.get(_top(module), ())
        if control and not _raised_by_tree(error, origins):
            return before
    if raised:
        return before if before else raised
    return "" if before is None else before


def _raised_by_tree(error: Any, origins: "Origins") -> bool:
    """Whether code of the patch's is on the way from the test's call to the raise."""
    trace = _TRACEBACK(error)
    for _ in range(1000):
        if trace is None:
            return False
        if origins.code_from_tree(trace.tb_frame.f_code):
            return True
        trace = trace.tb_next
    return True


_TRACEBACK: Any = BaseException.__dict__["__traceback__"].__get__


def _raised(raised: BaseException) -> str:
    """What a test raised, by its class's own name (a metaclass cannot answer for it);
    never "" (a return)."""
    named = _TYPE_NAME(type(raised))
    return named if type(named) is str and named else "an exception"


_OBSERVERS = nested_codes(observer)
_iscoroutinefunction = __import__("inspect").iscoroutinefunction


def _attr(obj: Any, name: str) -> Any:
    """An instance attribute, from `__dict__` or a slot, without running class code of obj's."""
    try:
        namespace = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        namespace = None
    if isinstance(namespace, dict) and name in namespace:
        return namespace[name]
    slot: Any = None
    for klass in type(obj).__mro__:
        slot = _TYPE_DICT(klass).get(name)
        if slot is not None:
            break
    if type(slot).__name__ == "member_descriptor":
        try:
            return slot.__get__(obj, type(obj))
        except AttributeError:
            return None
    return None


def function_problems(function: Any, origins: "Origins") -> "list[str]":
    """Why a test's function no longer runs the code its file defines; [] when nothing says so.

    Every layer (decorators followed through `__wrapped__`) must be code the
    patch did not write, and at least one a Python function: an object that
    merely passes for a test is the tree's stand-in.
    """
    problems: list[str] = []
    seen, python_layers, start = 0, 0, function
    while function is not None and seen < 100:
        seen += 1
        inner = function
        if type(inner) is _MethodType:
            inner = _METHOD_FUNC(inner)
        if type(inner) is _FunctionType:
            python_layers += 1
            found = origins.function_from_tree(inner)
            if found:
                problems.append(f"the test runs code from {found}, which the patch can change")
                break
        elif type(inner) is not _Partial and not hasattr(inner, "__wrapped__"):
            found = origins.from_tree(inner)
            if found:
                problems.append(f"the test is an object from {found}")
                break
        function = getattr(function, "__wrapped__", None)
    if python_layers == 0 and callable(start):
        problems.append(f"the test is a {type(start).__name__}, not a function of its file")
    return problems
