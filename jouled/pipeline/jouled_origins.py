"""Where code comes from, for the integrity monitor: the tree's, the patch's, or neither.

The second of the monitor's files (`jouled_monitor.py` says how they run). `Origins`
knows the tree, its protected files and the files the patch left as they were,
and judges code objects, functions, classes and values by the file they come
from; a test's function is judged layer by layer (`function_problems`) and
watched as it runs through its observer (`observer`).
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import functools as _functools
import hashlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_monitor import (
        EVENT,
        MAX_DYNAMIC,
        WATCHED,
        WATCHED_PREFIXES,
        _CodeType,
        read_setup,
    )

# -- where code comes from ------------------------------------------------------------------


class Origins:
    """Whether code, functions and other values were made by code the patch can change."""

    def __init__(self, root: str, protected: "frozenset[str]", unchanged: "dict[str, str]") -> None:
        self.root = root
        self.protected = protected
        self.unchanged = unchanged
        self.canaries: frozenset[str] = frozenset()  # the planted ones, as real paths
        self.rewritten: set[str] = set()  # test modules checked as pytest rewrote them
        self._files: dict[str, bool] = {}
        self.dynamic: dict[int, tuple[Any, str]] = {}
        self._classes: dict[int, tuple[Any, str]] = {}
        self.realpath = os.path.realpath
        self._modules = sys.modules
        # The interpreter's own directories (read-only in the sandbox, outside the tree):
        # names under them need no realpath (no link there can lead into the tree).
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        self.installed = tuple(
            real.rstrip(os.sep) + os.sep
            for real in (os.path.realpath(p) for p in prefixes if p)
            if not self.inside(real)
        )

    def is_protected(self, filename: str) -> bool:
        return not self.outside(filename) and self.realpath(filename) in self.protected

    def test_class(self, cls: Any) -> bool:
        """Whether `cls` is a unittest test case of the suite's own (its module's file is
        protected). Of its attributes only the audited ones (`__bases__`, its names) are
        refused to the patch as they are written; the rest is judged by what it holds
        (`machinery_problems`, `identity_problems`)."""
        case = self._modules.get("unittest.case")
        base = _MODULE_DICT(case).get("TestCase") if type(case) is type(sys) else None
        if base is None or not any(k is base for k in _TYPE_MRO(cls)):
            return False
        filename = _module_file(self._modules.get(_TYPE_DICT(cls).get("__module__")))
        return bool(filename) and self.is_protected(filename)

    def inside(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + os.sep)

    def outside(self, filename: str) -> bool:
        """Whether `filename` is surely outside the tree without resolving it."""
        return filename.startswith(self.installed)

    def trusted_file(self, filename: str) -> bool:
        """Code from `filename` is out of the patch's reach: outside the tree, or protected."""
        cached = self._files.get(filename)
        if cached is not None:
            return cached
        if filename.startswith("<"):
            verdict = True  # generated code: judged by who made it (`code_from_tree`)
        elif self.outside(filename):
            verdict = True
        else:
            path = self.realpath(filename)
            inside = path == self.root or path.startswith(self.root + os.sep)
            verdict = (not inside) or path in self.protected or path in self.unchanged
        if len(self._files) < 100000:
            self._files[filename] = verdict
        return verdict

    def compiled(self, filename: str, source: Any) -> None:
        """A tree file the patch left as it was is compiled: is its source still that?"""
        if filename.startswith("<"):
            return
        path = self.realpath(filename)
        want = self.unchanged.get(path)
        if want is None:
            return
        if type(source) not in (bytes, str):  # an AST (pytest's rewriting): read the file
            try:
                with open(path, "rb") as fh:
                    source = fh.read()
            except OSError:
                source = b""
        data = source.encode() if type(source) is str else source
        if _SHA256(data).hexdigest() != want:
            del self.unchanged[path]
            self._files.pop(filename, None)
            self._files.pop(path, None)

    def same_source(self, filename: str, source: Any) -> bool:
        """Whether `source` (bytes or text; anything else never) is the file's content."""
        if type(source) not in (bytes, str):
            return False
        try:
            with open(filename, "rb") as fh:
                data = fh.read()
        except OSError:
            return False
        if type(source) is bytes:
            return source == data
        return source == data.decode("utf-8", "replace") or source.encode() == data

    def same_code(self, code: Any) -> bool:
        """Whether `code` is what its file compiles to (compared by instructions, names
        and constants: compiler flags a caller passes on may differ)."""
        try:
            with open(code.co_filename, "rb") as fh:
                fresh = _COMPILE(fh.read(), code.co_filename, "exec", 0, True)
        except (OSError, SyntaxError, ValueError):
            return False
        return _alike(code, fresh)

    def real_file(self, filename: str) -> bool:
        return not filename.startswith("<")

    def mark_dynamic(self, code: Any, who: str) -> None:
        """Code the tree compiled itself (exec, eval, FunctionType): its functions are its."""
        todo = [code]
        while todo and len(self.dynamic) < MAX_DYNAMIC:
            current = todo.pop()
            self.dynamic[id(current)] = (current, who)
            todo.extend(c for c in current.co_consts if type(c) is _CodeType)

    def code_from_tree(self, code: Any) -> str:
        filename = code.co_filename
        if not self.trusted_file(filename):
            return filename
        if filename.startswith("<") and self.dynamic:
            made = self.dynamic.get(id(code))
            if made is not None and made[0] is code:
                return f"{filename} (code made by {made[1]})"
        return ""

    def function_from_tree(self, fn: Any) -> str:
        """The file of tree code behind a Python function, "" when it has none."""
        found = self.code_from_tree(_FUNC_CODE(fn))
        if found:
            return found
        closure = _FUNC_CLOSURE(fn)
        for cell in closure or ():
            try:
                inner = cell.cell_contents
            except ValueError:
                continue
            if type(inner) is _FunctionType:
                found = self.code_from_tree(_FUNC_CODE(inner))
                if found:
                    return found
        return ""

    def from_tree(self, value: Any, depth: int = 0) -> str:
        """Where tree code stands behind `value` (a file name), "" when nothing does.

        Functions by their code (and the functions in their closure), methods
        by their function, wrappers by what they wrap, classes by their methods
        and module, other objects by their class. Exact type checks only: no
        code of the value's own runs here.
        """
        kind = type(value)
        if kind is _FunctionType:
            return self.function_from_tree(value)
        if depth > 3:
            return ""
        if kind is _MethodType:
            return self.from_tree(_METHOD_FUNC(value), depth + 1)
        if kind is classmethod or kind is staticmethod:
            return self.from_tree(value.__func__, depth + 1)
        if kind is property:
            for part in (value.fget, value.fset, value.fdel):
                found = self.from_tree(part, depth + 1) if part is not None else ""
                if found:
                    return found
            return ""
        if kind is _Partial:
            return self.from_tree(value.func, depth + 1)
        if isinstance(kind, type) and issubclass(kind, type):
            return self.class_from_tree(value, depth)
        if kind in _PLAIN:
            return ""
        return self.class_from_tree(kind, depth)

    def class_from_tree(self, cls: Any, depth: int = 0) -> str:
        """A class by its module and methods; remembered (watched classes are snapshotted)."""
        known = self._classes.get(id(cls))
        if known is not None and known[0] is cls:
            return known[1]
        found = self._class_from_tree(cls, depth)
        if len(self._classes) < 100000:
            self._classes[id(cls)] = (cls, found)
        return found

    def _class_from_tree(self, cls: Any, depth: int = 0) -> str:
        namespace = _TYPE_DICT(cls)
        module_name = namespace.get("__module__")
        if type(module_name) is str:
            module = self._modules.get(module_name)
            filename = _module_file(module)
            if filename and not self.trusted_file(filename):
                return filename
        for item in namespace.values():
            if type(item) in (_FunctionType, classmethod, staticmethod, property):
                found = self.from_tree(item, depth + 1)
                if found:
                    return found
        return ""


_FunctionType = type(read_setup)
_MethodType = type(Origins(".", frozenset(), {}).trusted_file)
_SHA256 = hashlib.sha256
_Partial = type(__import__("functools").partial(int))
_FUNC_CODE = _FunctionType.__code__.__get__  # type: ignore[attr-defined]
_FUNC_CLOSURE = _FunctionType.__closure__.__get__  # type: ignore[attr-defined]
_FUNC_DICT = _FunctionType.__dict__["__dict__"].__get__  # type: ignore[index]
_METHOD_FUNC = _MethodType.__func__.__get__  # type: ignore[attr-defined]
_TYPE_DICT: Any = type.__dict__["__dict__"].__get__
_TYPE_MRO: Any = type.__dict__["__mro__"].__get__
_TYPE_QUALNAME: Any = type.__dict__["__qualname__"].__get__
_PLAIN = frozenset({type(None), bool, int, float, str, bytes, tuple, list, dict, set, frozenset})
_PLAIN |= {type(len), type([].append), type(sys), type(int.__add__), type(str.join)}


def _alike(a: Any, b: Any) -> bool:
    """Two code objects with the same instructions, names and constants, at any depth."""
    if a.co_code != b.co_code or a.co_names != b.co_names or len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts):  # noqa: B905 - Python 3.6 runs this too
        if type(x) is _CodeType and type(y) is _CodeType:
            if not _alike(x, y):
                return False
        elif type(x) is not type(y) or (type(x) is not _CodeType and x != y):
            return False
    return True


def _has_code(cls: Any) -> bool:
    """Whether a class defines behaviour in Python (a function, a property, a method
    wrapper): classes that define none (exceptions, warnings, the C syntax nodes) are
    not watched one by one."""
    return any(
        type(v) in (_FunctionType, classmethod, staticmethod, property)
        for v in _TYPE_DICT(cls).values()
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
    if test_id != holder["observed"]:
        return []
    problems = stand_in_problems(holder["function"], origins)
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
            break
        else:
            wrapped = _FUNC_DICT(layer).get("__wrapped__")
            cells = _FUNC_CLOSURE(layer) or ()
            if wrapped is None or not any(_held(cell) is wrapped for cell in cells):
                break
            layer = wrapped
    return layers


# What unittest calls on a test case to run it (and the async case's own).
MACHINERY = (
    "run",
    "__call__",
    "debug",
    "setUp",
    "tearDown",
    "_callTestMethod",
    "_callSetUp",
    "_callTearDown",
    "_callCleanup",
    "doCleanups",
    "_callAsync",
    "_callMaybeAsync",
    "_setupAsyncioRunner",
    "_setupAsyncioLoop",
)


def machinery_problems(cls: Any, origins: "Origins", instance: Any = None) -> "list[str]":
    """Why a test case class may not run its tests through unittest's machinery: what
    unittest calls on a test (`MACHINERY`), where a class of the suite's or a library's
    holds it, must be a function of that class's own file. Class attributes are written
    with no audit event, so a `run` or `_callTestMethod` put on a test class later (a
    builtin, unittest's own `run` past the runner's) is found by what it is."""
    problems: list[str] = []
    try:  # the test itself may not shadow any of it (its class's are what unittest runs)
        own = object.__getattribute__(instance, "__dict__") if instance is not None else {}
    except AttributeError:
        own = {}
    for name in MACHINERY:
        if type(own) is dict and name in own:
            problems.append(f"the test case's own {name} shadows its class's")
    for klass in _TYPE_MRO(cls):
        namespace = _TYPE_DICT(klass)
        module = namespace.get("__module__")
        if type(module) is not str or _top(module) in WATCHED:
            continue  # the frameworks' classes: compared whole at every check
        if module.startswith(WATCHED_PREFIXES):
            continue
        filename = _module_file(sys.modules.get(module))
        for name in MACHINERY:
            value = namespace.get(name)
            if value is None:
                continue
            inner = innermost(value)  # a decorated setUp runs its own def in the end
            code = _FUNC_CODE(inner) if inner is not None else None
            if code is None or not filename or not _same_file(code.co_filename, filename):
                label = _TYPE_QUALNAME(klass)
                problems.append(f"{label}.{name} of the test case is not its own file's code")
    return problems


def _same_file(a: str, b: str) -> bool:
    return a == b or os.path.realpath(a) == os.path.realpath(b)


def innermost(function: Any) -> Any:
    """What `function` runs in the end (`_layers`); None where that is no Python function."""
    last = _layers(function)[-1]
    return last if type(last) is _FunctionType else None


def identity_problems(function: Any, cls: Any, name: str, module: Any) -> "list[str]":
    """Why what runs as the test `name` (a method of `cls`, or a function of `module`
    where `cls` is None) is not the function its source defines under that name: where
    the class (or module) that holds the name binds it with a `def`, the function run
    in the end must be that def's (its file, name and line), not another test of the
    suite's standing in for it."""
    if cls is not None:
        owner = next((k for k in _TYPE_MRO(cls) if name in _TYPE_DICT(k)), None)
        if owner is None:
            return []
        module = sys.modules.get(_TYPE_DICT(owner).get("__module__"))
        qualname = _TYPE_QUALNAME(owner) + "." + name
    else:
        qualname = name
    filename = _module_file(module)
    span = _defined(filename, qualname) if filename else None
    inner = innermost(function)
    if span is None or type(inner) is not _FunctionType:
        return []
    if _FUNC_DICT(inner).get("__wrapped__") is not None:
        # A wrapper that names what it does not hold (unittest's skip_wrapper raises
        # SkipTest and never calls the test): judged if it is ever reported passed.
        return []
    code = _FUNC_CODE(inner)
    first, line = span
    if (
        code.co_name == name.rpartition(".")[2]
        and first <= code.co_firstlineno <= line
        and _same_file(code.co_filename, filename)
    ):
        return []
    return [
        f"the test {qualname} runs {code.co_name} of {code.co_filename}:"
        f"{code.co_firstlineno}, not the function its file defines"
    ]


_DEFINED: "dict[str, dict[str, tuple[int, int]]]" = {}


def _defined(filename: str, qualname: str) -> "tuple[int, int] | None":
    """(first line, `def` line) of the function a source file defines at `qualname`
    (a top-level function, or a method of a class, nested classes dotted)."""
    table = _DEFINED.get(filename)
    if table is None:
        table = {}
        try:
            with open(filename, "rb") as fh:
                tree = _COMPILE(fh.read(), filename, "exec", _ONLY_AST)
        except (OSError, SyntaxError, ValueError):
            tree = None
        todo = [("", node) for node in (tree.body if tree is not None else [])]
        while todo:
            prefix, node = todo.pop()
            kind = type(node).__name__
            if kind in ("FunctionDef", "AsyncFunctionDef"):
                decorators = [d.lineno for d in node.decorator_list]
                table[prefix + node.name] = (min([node.lineno, *decorators]), node.lineno)
            elif kind == "ClassDef":
                todo.extend((f"{prefix}{node.name}.", child) for child in node.body)
        if len(_DEFINED) < 10000:
            _DEFINED[filename] = table
    return table.get(qualname)


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


def _held(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _module_file(module: Any) -> str:
    if type(module) is not type(sys):
        return ""
    filename = _MODULE_DICT(module).get("__file__")
    return filename if type(filename) is str else ""


_MODULE_DICT: Any = type(sys).__dict__["__dict__"].__get__  # type: ignore[index]


def initializing(name: str) -> bool:
    """Whether the module of this name is being imported right now (its body running)."""
    module = sys.modules.get(name)
    spec = _MODULE_DICT(module).get("__spec__") if type(module) is type(sys) else None
    return getattr(spec, "_initializing", False) is True


def _top(name: str) -> str:
    return name.partition(".")[0]


def nested_codes(function: Any) -> "tuple[Any, ...]":
    """The code of every function defined inside `function`, at any depth."""
    found, todo = [], list(function.__code__.co_consts)
    while todo:
        const = todo.pop()
        if type(const) is _CodeType:
            found.append(const)
            todo.extend(const.co_consts)
    return tuple(found)


def observer(audit: Any, function: Any, test_id: str) -> Any:
    """`function` wrapped to tell the monitor (through `audit`) how each call of it ended:
    the name of what it raised, or "" when it returned; a coroutine function's observer
    is one too, and hears how the coroutine ended, not the event loop that runs it."""

    if _iscoroutinefunction(function):

        @_functools.wraps(function)
        async def observed_coroutine(*args: Any, **kwargs: Any) -> Any:
            try:
                result = await function(*args, **kwargs)
            except BaseException as raised:
                audit(EVENT, "ran", test_id, _raised(raised))
                raise
            audit(EVENT, "ran", test_id, "")
            return result

        return observed_coroutine

    @_functools.wraps(function)
    def observed(*args: Any, **kwargs: Any) -> Any:
        try:
            result = function(*args, **kwargs)
        except BaseException as raised:
            audit(EVENT, "ran", test_id, _raised(raised))
            raise
        audit(EVENT, "ran", test_id, "")
        return result

    return observed


_TYPE_NAME = type.__dict__["__name__"].__get__
_types = __import__("types")


def _raised(raised: BaseException) -> str:
    """What a test raised, by its class's own name (a metaclass cannot answer for it);
    never "" (a return)."""
    named = _TYPE_NAME(type(raised))
    return named if type(named) is str and named else "an exception"


_iscoroutinefunction = __import__("inspect").iscoroutinefunction
_COMPILE = compile
_ONLY_AST = 0x400


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
