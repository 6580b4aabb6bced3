"""A test's failures, heard where they are raised, for the integrity monitor.

The fifth of the monitor's files (`jouled_monitor.py` says how they run). The
frameworks' failure paths (what pytest's rewritten `assert` calls as it fails, the
making of pytest's `Failed`, unittest's `fail` and the message every one of its
assertions builds as it fails) tell the monitor of each failure as it is raised
(`signal_failures`). The monitor looks then at what stands between the failure and the
observer of the running test (`swallowers`): the `try` and `with` blocks around each
frame's line, and the functions on the way. A test whose call then returns, although
its failure may have been caught where the test did not ask for it (a context manager
or a function of the patch's, a library's own handler, a framework's catcher the
patch called), did not pass: the failure was swallowed.
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import functools as _functools
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_case import _defined, _same_file, source_tree
    from jouled.pipeline.jouled_monitor import EVENT
    from jouled.pipeline.jouled_observe import _OBSERVERS
    from jouled.pipeline.jouled_origins import (
        _FUNC_CODE,
        _MODULE_DICT,
        _TYPE_DICT,
        _TYPE_MRO,
        _TYPE_QUALNAME,
        Origins,
        _FunctionType,
        _module_file,
        framework_module,
        nested_codes,
    )

_MISSING = object()
_SWALLOWED_KEPT = 16  # a test's swallowed failures kept (one is enough to tell)


def signal_failures(audit: Any, case: Any, rewrite: Any, outcomes: Any = None) -> None:
    """Make the frameworks' failure paths tell the monitor (through `audit`) of each
    failure as it is raised: in unittest (`case`), `TestCase.fail`, `_formatMessage`
    (every assertion builds its message with it as it fails) and `assertSequenceEqual`
    left by a raise (its type checks raise with no message built); in pytest, what a
    rewritten `assert` calls only as it fails (`rewrite`, the module
    `_pytest.assertion.rewrite`) and the making of `Failed` (`outcomes`: `pytest.fail`,
    `pytest.raises`' "did not raise"); None under another runner."""

    def signalling(original: Any, made: bool = False) -> Any:
        # the failure's class: what is made (`made`: the first argument is the failure
        # being made), or the test case's failureException, or AssertionError
        @_functools.wraps(original)
        def failed(*args: Any, **kwargs: Any) -> Any:
            given = type(args[0]) if args else None
            kind = given if made else getattr(given, "failureException", AssertionError)
            audit(EVENT, "failed", kind)
            return original(*args, **kwargs)

        return failed

    def signalling_raise(original: Any) -> Any:
        @_functools.wraps(original)
        def left(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except BaseException as raised:
                audit(EVENT, "failed", type(raised))
                raise

        return left

    test_case = case.TestCase
    for name, wrap in (
        ("fail", signalling),
        ("_formatMessage", signalling),
        ("assertSequenceEqual", signalling_raise),
    ):
        original = _TYPE_DICT(test_case).get(name)
        if type(original) is _FunctionType:
            setattr(test_case, name, wrap(original))
    for name in ("_format_explanation", "_call_reprcompare"):
        original = _MODULE_DICT(rewrite).get(name) if rewrite is not None else None
        if type(original) is _FunctionType:
            setattr(rewrite, name, signalling(original))
    failed_type = _MODULE_DICT(outcomes).get("Failed") if outcomes is not None else None
    if isinstance(failed_type, type):
        init = getattr(failed_type, "__init__", None)
        if type(init) is _FunctionType:
            setattr(failed_type, "__init__", signalling(init, made=True))  # noqa: B010


def note_failure(holder: "dict[str, Any]", frame: Any, origins: "Origins", kind: Any) -> None:
    """A failure (of class `kind`) was raised from `frame` (a `signal_failures`
    wrapper's): where only code of the patch's could catch it before the running test's
    observer, keep that observer's frame and why, for `swallowed` to judge when the call
    ends."""
    if holder["item"] is None or len(holder["swallowed"]) >= _SWALLOWED_KEPT:
        return
    kind = kind if isinstance(kind, type) else AssertionError
    found = swallowers(frame.f_back, origins, kind)
    if found is not None:
        holder["swallowed"].append(found)


def swallowed(holder: "dict[str, Any]", frame: Any, raised: str) -> "list[str]":
    """What an observer's call (`frame`, ending with `raised`, "" for a return) swallowed:
    a failure raised inside it that only code of the patch's could catch, where the call
    then returned."""
    kept = holder["swallowed"]
    mine = [why for at, why in kept if at is frame]
    if not mine:
        return []
    holder["swallowed"] = [entry for entry in kept if entry[0] is not frame]
    if raised:
        return []
    return [f"a failure of the test was caught by {mine[0]}, and the test returned"]


def swallowers(frame: Any, origins: "Origins", kind: Any = AssertionError) -> Any:
    """(the running test's observer frame, why) where a failure (of class `kind`) raised
    at `frame` may be caught before that observer by code the test did not ask to catch
    it; (None, why) where no observer is on the stack (a thread the test's check was
    handed to); None where the test or a framework it called catches it first, or
    nothing of the patch's stands on its way.

    The frames from the failure outward, every one to the observer: the framework's own
    that raise it, and a library's it runs in before the test's code, only pass it on.
    From the test's code (a test file's) out, what may catch it is the patch's (a
    function of the patch's on the way, a `with` whose context manager is the patch's,
    any `try` or `with` of a library's: a handler the failure never reaches the test
    through) or the test's (its own `try` whose handlers take the failure's class, a
    subtest, a framework's catcher it calls). The first catcher from the raise decides:
    the test's, with nothing of the patch's inside it, ends the walk; an outer one does
    not clear what the patch's may already have swallowed, save a catcher that fails
    the test when nothing reaches it (`pytest.raises`, `assertRaises`). A framework's
    catcher counts as the test's only where the test's code, not the patch's, called it
    (`assertRaises(AssertionError, check)` in the test; not `pytest.raises` called
    by the library with the test's check)."""
    suspects: list[str] = []
    test_seen = False
    called = ""  # a framework's catcher: the test's only if the test's code called it
    current = frame
    while current is not None:
        code = current.f_code
        if code in _OBSERVERS:
            break
        if code in _SIGNALLING:
            current = current.f_back
            continue
        found = origins.code_from_tree(code)
        framework = not found and _framework(current)
        own = not found and not framework and origins.is_protected(code.co_filename)
        if called and (found or own):
            if found:
                suspects.append(f"{called}, called by {code.co_name} of {found}")
            elif not suspects:
                return None  # the test asked the framework to catch it
            called = ""
        if found:
            if test_seen:
                suspects.append(f"{code.co_name} of {found}")
        elif own or (framework and test_seen):
            test_seen = True
            for verdict, why in _enclosing(current, origins, kind, own):
                if verdict == "patch":
                    suspects.append(why)
                elif verdict == "ignores" and own:  # the test's own: failures here do not count
                    return None
                elif verdict == "proves":  # fails the test unless the failure reaches it
                    suspects.clear()
                    if own:
                        return None
                    called = called or why
                    break
                elif not suspects:  # "catches": the test's own catcher
                    if own:
                        return None
                    called = called or why
                    break
        elif test_seen and not framework:  # a library's handler keeps it
            blocks = _enclosing(current, origins, kind, False)
            suspects += [why for _, why in blocks[:1]]
        current = current.f_back
    else:
        current = None
    if called and not suspects:
        suspects.append(f"{called}, with no test's code calling it")
    return (current, suspects[0]) if suspects else None


def _framework(frame: Any) -> bool:
    return framework_module(frame.f_globals.get("__name__"))


def _enclosing(frame: Any, origins: "Origins", kind: Any, own: bool) -> "list[Any]":
    """The `try` and `with` blocks around `frame`'s line that may catch a failure of
    class `kind`, innermost first (a `with` of several items, its last first), each as
    (verdict, description): "patch" (a context manager of the patch's, or one that
    cannot be told), "proves" (a framework's catcher that fails the test unless the
    failure reaches it), "ignores" (the test's own `try` whose handlers take `kind`, or
    `contextlib.suppress`: the test says a failure there does not count), "catches" (a
    subtest, a framework's other handler); any other `with` passes the failure on. In a
    library's frame (`own` False and no framework's), every block is listed as "patch"."""
    code = frame.f_code
    line = frame.f_lineno
    found: list[Any] = []
    where = f"{code.co_name} in {code.co_filename}:{line}"
    library = not own and not _framework(frame)
    for block, items in _blocks(code.co_filename, code.co_firstlineno, line):
        if library:
            found.append(("patch", f"a {block} block of {where}"))
            continue
        if block == "try":
            if _handles(items, frame, kind):
                if own:
                    found.append(("ignores", f"the test's try block at {where}"))
                else:
                    proves = "raises" in code.co_name.lower()
                    found.append(("proves" if proves else "catches", f"the try block of {where}"))
            continue
        for item in reversed(items):
            verdict = _context_of(item, frame, origins)
            if verdict is not None and verdict[0] != "passes":
                found.append(verdict)
    return found


def _handles(handlers: Any, frame: Any, kind: Any) -> bool:
    """Whether a `try`'s handlers (their type expressions) take a failure of `kind`; an
    expression that cannot be read from namespaces is taken to."""
    for node in handlers:
        if node is None:
            return True
        exprs = node.elts if type(node).__name__ == "Tuple" else [node]
        for expr in exprs:
            value = _resolve(expr, frame)
            if value is _MISSING or not isinstance(value, type):
                return True
            if any(klass is value for klass in _TYPE_MRO(kind)):  # as `except` matches
                return True
    return False


def _context_of(node: Any, frame: Any, origins: "Origins") -> Any:
    """What a `with` item (its expression `node`) is to a failure inside it: ("patch",
    why) where the called function's or the object's code is the patch's, or reached
    through, held by or imported from a module of the patch's, or cannot be told without
    running code, or its class's exit is not its own (`_odd_exit`), or it is a `suppress`
    the statement did not make; ("proves", why) for a framework's catcher of an expected
    raise (it fails the test when nothing reaches it); ("catches", why) for a
    framework's subtest; ("ignores", why) for the standard library's `suppress` called
    there; ("passes", why) for any other of a framework's or the standard library's,
    which pass every exception on; None for a library's (it may swallow by design)."""
    call = type(node).__name__ == "Call"
    target = node.func if call else node
    named = _named(target)
    value = _resolve(target, frame)
    if value is _MISSING:  # what cannot be told without running code is the patch's
        return ("patch", f"the context manager {named}, which cannot be told")
    found = origins.from_tree(value) if call else origins.class_from_tree(type(value))
    if not call and (id(value) in origins.reclassed or not _exits(type(value))):
        # its class is not the one the `with` entered: the patch's code gave it another
        found = found or "a class the patch's code gave it"
    found = found or _through_patch(target, frame, origins) or _held_by_patch(value, origins)
    found = found or _imported_from_patch(target, frame, origins)
    if found:
        return ("patch", f"the context manager {named} of {found}")
    maker = value if call else type(value)
    if isinstance(maker, type):
        odd = _odd_exit(maker)
        if odd:
            return ("patch", f"the context manager {named}, whose {odd}")
        # judged as the first class on its MRO that the module it names holds there: a
        # class made at run time may name any module
        maker = _held_class(maker, origins)
        if maker is None:
            return ("patch", f"the context manager {named}, of a class no module holds")
    elif type(maker) not in _PLAIN_CALLABLES:
        return ("patch", f"the context manager {named}, made by a {type(maker).__name__}")
    module = getattr(maker, "__module__", None)
    name = getattr(maker, "__name__", "")
    if type(module) is not str or type(name) is not str:
        return None
    if framework_module(module):
        if "raises" in name.lower():
            return ("proves", f"the context manager {named}")
        if name in ("subTest", "subtests", "test"):
            return ("catches", f"the context manager {named}")
        return ("passes", f"the context manager {named}, a test framework's")
    if module == "contextlib" and name == "suppress":
        if call and maker is _SUPPRESS:  # `with suppress(...)` in the test's own source
            return ("ignores", f"the context manager {named}")
        return ("patch", f"the context manager {named}, a suppress made before the with")
    if _standard(module):
        return ("passes", f"the context manager {named}, the standard library's")
    return None


def _exits(cls: Any) -> bool:
    """Whether a class has an exit a `with` could have entered it with."""
    return any("__exit__" in _TYPE_DICT(k) or "__aexit__" in _TYPE_DICT(k) for k in _TYPE_MRO(cls))


def _held_class(cls: Any, origins: "Origins") -> Any:
    """The first class on `cls`'s MRO that its module holds under its qualified name (a C
    type is taken as it is: nothing can make one at run time; so is a class of a test
    module's, which may make its own anywhere); None where there is none but `object`."""
    for klass in _TYPE_MRO(cls):
        if klass is object:
            break
        if not _TYPE_FLAGS(klass) & _HEAPTYPE:
            return klass
        module, filename = _class_module(klass)
        if filename and origins.is_protected(filename):
            return klass
        held = _MODULE_DICT(module) if isinstance(module, _ModuleType) else {}
        path = _TYPE_QUALNAME(klass).split(".")
        for part in path[:-1]:
            owner = held.get(part)
            held = _TYPE_DICT(owner) if isinstance(owner, type) else {}
        if held.get(path[-1]) is klass:
            return klass
    return None


def _class_module(klass: Any) -> "tuple[Any, str]":
    """The module a class names (as `sys.modules` holds it now), and its file ("" where
    there is none)."""
    module = sys.modules.get(_TYPE_DICT(klass).get("__module__"))
    return module, _module_file(module) if isinstance(module, _ModuleType) else ""


_PLAIN_CALLABLES = (
    _FunctionType,
    type(len),  # a builtin function or a bound builtin method
    type(_SWALLOWED_KEPT.__add__),  # a bound builtin method
    type(_held_class.__get__(0)),  # a bound method
)
_SUPPRESS = __import__("contextlib").suppress


def _odd_exit(cls: Any) -> str:
    """What is odd about a Python class's exit (`__exit__`, `__aexit__`, the first on its
    MRO): one that is not the `def` its class's source has under that name (a builtin
    such as `slice`, which returns something true for any raise; another class's
    function; a lambda). Writing a class's attribute raises no audit event, so a
    context manager of the standard library's may have been given the patch's exit. ""
    where nothing is odd, or the class is a C type's, which nothing can change."""
    for name in ("__exit__", "__aexit__"):
        for klass in _TYPE_MRO(cls):
            namespace = _TYPE_DICT(klass)
            if name not in namespace:
                continue
            if not _TYPE_FLAGS(klass) & _HEAPTYPE:
                break
            held = namespace[name]
            filename = _class_module(klass)[1]
            span = _defined(filename, _TYPE_QUALNAME(klass) + "." + name) if filename else None
            if type(held) is not _FunctionType:
                return f"{name} is a {type(held).__name__}"
            code = _FUNC_CODE(held)
            # Its class's own `def`; where the source names none (a class made in a
            # function, as tests make theirs), at least a function of that file.
            own = code.co_name == name and bool(filename)
            own = own and _same_file(code.co_filename, filename)
            if own and span is not None:
                own = span[0] <= code.co_firstlineno <= span[1]
            if not own:
                return f"{name} is {code.co_name} of {code.co_filename}:{code.co_firstlineno}"
            break
    return ""


_TYPE_FLAGS = type.__dict__["__flags__"].__get__
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by Python code
_STDLIB = os.path.realpath(os.path.dirname(os.__file__)) + os.sep


def _standard(name: str) -> bool:
    """Whether the module named `name` is the standard library's (built in, or a file of
    the interpreter's own library outside its site-packages)."""
    if name in sys.builtin_module_names:
        return True
    filename = _module_file(sys.modules.get(name))
    if not filename:
        return False
    real = os.path.realpath(filename)
    installed = f"{os.sep}site-packages{os.sep}" in real or f"{os.sep}dist-packages{os.sep}" in real
    return real.startswith(_STDLIB) and not installed


def _through_patch(node: Any, frame: Any, origins: "Origins") -> str:
    """The file of a module of the patch's that a dotted chain is read through
    (`mypkg.precision`: whatever `mypkg` holds there, the patch chose), "" when none."""
    while type(node).__name__ == "Attribute":
        node = node.value
        base = _resolve(node, frame)
        if isinstance(base, _ModuleType):
            found = _patch_module(base, origins)
            if found:
                return found
    return ""


def _imported_from_patch(node: Any, frame: Any, origins: "Origins") -> str:
    """The module of the patch's the root name of a chain was imported from by the
    frame's own source (`from mypkg import precision`: what `mypkg` handed over then,
    a fresh object its `__getattr__` made included, the patch chose), "" when none."""
    while type(node).__name__ == "Attribute":
        node = node.value
    if type(node).__name__ != "Name":
        return ""
    source = _source(frame.f_code.co_filename)[1].get(node.id)
    if source is None:
        return ""
    module_name, level = source
    if level:
        package = frame.f_globals.get("__package__") or ""
        parts = package.split(".") if package else []
        base = ".".join(parts[: len(parts) - level + 1]) if level <= len(parts) else ""
        module_name = f"{base}.{module_name}" if module_name else base
    module = sys.modules.get(module_name)
    return _patch_module(module, origins) if isinstance(module, _ModuleType) else ""


def _held_by_patch(value: Any, origins: "Origins") -> str:
    """The file of a module of the patch's that holds `value` under a name of its own
    (`from mypkg import precision`, where `precision` is `partial(suppress, ...)`: a
    callable of the standard library's, chosen by the patch), "" when none."""
    for module in list(sys.modules.values()):
        if not isinstance(module, _ModuleType):
            continue
        values = list(_MODULE_DICT(module).values())
        if any(held is value for held in values):
            found = _patch_module(module, origins, values)
            if found:
                return found
    return ""


def _patch_module(module: Any, origins: "Origins", values: Any = None) -> str:
    """Whether a module is the patch's (`module_of_patch`); a module of a class of its
    own is."""
    if type(module) is not _ModuleType:
        return f"a module of the class {type(module).__name__}"
    return module_of_patch(module, origins, values)


def module_of_patch(module: Any, origins: "Origins", values: Any = None) -> str:
    """Where the patch's code stands behind a module: its file, or (a file name is a value
    anything can set) a function of the patch's it holds (`values`: its dict's values,
    where already read); "" when nothing does."""
    filename = _module_file(module)
    if filename and not origins.trusted_file(filename):
        return filename
    for held in values if values is not None else list(_MODULE_DICT(module).values()):
        if type(held) is _FunctionType:
            found = origins.function_from_tree(held)
            if found:
                return found
    return ""


def _resolve(node: Any, frame: Any) -> Any:
    """The value a name or a dotted attribute chain has in `frame`, read from
    namespaces only (no attribute lookup of the objects' own runs); `_MISSING` where
    that cannot be done."""
    kind = type(node).__name__
    if kind == "Name":
        for namespace in (frame.f_locals, frame.f_globals, frame.f_builtins):
            try:
                if node.id in namespace:
                    return namespace[node.id]
            except Exception:  # a locals proxy that refuses (3.13+)
                return _MISSING
        return _MISSING
    if kind != "Attribute":
        return _MISSING
    base = _resolve(node.value, frame)
    if base is _MISSING:
        return _MISSING
    name = node.attr
    if type(base) is _ModuleType:
        return _MODULE_DICT(base).get(name, _MISSING)
    classes = _TYPE_MRO(base) if isinstance(base, type) else None
    if classes is None:
        try:
            own = object.__getattribute__(base, "__dict__")
        except AttributeError:
            own = None
        if type(own) is dict and name in own:
            return own[name]
        classes = _TYPE_MRO(type(base))
    for klass in classes:
        namespace = _TYPE_DICT(klass)
        if name in namespace:
            return namespace[name]
    return _MISSING


def _named(node: Any) -> str:
    kind = type(node).__name__
    if kind == "Name":
        return node.id
    if kind == "Attribute":
        return _named(node.value) + "." + node.attr
    return "(an expression)"


_ModuleType = type(_functools)
# file -> ([(first line, last line of a function, its heads, [(kind, first, last,
# items)])], {name it binds by `from M import`: (M, level)})
_SOURCES: "dict[str, tuple[list[Any], dict[str, Any]]]" = {}


def _source(filename: str) -> "tuple[list[Any], dict[str, Any]]":
    """A source file's functions with their `try` and `with` blocks, and the names it
    imports `from` a module: read and parsed once."""
    known = _SOURCES.get(filename)
    if known is None:
        known = _scopes(filename)
        if len(_SOURCES) < 10000:
            _SOURCES[filename] = known
    return known


def _blocks(filename: str, first: int, line: int) -> "list[Any]":
    """The `try` blocks with handlers and the `with` blocks whose bodies hold `line`,
    innermost first, as (kind, items), of the function of `filename` that starts at
    `first` (its first decorator on 3.8+, or its `def`) and holds `line`; [] where the
    source cannot be read (3.6 and 3.7 give no end lines)."""
    return [(block[0], block[3]) for block in around(filename, first, line)]


def function_checks(filename: str, first: int, line: int) -> "tuple[list[Any], list[Any]]":
    """The checks and loops (`_checks`) of the function of `filename` that starts at
    `first` and holds `line`: ([], []) where the source cannot be read."""
    scope = _scope(filename, first, line, named_only=True)
    return scope[4] if scope is not None else ([], [])


def around(filename: str, first: int, line: int, headers: bool = False) -> "list[Any]":
    """`_blocks`, each block whole: ("with", first line of its body, last line, items,
    its own first line, [(first, last line, None or the called function's expression) of
    each check or call in its body], [(first, last line) of each loop in it], whether
    its `as` targets are plain names) or ("try",
    first line of its body, last, handlers' types, [(its `except` line, first and last
    line of its body) of each handler], (first, last line) of its `finally` or None,
    the statement's last line). With `headers`, a `with` whose own
    lines (its items) hold `line` is listed too."""
    best = _scope(filename, first, line)
    if best is None:
        return []
    found = [
        (b[1], b) for b in best[3] if (b[4] if headers and b[0] == "with" else b[1]) <= line <= b[2]
    ]
    found.sort(key=lambda pair: -pair[0])
    return [b for _, b in found]


def _scope(filename: str, first: int, line: int, named_only: bool = False) -> Any:
    """The innermost scope (`_scopes`) of `filename` that holds `line`, of those that
    start at `first` (or, unless `named_only`, of any where none does); None where
    there is none."""
    inside = [scope for scope in _source(filename)[0] if scope[0] <= line <= scope[1]]
    named = [scope for scope in inside if first in scope[2]]
    candidates = named if named_only else named or inside
    if not candidates:
        return None
    return max(candidates, key=lambda scope: (scope[0], -scope[1]))


def _scopes(filename: str) -> "tuple[list[Any], dict[str, Any]]":
    tree = source_tree(filename)
    imports: dict[str, Any] = {}
    if tree is None:
        return [], imports
    scopes: list[Any] = []
    module: Any = (1, 10**9, (1,), [], ([], []))
    scopes.append(module)
    todo = [(child, module) for child in tree.body]
    while todo:
        node, scope = todo.pop()
        kind = type(node).__name__
        if kind in ("FunctionDef", "AsyncFunctionDef", "Lambda"):
            decorators = [d.lineno for d in getattr(node, "decorator_list", ())]
            end = getattr(node, "end_lineno", None)
            if end is None:
                return [], imports
            body = node.body if type(node.body) is list else [node.body]  # (a lambda's)
            heads = (node.lineno, *decorators)
            scope = (min([node.lineno, *decorators]), end, heads, [], _checks(body))
            scopes.append(scope)
        elif kind in ("Try", "TryStar", "With", "AsyncWith") and node.body:
            last = getattr(node.body[-1], "end_lineno", None)
            if last is None:
                return [], imports
            if kind in ("With", "AsyncWith"):
                items = [item.context_expr for item in node.items]
                checks, loops = _checks(node.body)
                # whether its items' `as` targets are names (binding one cannot raise)
                plain = all(
                    type(i.optional_vars).__name__ in ("Name", "NoneType") for i in node.items
                )
                scope[3].append(
                    ("with", node.body[0].lineno, last, items, node.lineno, checks, loops, plain)
                )
            elif node.handlers or getattr(node, "finalbody", None):
                handlers = [handler.type for handler in node.handlers]
                spans = [
                    (handler.lineno, handler.body[0].lineno, _span(handler)[1])
                    for handler in node.handlers
                ]
                final = getattr(node, "finalbody", None)
                final_span = (final[0].lineno, _span(final[-1])[1]) if final else None
                end = _span(node)[1]
                scope[3].append(
                    ("try", node.body[0].lineno, last, handlers, spans, final_span, end)
                )
        elif kind == "ImportFrom":
            for alias in node.names:
                imports[alias.asname or alias.name] = (node.module or "", node.level or 0)
        for child in _children(node):
            todo.append((child, scope))
    return scopes, imports


def _span(node: Any) -> "tuple[int, int]":
    return (node.lineno, getattr(node, "end_lineno", None) or node.lineno)


def _checks(body: "list[Any]") -> "tuple[list[tuple[int, int, Any]], list[tuple[int, int]]]":
    """Where a block's body checks something, as (first line, last line, None): each
    `assert`, and each call of a function whose name begins with `assert` or `fail`
    (`self.assertEqual`, `pytest.fail`, `numpy.testing.assert_allclose`); and where it
    may (a helper of the suite's own is a check): each other call of a name or an
    attribute, as (first line, last line, the called expression). And the (first line,
    last line) of each loop in it (a check earlier in a loop runs again later)."""
    found: list[tuple[int, int, Any]] = []
    loops: list[tuple[int, int]] = []
    todo = list(body)
    while todo:
        node = todo.pop()
        kind = type(node).__name__
        if kind in ("For", "AsyncFor", "While"):
            loops.append(_span(node))
        if kind == "Assert":
            found.append((*_span(node), None))
        elif kind == "Call":
            func = node.func
            name = getattr(func, "attr", None) or getattr(func, "id", None) or ""
            if name.lower().startswith(("assert", "fail")):
                found.append((*_span(node), None))
            elif type(func).__name__ in ("Name", "Attribute"):
                found.append((*_span(node), func))
        todo.extend(_children(node))
    return found, loops


def _children(node: Any) -> "list[Any]":
    found: list[Any] = []
    for name in node._fields:
        value = getattr(node, name, None)
        if type(value) is list:
            found.extend(v for v in value if hasattr(v, "_fields"))
        elif hasattr(value, "_fields"):
            found.append(value)
    return found


_SIGNALLING = nested_codes(signal_failures)
