"""What a test case holds, for the integrity monitor.

The fourth of the monitor's files (`jouled_monitor.py` says how they run). A test is
judged with what its case holds: unittest's machinery and the frameworks' assertions
(`machinery_problems`), the equality functions `assertEqual` calls, the function run
as the test (`identity_problems`: the `def` its file defines under the test's name)
and the object it is bound to (`binding_problems`: the test case itself). Each must
be the suite's own or the framework's, so that a test case cannot be made to judge
nothing.
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_observe import _TYPE_NAME, _layers, innermost
    from jouled.pipeline.jouled_origins import (
        _COMPILE,
        _FUNC_CLOSURE,
        _FUNC_CODE,
        _FUNC_DICT,
        _ONLY_AST,
        _TYPE_DICT,
        _TYPE_MRO,
        _TYPE_QUALNAME,
        Origins,
        _FunctionType,
        _held,
        _MethodType,
        _module_file,
        _Partial,
        framework_module,
    )
    from jouled.pipeline.jouled_sealed import read_source


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
    """Why a test case may not run its test through unittest's machinery and assertions as
    its frameworks define them: what unittest calls on a test (`MACHINERY`) and every
    function a framework class of the test case defines (its assertions), where a class of
    the suite's or a library's holds it, must be a function of that class's own file (or
    the framework's own function a deprecated alias stands for; what only prepares the
    test, `_PREPARING`, any function the patch did not write). Class attributes are
    written with no audit event, so an `assertEqual` or `run` put on a test class later (a
    mock, a builtin, another assertion) is found by what it is. The test itself may not
    shadow any of them, its method name is a plain str, and its equality functions are
    unittest's own or the suite's."""
    problems: list[str] = []
    frameworks: dict[str, Any] = {}  # name -> the framework's function there
    suites = []
    for klass in _TYPE_MRO(cls):
        namespace = _TYPE_DICT(klass)
        if not _framework_class(namespace):
            suites.append((klass, namespace))
            continue
        for name, value in list(namespace.items()):
            if name not in frameworks and type(value) in _FUNCTIONS:
                frameworks[name] = value
    try:
        own = object.__getattribute__(instance, "__dict__") if instance is not None else {}
    except AttributeError:
        own = {}
    if type(own) is dict:
        for name in list(own):
            if name in MACHINERY or name in frameworks:
                problems.append(f"the test case's own {name} shadows its class's")
        named = own.get("_testMethodName")
        if named is not None and type(named) is not str:
            problems.append(f"the test's method name is a {_TYPE_NAME(type(named))}, not a str")
        problems += _equality_problems(own.get("_type_equality_funcs"), suites, frameworks, origins)
    for klass, namespace in suites:
        filename = _module_file(sys.modules.get(namespace.get("__module__")))
        for name, value in list(namespace.items()):
            if name not in MACHINERY and name not in frameworks:
                continue
            if type(value) in (classmethod, staticmethod):
                value = value.__func__
            inner = innermost(value)  # a decorated setUp runs its own def in the end
            code = _FUNC_CODE(inner) if inner is not None else None
            if code is not None and filename and _same_file(code.co_filename, filename):
                continue
            if inner is not None and inner in _aliased(frameworks.get(name)):
                continue
            if name in _PREPARING and inner is not None and not origins.function_from_tree(inner):
                continue  # a library's class decorator around setUp (Django's isolate_apps)
            label = _TYPE_QUALNAME(klass)
            problems.append(f"{label}.{name} of the test case is not its own file's code")
    return problems


_FUNCTIONS = (_FunctionType, classmethod, staticmethod)
# What only prepares a test and cleans up after it (it never runs the test, nor judges
# it): any function the patch did not write may stand there.
_PREPARING = ("setUp", "tearDown", "setUpClass", "tearDownClass", "setUpTestData")
# unittest's own equality functions, by the builtin type they compare.
_EQUALITY = (
    (dict, "assertDictEqual"),
    (list, "assertListEqual"),
    (tuple, "assertTupleEqual"),
    (set, "assertSetEqual"),
    (frozenset, "assertSetEqual"),
    (str, "assertMultiLineEqual"),
)


def _framework_class(namespace: Any) -> bool:
    """Whether a class is a test framework's (compared whole at every check)."""
    module = namespace.get("__module__")
    return type(module) is not str or framework_module(module)


def _aliased(function: Any) -> "tuple[Any, ...]":
    """A framework's function and, where it is a deprecated alias (unittest's
    `assertEquals`), the function it stands for: what a suite may put under its name."""
    if type(function) is not _FunctionType:
        return ()
    held = [_held(cell) for cell in _FUNC_CLOSURE(function) or ()]
    if _FUNC_CODE(function).co_name == "deprecated_func":
        return (function, *[h for h in held if type(h) is _FunctionType])
    return (function,)


def _equality_problems(
    funcs: Any, suites: "list[Any]", frameworks: "dict[str, Any]", origins: "Origins"
) -> "list[str]":
    """Why a test case's equality functions (what `assertEqual` calls for a type) are not
    unittest's own or the suite's: another assertion or a callable that checks nothing
    makes `assertEqual` vacuous."""
    if funcs is None:
        return []
    if type(funcs) is not dict:
        return ["the test case's equality functions are not a dict"]
    problems = []
    for key, value in list(funcs.items()):
        if type(value) is str:
            if any(key is kind and name == value for kind, name in _EQUALITY):
                continue
            value = next((n[value] for _, n in suites if value in n), None)
        inner = innermost(value) if value is not None else None
        code = _FUNC_CODE(inner) if inner is not None else None
        if code is None or origins.code_from_tree(code):
            suite = False
        else:
            suite = origins.inside(origins.realpath(code.co_filename))
        if not suite:
            named = _TYPE_NAME(key) if type(key) is type else "a value"
            problems.append(f"the test case's equality function for {named} is not the suite's")
    return problems


def _same_file(a: str, b: str) -> bool:
    return a == b or os.path.realpath(a) == os.path.realpath(b)


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


_METHOD_SELF = _MethodType.__self__.__get__  # type: ignore[attr-defined]


def binding_problems(function: Any, instance: Any) -> "list[str]":
    """Why the test's own function is not called with the test's own arguments: a method
    on the way to it must be bound to the test case (`instance`; None for a test function)
    and no partial on the way may bind arguments. A `self` that is not the test case (an
    object of the standard library's that answers every assertion method) checks nothing."""
    for layer in _layers(function):
        bound = _METHOD_SELF(layer) if type(layer) is _MethodType else instance
        if bound is not instance:
            return [f"the test runs bound to a {_TYPE_NAME(type(bound))}, not the test case"]
        if type(layer) is _Partial and (layer.args or layer.keywords):
            return ["the test runs with arguments a partial binds, not the test case's"]
    return []


def source_tree(filename: str) -> Any:
    """The syntax tree of a source file, None where it cannot be read or parsed."""
    try:
        return _COMPILE(read_source(filename), filename, "exec", _ONLY_AST)
    except (OSError, SyntaxError, ValueError):
        return None


_DEFINED: "dict[str, dict[str, tuple[int, int]]]" = {}


def _defined(filename: str, qualname: str) -> "tuple[int, int] | None":
    """(first line, `def` line) of the function a source file defines at `qualname`
    (a top-level function, or a method of a class, nested classes dotted)."""
    table = _DEFINED.get(filename)
    if table is None:
        table = {}
        tree = source_tree(filename)
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
