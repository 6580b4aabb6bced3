"""Where code comes from, for the integrity monitor: the tree's, the patch's, or neither.

The second of the monitor's files (`jouled_monitor.py` says how they run). `Origins`
knows the tree, its protected files and the files the patch left as they were,
and judges code objects, functions, classes and values by the file they come
from (what runs as a test, and how it ended, is `jouled_observe.py`'s).
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import hashlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_monitor import (
        MAX_DYNAMIC,
        WATCHED,
        WATCHED_PREFIXES,
        _CodeType,
        read_setup,
    )
    from jouled.pipeline.jouled_sealed import read_source

# -- where code comes from ------------------------------------------------------------------


class Origins:
    """Whether code, functions and other values were made by code the patch can change."""

    def __init__(self, root: str, protected: "frozenset[str]", unchanged: "dict[str, str]") -> None:
        self.root = root
        self.protected = protected
        self.unchanged = unchanged
        self.canaries: frozenset[str] = frozenset()  # the planted ones, as real paths
        self.rewritten: set[str] = set()  # test modules checked as pytest rewrote them
        self.reclassed: set[int] = set()  # ids of objects the patch's code gave a class
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
                source = read_source(path)
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
            data = read_source(filename)
        except OSError:
            return False
        if type(source) is bytes:
            return source == data
        return source == data.decode("utf-8", "replace") or source.encode() == data

    def same_code(self, code: Any) -> bool:
        """Whether `code` is what its file compiles to (compared by instructions, names
        and constants: compiler flags a caller passes on may differ)."""
        try:
            fresh = _COMPILE(read_source(code.co_filename), code.co_filename, "exec", 0, True)
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
_COMPILE = compile
_ONLY_AST = 0x400
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


def framework_module(name: Any) -> bool:
    """Whether a module of this name is a test framework's (`WATCHED`, `WATCHED_PREFIXES`)."""
    return type(name) is str and (_top(name) in WATCHED or name.startswith(WATCHED_PREFIXES))


def nested_codes(function: Any) -> "tuple[Any, ...]":
    """The code of every function defined inside `function`, at any depth."""
    found, todo = [], list(function.__code__.co_consts)
    while todo:
        const = todo.pop()
        if type(const) is _CodeType:
            found.append(const)
            todo.extend(const.co_consts)
    return tuple(found)
