"""The integrity monitor of the daemon's test runners: runs in the sandbox, imports no jouled.

The boot code of a graded run executes this file and then a runner's
(`jouled_pytest.py`, `jouled_unittest.py`, `jouled_sympy.py`) into one namespace with `exec`:
neither is ever a module (no name in `sys.modules`), and their directory is
never on `sys.path`. The run's setup arrives on fd 3 (a 32-byte key, then
where the tree is and the canary test files) and the descriptor is closed
before any code of the tree runs. Records go to the daemon on fd 4, one line
each, authenticated with the key.

`start` installs the monitor (Python 3.8+: a PEP 578 audit hook, which cannot
be removed once added) before the test framework is imported. It is the only
holder of the key and the only writer of records. The runner reports through
`sys.audit`; the monitor takes a record only from the runner's own code,
called through code the patch did not write (every frame between the runner
and its `main`), and only after checking that nothing the framework computes
outcomes with was changed by such code:

- the runner's own namespace and classes, and the builtins it calls, compared
  first, with functions bound at start;
- the module globals of pytest, pluggy, unittest, `ast`, `django.test`,
  SymPy's test runner and the builtins, and the attributes of their classes that define behaviour in
  Python, taken when the run arms and compared at every call reported passed
  and at the end (a value may change only to one made by code the patch did
  not write);
- the test modules: what their source binds stays bound, nothing their source
  never binds comes from the patch, their builtins are Python's; pytest's
  rewriting of them is checked as it runs;
- what the runner adds (`checks`, `item_check`): pytest's hook registry,
  the running test's function and item;
- the test function's own word, through its observer (`observer`), on
  whether it ran and how it ended: a call reported passed must not have
  raised (and, where pytest surely calls the observer, must have run).

It refuses, and records as tampering, what a test suite does not need and a
forger does: walking the object graph (`gc.get_objects`, `get_referrers`,
`get_referents`), reading process memory (`/proc/*/mem`, `ctypes` by
address), trace, profile and monitoring callbacks, new audit hooks, writing
the code, defaults or class of a function or class the patch did not write,
compiling, unmarshalling, remaking or running code that claims a file the
patch did not write unless it is that file's code, and writing bytecode. Anything refused or found
is a `tamper` record, which the daemon signs as `tampered`.

"Code the patch did not write" is code from outside the tree (the standard
library, installed packages: read-only in the sandbox), from the protected
files (pristine tests), or from tree files the patch left as they were
(`trusted.json` lists them with their hashes; a file whose source no longer
matches when it is compiled is the patch's from then on). Code the tree
compiles itself (`exec`, `eval`) is the tree's.

Without audit hooks (Python < 3.8) the runner's records are written by a
closure after the same checks, which code in the process can defeat; the
start record says which level applied (`monitor` or `reduced`).
"""

# No `from __future__ import annotations` (Python 3.7+), no walrus, no
# `str.removeprefix`, and every annotation naming a generic is a string: the
# environments of old SWE-bench instances (Python 3.6) run this file too.

import _thread
import functools as _functools
import hashlib
import hmac
import json
import os
import sys
from typing import Any

SETUP_FD, REPORT_FD = 3, 4
EVENT = "jouled.runner"
KEY_BYTES = 32

# Top-level packages whose code computes, carries or writes test outcomes.
WATCHED = frozenset(
    {"pytest", "_pytest", "pluggy", "unittest", "py", "iniconfig", "builtins", "ast"}
)
# Modules of the tree's own that run its tests (Django's test framework, SymPy's test
# runner and its test helpers): watched the same way, their own files' code taken as
# their content; a function or class their source defines may not be the patch's.
WATCHED_PREFIXES = (
    "django.test",
    "sympy.testing.runtests",
    "sympy.testing.pytest",
    "sympy.utilities.runtests",
    "sympy.utilities.pytest",
)
# `sys` attributes the frameworks' reporting reads.
SYS_WATCHED = (
    "exc_info",
    "exception",
    "excepthook",
    "exit",
    "audit",
    "addaudithook",
    "settrace",
    "setprofile",
    "_getframe",
    "modules",
    "meta_path",
    "path_hooks",
)
REFUSED = frozenset(
    {
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys._current_frames",
        "sys.addaudithook",
        "ctypes.string_at",
        "ctypes.wstring_at",
        "ctypes.cdata",
        "sys.monitoring.register_callback",
    }
)
TRACING = frozenset(
    {
        "sys.settrace",
        "sys.setprofile",
        "sys._settraceallthreads",
        "sys._setprofileallthreads",
        "threading.settrace",
        "threading.setprofile",
        "threading.settrace_all_threads",
        "threading.setprofile_all_threads",
    }
)
MEMORY_FILES = ("/dev/mem", "/dev/kmem", "/proc/kcore")
# Extension modules that hand Python code the process's memory (a foreign-function
# interface, CPython's C-API test modules): never loaded while a run is graded.
MEMORY_MODULES = frozenset(
    {
        "_ctypes",
        "_ctypes_test",
        "_cffi_backend",
        "_testcapi",
        "_testinternalcapi",
        "_testlimitedcapi",
        "_testmultiphase",
        "_testsinglephase",
        "_testbuffer",
        "_testclinic",
        "_testclinic_limited",
        "_testexternalinspection",
        "_testimportmultiple",
        "_xxtestfuzz",
    }
)
# The import system's functions that read bytecode: their locals name the file or loader.
BYTECODE_READERS = frozenset({"_compile_bytecode", "get_code", "_unmarshal_code"})
# Where a memory module's own package asks for it on its importer's behalf.
MEMORY_PACKAGES = ("/ctypes/", "/cffi/")
MAX_DYNAMIC = 200000  # code objects the tree compiled, remembered to judge its functions by
SPECIAL_WRITES = frozenset(
    {"__code__", "__defaults__", "__kwdefaults__", "__class__", "__bases__", "__globals__"}
)


class Refused(RuntimeError):
    """What the monitor raises for an operation it refuses (a RuntimeError, as PEP 578 asks)."""


class Withheld(ImportError):
    """What an import of a memory module gets in a graded run when nothing of the patch's
    asked for it: an ImportError, so an importer that can do without it (NumPy can) goes on.
    Once loaded by anyone, such a module is every line's, the patch's included, with no
    event left to refuse."""


# -- the setup ------------------------------------------------------------------------------


def _read_exact(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def read_setup() -> "tuple[bytes, dict[str, Any]]":
    """The run key and the setup document from fd 3, which is closed after."""
    key = _read_exact(SETUP_FD, KEY_BYTES)
    size = int.from_bytes(_read_exact(SETUP_FD, 4), "big")
    body = _read_exact(SETUP_FD, size)
    os.close(SETUP_FD)
    if len(key) != KEY_BYTES or len(body) != size:
        raise SystemExit("jouled runner: no run setup on fd 3")
    return key, json.loads(body.decode())


def load_trusted(ro: str, root: str, extra: "list[str]") -> "tuple[frozenset[str], dict[str, str]]":
    """(protected files, tree files the patch left as they were -> sha256), as real paths.

    `extra` are protected files not listed in the run's `trusted.json` (the canaries).
    """
    try:
        with open(os.path.join(ro, "trusted.json")) as fh:
            listing = json.load(fh)
    except (OSError, ValueError):
        listing = {}
    real = os.path.realpath
    protected = [*listing.get("protected", []), *extra]
    unchanged = listing.get("unchanged", {})
    return (
        frozenset(real(os.path.join(root, rel)) for rel in protected),
        {real(os.path.join(root, rel)): digest for rel, digest in unchanged.items()},
    )


# -- where code comes from ------------------------------------------------------------------


class Origins:
    """Whether code, functions and other values were made by code the patch can change."""

    def __init__(self, root: str, protected: "frozenset[str]", unchanged: "dict[str, str]") -> None:
        self.root = root
        self.protected = protected
        self.unchanged = unchanged
        self.canaries: "frozenset[str]" = frozenset()  # the planted ones, as real paths
        self.rewritten: "set[str]" = set()  # test modules checked as pytest rewrote them
        self._files: "dict[str, bool]" = {}
        self.dynamic: "dict[int, tuple[Any, str]]" = {}
        self._classes: "dict[int, tuple[Any, str]]" = {}
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
_METHOD_FUNC = _MethodType.__func__.__get__  # type: ignore[attr-defined]
_TYPE_DICT: Any = type.__dict__["__dict__"].__get__
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


# -- what may not change --------------------------------------------------------------------


class Snapshot:
    """Namespaces outcomes depend on, by the identity of every value they held at arming.

    `check` names what changed to a value tree code made; changes to values
    made elsewhere (pytest setting its own state) are taken into the snapshot.
    Protected test modules are held stricter: what their source binds must
    stay bound, and a value from the tree under a name their source never
    binds was put there by someone else.
    """

    def __init__(self, origins: Origins) -> None:
        self.origins = origins
        self.entries: "list[list[Any]]" = []  # [label, namespace, keys, ids, strict]
        self.seen_modules: "dict[str, Any]" = {}
        self.module_count = -1
        self.classes: "dict[tuple[str, str], Any]" = {}
        self.test_modules: "dict[str, Any]" = {}
        self.sys_values: "list[Any]" = []
        self.last: "list[Any]" = []
        self.fresh: "list[tuple[str, Any, str]]" = []  # test modules not yet compared
        self.deep = True
        self.offsets: "list[int]" = []
        self.entries_seen = 0

    def add(self, label: str, namespace: Any, strict: bool = False) -> None:
        self.entries.append([label, namespace, list(namespace), list(namespace.values()), strict])

    def arm(self, problems: "list[str]", deep: bool) -> None:
        """Take the watched namespaces as they are; `deep`: also judge every value in them
        (needed only when code of the tree ran before this: a plugin the configuration loads)."""
        self.deep = deep
        self.scan_modules(problems)
        self.deep = True
        self.sys_values = self._sys_values()

    def _sys_values(self) -> "list[Any]":
        namespace = _MODULE_DICT(sys)
        return [namespace.get(name) for name in SYS_WATCHED]

    def scan_modules(self, problems: "list[str]") -> None:
        """Take in modules loaded since the last scan: watched ones and the test modules."""
        modules = sys.modules
        if len(modules) == self.module_count:
            return
        self.module_count = len(modules)
        for name, module in list(modules.items()):
            if self.seen_modules.get(name) is module or type(module) is not type(sys):
                continue
            self.seen_modules[name] = module
            filename = _module_file(module)
            if _top(name) in WATCHED:
                self._take_module(name, module, problems)
            elif name.startswith(WATCHED_PREFIXES):  # the tree's: it may import patched code
                self._take_module(name, module, problems, defined_names(filename))
            elif (
                filename
                and not self.origins.outside(filename)
                and self.origins.realpath(filename) in self.origins.protected
            ):
                self._take_test_module(name, module, filename, problems)

    def _loader(self, label: str, namespace: Any, problems: "list[str]") -> None:
        loader = namespace.get("__loader__")
        found = self.origins.from_tree(loader) if loader is not None else ""
        if found:
            problems.append(f"{label} was loaded by an import hook from {found}")

    def _take_module(
        self, name: str, module: Any, problems: "list[str]", judged: Any = None
    ) -> None:
        """Watch a module; `judged`: the only names whose values are judged (the ones a
        module of the tree defines itself: what it imports may be the patch's)."""
        namespace = _MODULE_DICT(module)
        self._loader(f"module {name}", namespace, problems)
        own = _module_file(module)
        items = list(namespace.items())
        if self.deep:
            for attr, value in items:
                found = self.origins.from_tree(value)
                if judged is not None and attr not in judged:
                    found = ""
                if found and found != own:  # what a module's own file defines is its content
                    problems.append(f"{name}.{attr} holds code from {found}")
        if name != "builtins":
            for attr, value in items:
                if (
                    isinstance(value, type)
                    and self.classes.get((name, attr)) is not value
                    and _TYPE_DICT(value).get("__module__") == name
                    and _has_code(value)
                ):
                    self.classes[(name, attr)] = value
                    self._take_class(f"{name}.{attr}", value, problems, own=own)
        self.add(name, namespace)

    def _take_class(
        self, label: str, cls: Any, problems: "list[str]", strict: bool = False, own: str = ""
    ) -> None:
        namespace = _TYPE_DICT(cls)
        for attr, value in list(namespace.items()) if self.deep or strict else ():
            found = self.origins.from_tree(value)
            if found and found != own:
                problems.append(f"{label}.{attr} holds code from {found}")
        self.add(label, namespace, strict)

    def _take_test_module(
        self, name: str, module: Any, filename: str, problems: "list[str]"
    ) -> None:
        namespace = _MODULE_DICT(module)
        self._loader(f"test module {name}", namespace, problems)
        builtins_ = namespace.get("__builtins__")
        if builtins_ is not _BUILTINS and builtins_ is not _MODULE_DICT(_BUILTINS):
            problems.append(f"test module {name} runs with builtins other than Python's")
        bound, star = source_names(filename)
        own = {}
        for attr, value in list(namespace.items()):
            found = self.origins.from_tree(value)
            if not found:
                own[attr] = value
            elif attr not in bound and not star and not attr.startswith("@"):
                problems.append(
                    f"test module {name} holds {attr} from {found}, which its source never binds"
                )
            if isinstance(value, type) and _TYPE_DICT(value).get("__module__") == name:
                self._take_class(f"{name}.{attr}", value, problems, strict=True)
        self.test_modules[name] = (name, namespace, own)
        self.fresh.append((name, module, filename))

    def fingerprint(self) -> "list[Any]":
        """Every watched value and each namespace's size, in a few passes of C code (no
        `id`: it is audited); names are compared when a namespace changed."""
        namespaces = [entry[1] for entry in self.entries]
        sizes = list(map(len, namespaces))
        self.offsets = list(_accumulate([0, *sizes]))
        namespaces += [entry[1] for entry in self.test_modules.values()]
        values = list(_chain(map(_VALUES, namespaces)))
        values += map(len, namespaces)
        sys_namespace = _MODULE_DICT(sys)
        values += [sys_namespace.get(name) for name in SYS_WATCHED]
        return values

    def check(self, problems: "list[str]", scan: bool = True) -> None:
        """What changed since the last check; `scan`: take in modules loaded since too
        (never in the middle of an import, whose module is not whole yet)."""
        if scan:
            self.scan_modules(problems)
        offsets, seen, last = self.offsets, self.entries_seen, self.last
        now = self.fingerprint()
        changed = None
        if len(now) == len(last) and len(self.entries) == seen:
            # The namespaces whose values moved (their sizes are equal, or `now` would not
            # be as long): found by position in one pass of C code, so pytest's own
            # per-test state (the assertion plugin's hooks, set and reset around every
            # test) costs little.
            moved = list(_compress(_COUNT(), map(_NOT_IS, now, last)))
            if not moved:
                return
            changed = sorted({_bisect(self.offsets, i) - 1 for i in moved})
        elif 0 < seen < len(self.entries) and self.offsets[: seen + 1] == offsets[: seen + 1]:
            # Namespaces taken in since the last check (judged as they were taken) after
            # the others, whose sizes held: those compared by position as above.
            end = offsets[seen]
            moved = list(_compress(_COUNT(), map(_NOT_IS, now[:end], last[:end])))
            changed = sorted({_bisect(self.offsets, i) - 1 for i in moved})
        self._full(problems, changed)
        # What was compared is what is now: nothing of the tree's runs in a check.
        self.last = now
        self.entries_seen = len(self.entries)

    def _full(self, problems: "list[str]", changed: "list[int] | None" = None) -> None:
        entries = self.entries
        if changed is not None:
            entries = [entries[i] for i in changed if 0 <= i < len(entries)]
        for entry in entries:
            label, namespace, keys, values, strict = entry
            now_values = list(namespace.values())
            if same(now_values, values) and len(namespace) == len(keys):
                continue
            now_keys = list(namespace)
            before = dict(zip(keys, values))  # noqa: B905 - Python 3.6 runs this too
            for attr in now_keys:
                value = namespace.get(attr)
                if before.get(attr, _MISSING) is value:
                    continue
                found = self.origins.from_tree(value)
                if found:
                    problems.append(f"{label}.{attr} was replaced by code from {found}")
                elif label == "builtins" and isinstance(before.get(attr), type):
                    # A builtin class (an exception the framework raises or catches) stands
                    # for itself: whatever claims to have made its replacement.
                    problems.append(f"builtins.{attr}, a class, was replaced")
                elif strict and attr in before:
                    problems.append(f"{label}.{attr} was replaced")
            if strict:
                gone = [attr for attr in keys if attr not in namespace]
                if gone:
                    problems.append(f"{label}.{gone[0]} was deleted")
            entry[2], entry[3] = now_keys, now_values
        for name, namespace, own in self.test_modules.values():
            for attr, value in own.items():
                if namespace.get(attr, _MISSING) is not value:
                    problems.append(f"{name}.{attr}, bound by the test module, was rebound")
        now = self._sys_values()
        if not same(now, self.sys_values):
            current = _MODULE_DICT(sys)
            for name, was, is_ in zip(SYS_WATCHED, self.sys_values, now):  # noqa: B905
                if was is not is_:
                    found = self.origins.from_tree(current.get(name))
                    if found or name == "modules":
                        problems.append(
                            f"sys.{name} was replaced{' by code from ' + found if found else ''}"
                        )
            self.sys_values = now


_MISSING = object()
_chain = __import__("itertools").chain.from_iterable
_IS = __import__("operator").is_
_NOT_IS = __import__("operator").is_not
_compress = __import__("itertools").compress
_COUNT = __import__("itertools").count
_accumulate = __import__("itertools").accumulate
_bisect = __import__("bisect").bisect_right


def same(now: "list[Any]", before: "list[Any]") -> bool:
    """Whether two lists hold the very same objects (identity only: no `__eq__` of theirs runs)."""
    return len(now) == len(before) and all(map(_IS, now, before))


_VALUES = __import__("operator").methodcaller("values")
_BUILTINS = sys.modules["builtins"]


def source_names(filename: str) -> "tuple[frozenset[str], bool]":
    """The names a module's source binds at its top level (or declares global), and
    whether it star-imports (which binds names the source does not spell).

    Only statements and their binding targets are walked, never expressions at
    large (a test module's parameter tables can be most of it); function and
    class bodies only for `global`, and only when the source says `global`.
    """
    try:
        with open(filename, "rb") as fh:
            source = fh.read()
        tree = _COMPILE(source, filename, "exec", _ONLY_AST)
    except (OSError, SyntaxError, ValueError):
        return frozenset(), True
    says_global = b"global" in source
    names: "set[str]" = set()
    star = False
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        kind = type(node).__name__
        if kind in ("Import", "ImportFrom"):
            for alias in node.names:
                if alias.name == "*":
                    star = True
                names.add((alias.asname or alias.name).partition(".")[0])
        elif kind in ("FunctionDef", "AsyncFunctionDef", "ClassDef"):
            names.add(node.name)
            if says_global:
                todo.extend(_globals_in(node))
        elif kind == "Global":
            names.update(node.names)
        elif kind == "Name":
            names.add(node.id)
        elif kind in ("Tuple", "List", "Starred"):
            todo.extend(_children(node))
        elif kind in ("Assign", "AnnAssign", "AugAssign", "For", "AsyncFor"):
            targets = node.targets if kind == "Assign" else [node.target]
            todo.extend(targets)
            todo.extend(getattr(node, "body", []) + getattr(node, "orelse", []))
        elif kind in ("With", "AsyncWith"):
            todo.extend(i.optional_vars for i in node.items if i.optional_vars is not None)
            todo.extend(node.body)
        elif kind in ("If", "While", "Try", "TryStar"):
            todo.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                if handler.name:
                    names.add(handler.name)
                todo.extend(handler.body)
        elif kind == "Expr" and type(node.value).__name__ == "NamedExpr":
            todo.append(node.value.target)
        elif kind == "Match":
            star = True  # pattern captures bind names in too many shapes to follow
    return frozenset(names), star


def defined_names(filename: str) -> "frozenset[str]":
    """The functions and classes a module's source defines at its top level (or under a
    top-level `if` or `try`)."""
    try:
        with open(filename, "rb") as fh:
            tree = _COMPILE(fh.read(), filename, "exec", _ONLY_AST)
    except (OSError, SyntaxError, ValueError, TypeError):
        return frozenset()
    names: "set[str]" = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        kind = type(node).__name__
        if kind in ("FunctionDef", "AsyncFunctionDef", "ClassDef"):
            names.add(node.name)
        elif kind in ("If", "Try", "TryStar"):
            todo.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)
    return frozenset(names)


def _children(node: Any) -> "list[Any]":
    """The syntax nodes directly under `node`."""
    found: "list[Any]" = []
    for field in getattr(node, "_fields", ()):
        value = getattr(node, field, None)
        if isinstance(value, list):
            found.extend(v for v in value if hasattr(v, "_fields"))
        elif hasattr(value, "_fields"):
            found.append(value)
    return found


def _globals_in(node: Any) -> "list[Any]":
    """The `global` statements anywhere inside a function or class body."""
    found, todo = [], [node]
    while todo:
        current = todo.pop()
        if type(current).__name__ == "Global":
            found.append(current)
        todo.extend(_children(current))
    return found


class Machinery:
    """The import system's own code that makes a module's code from its file, as it was
    before any code of the tree ran: its two frozen modules' namespaces, the modules they
    read and unmarshal with, `compile`, and the classes of its loaders for source and
    bytecode files. None of it is audited as it changes (module and class attributes are
    written without an event), so each is compared by identity where it is relied on."""

    MODULES = (
        "_frozen_importlib",
        "_frozen_importlib_external",
        "zipimport",
        "marshal",
        "_imp",
        "_io",
    )
    BUILTINS = ("compile", "exec")
    LOADERS = ("SourceFileLoader", "SourcelessFileLoader", "zipimporter")

    def __init__(self) -> None:
        modules = sys.modules
        bootstrap = modules.get("_frozen_importlib")
        external = modules.get("_frozen_importlib_external")
        call = getattr(bootstrap, "_call_with_frames_removed", None)
        self.call = _FUNC_CODE(call) if type(call) is _FunctionType else None
        basics = getattr(external, "_LoaderBasics", None)
        self.exec_module = _FUNC_CODE(_TYPE_DICT(basics)["exec_module"]) if basics else None
        zipimporter = getattr(modules.get("zipimport"), "zipimporter", None)
        legacy = _TYPE_DICT(zipimporter).get("load_module") if type(zipimporter) is type else None
        # Python 3.8 and 3.9 import from a zip file through the importer's own `load_module`
        self.zip_load = _FUNC_CODE(legacy) if type(legacy) is _FunctionType else None
        self.namespaces: "list[tuple[Any, list[str], list[Any], int]]" = []
        for name in self.MODULES:
            module = modules.get(name)
            if type(module) is type(sys):
                # Dunder names change as `importlib` adopts the frozen modules; nothing
                # of the import system reads them.
                self._take(_MODULE_DICT(module), [k for k in _MODULE_DICT(module) if k[:2] != "__"])
        self._take(_MODULE_DICT(_BUILTINS), list(self.BUILTINS), sized=False)
        self.loaders: "dict[Any, str]" = {}
        found = [getattr(external, name, None) for name in self.LOADERS[:2]] + [zipimporter]
        for name, cls in zip(self.LOADERS, found):  # noqa: B905 - Python 3.8 runs this too
            if type(cls) is not type:
                continue
            self.loaders[cls] = name
            for klass in type.__dict__["__mro__"].__get__(cls)[:-1]:  # not `object`
                namespace = _TYPE_DICT(klass)
                if all(entry[0] is not namespace for entry in self.namespaces):
                    self._take(namespace, list(namespace))

    def _take(self, namespace: Any, keys: "list[str]", sized: bool = True) -> None:
        values = list(map(namespace.get, keys))
        self.namespaces.append((namespace, keys, values, len(namespace) if sized else -1))

    def intact(self) -> bool:
        for namespace, keys, values, size in self.namespaces:
            if size >= 0 and len(namespace) != size:
                return False
            if not same(list(map(namespace.get, keys)), values):
                return False
        return True

    def imports(self, frame: Any, code: Any) -> bool:
        """Whether `exec` (called from `frame`) runs a module's code for the import
        system's own loader of a source or bytecode file, everything that made that code
        from its file as it was: the code is the file's (its source's compiling or its
        bytecode's reading was judged as it happened)."""
        if frame is None or self.call is None:
            return False
        if frame.f_code is self.call:
            caller = frame.f_back
            if caller is None or caller.f_code is not self.exec_module:
                return False
        elif self.zip_load is not None and frame.f_code is self.zip_load:
            caller = frame
        else:
            return False
        loader = caller.f_locals.get("self")
        kind = self.loaders.get(type(loader))
        if kind is None:
            return False
        attrs = object.__getattribute__(loader, "__dict__")
        if type(attrs) is not dict or any(map(callable, attrs.values())):
            return False  # a method of its own set on the loader
        path = attrs.get("path")
        if kind == "SourceFileLoader" and (type(path) is not str or code.co_filename != path):
            return False
        return self.intact()


def memory_sealed() -> bool:
    """Whether the kernel refuses this process its own memory file (the launcher's seal)."""
    try:
        os.close(os.open("/proc/self/mem", os.O_RDONLY))
    except PermissionError:
        return True
    except OSError:
        return False
    return False


def run_could_write(path: str) -> bool:
    """Whether a process of the run could have written `path` (or put another file there):
    not on a read-only mount, and the run's own, writable by it, or in a directory it
    may write."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return False
        owner = os.stat(path).st_uid
    except OSError:
        return True
    return (
        owner == os.getuid()
        or os.access(path, os.W_OK)
        or os.access(os.path.dirname(path) or ".", os.W_OK)
    )


def memory_file(path: str) -> bool:
    """Whether an absolute or relative path names a process's memory, however spelled."""
    if "mem" not in path and "kcore" not in path:  # the name itself is never spelled away
        return False
    if not path.startswith("/"):
        try:
            path = os.path.join(os.getcwd(), path)
        except OSError:
            return False
    path = "/" + os.path.normpath(path).lstrip("/")
    return (path.endswith("/mem") and path.startswith("/proc/")) or path in MEMORY_FILES


def exit_status(code: Any) -> int:
    """The status the interpreter exits with for `SystemExit(code)` (`sys.exit(False)` is 0)."""
    if code is None:
        return 0
    if issubclass(type(code), int):
        return int.__index__(code) & 0xFF
    return 1


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
    the name of what it raised, or "" when it returned."""

    @_functools.wraps(function)
    def observed(*args: Any, **kwargs: Any) -> Any:
        try:
            result = function(*args, **kwargs)
        except BaseException as raised:
            # The class's own name (a metaclass cannot answer for it); never "" for a raise.
            named = _TYPE_NAME(type(raised))
            audit(EVENT, "ran", test_id, named if type(named) is str and named else "an exception")
            raise
        audit(EVENT, "ran", test_id, "")
        return result

    return observed


_TYPE_NAME = type.__dict__["__name__"].__get__
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
    problems: "list[str]" = []
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


# -- the monitor ----------------------------------------------------------------------------


def _word(value: Any) -> str:
    text = value if type(value) is str else "runner"
    return text if text.isidentifier() else "runner"


def _encode(value: Any) -> str:
    return _ENCODE(value if type(value) is str else str.__str__(str(value)))


try:
    from _json import encode_basestring_ascii as _ENCODE  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - CPython always has it
    _ENCODE = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]

try:
    from _hashlib import hmac_digest as _HMAC  # type: ignore[attr-defined]
except ImportError:  # Python < 3.7 or no OpenSSL

    def _HMAC(key: Any, msg: Any, digest: str) -> bytes:  # type: ignore[misc]
        return hmac.new(key, msg, getattr(hashlib, digest)).digest()


def start(
    key: bytes,
    setup: "dict[str, Any]",
    main_code: Any,
    checks: Any = None,
    item_check: Any = None,
) -> Any:
    """Install the monitor; returns (the function the plugin reports with, `register`).

    With audit hooks the reporting function is `sys.audit` itself and the key
    lives only in the hook's closure; without, it is a closure that writes
    records after the same checks. `register(codes)` names the plugin's
    functions, the only code whose records are taken; it takes effect once.

    What the checks trust lives only in this function's closures. The runner's
    own namespace (its functions and classes: reachable from any of them),
    its classes' attributes and the builtins are compared, before anything
    else, with what they were here, using only functions bound here.
    """
    os.set_inheritable(REPORT_FD, False)  # the tests' own processes never get it
    realpath_ = os.path.realpath
    capped = setup.get("level")  # "reduced": the patch changed the test framework's own files
    # Where another process of the run, or this one through its memory file, could write
    # this process's memory, nothing checked here holds: the run is `reduced`.
    sealed = memory_sealed()
    root = os.path.realpath(setup["root"])
    protected, unchanged = load_trusted(setup["ro"], root, list(setup.get("canaries", [])))
    origins = Origins(root, protected, unchanged)
    origins.canaries = frozenset(
        os.path.realpath(os.path.join(root, rel)) for rel in setup.get("canaries", [])
    )
    runner = globals()
    own = [runner]
    own += [
        _TYPE_DICT(value)
        for value in list(runner.values())
        if isinstance(value, type) and _TYPE_DICT(value).get("__module__") == runner["__name__"]
    ]
    own_values = [list(namespace.values()) for namespace in own]
    builtins_namespace = _MODULE_DICT(_BUILTINS)
    builtin_names = OWN_BUILTINS
    builtins_values = [builtins_namespace.get(name) for name in builtin_names]
    _list, _all, _map, _len, _is, _zip = list, all, map, len, _IS, zip

    def own_changed() -> bool:
        for namespace, before in _zip(own, own_values):
            now = _list(namespace.values())
            if _len(now) != _len(before) or not _all(_map(_is, now, before)):
                return True
        now = _list(_map(builtins_namespace.get, builtin_names))
        return not _all(_map(_is, now, builtins_values))

    write, frame_at, hexlify = os.write, sys._getframe, bytes.hex

    def getframe(depth: int) -> Any:
        """The frame `depth` calls above the caller; the event it raises is the monitor's
        own (`state["own"]`), so the hook returns from it at once."""
        state["own"] = True
        try:
            return frame_at(depth + 1)
        finally:
            state["own"] = False

    get_ident = _thread.get_ident
    main_thread = get_ident()  # the monitor starts in the main thread
    snapshot = Snapshot(origins)
    machinery = Machinery()

    def rewriter(code: Any) -> bool:
        """Whether `code` is pytest's own that runs a module it rewrote (its assertion
        rewriting hook's `exec_module`, as pytest's module holds it now, code the patch
        did not write)."""
        rewriting = modules.get("_pytest.assertion.rewrite")
        namespace = _MODULE_DICT(rewriting) if type(rewriting) is type(sys) else {}
        hook_class = namespace.get("AssertionRewritingHook")
        is_class = issubclass(type(hook_class), type)
        runs = _TYPE_DICT(hook_class).get("exec_module") if is_class else None
        return (
            type(runs) is _FunctionType
            and _FUNC_CODE(runs) is code
            and not origins.code_from_tree(code)
        )

    state: "dict[str, Any]" = {
        "n": 0,
        "busy": False,
        "own": False,  # the monitor itself is looking up a frame
        "inner": False,
        "armed": False,
        "early": False,  # code of the tree ran before arming
        "tree_ran": False,  # code of the tree ran (until then no code can be laundered)
        "finished": False,
    }
    holder: "dict[str, Any]" = {
        "registry": None,
        "item": None,
        "observed": None,
        "strict": False,
        "function": None,
        "observer": None,
        "ran": None,
        "item_id": None,  # the running test's id, for a report that names none
        "unnamed": 0,  # reports made with no test running
    }
    reported: "set[str]" = set()
    plugin_codes: "list[Any]" = []
    # Memory modules: withheld from every import unless the daemon allows them; any in
    # the process before the monitor (a .pth file of the environment's) is open to all.
    allow_memory = setup.get("memory_modules") == "allow"
    withheld: "set[str]" = set()
    let_in = set(name for name in MEMORY_MODULES if name in sys.modules)
    preloaded = sorted(let_in)

    def register(codes: "tuple[Any, ...]") -> None:
        if not plugin_codes:
            plugin_codes.extend(codes)

    def record(body: str) -> None:
        line = f'{body},"n":{state["n"]:d}}}'
        state["n"] += 1
        data = line.encode()
        mac = hexlify(_HMAC(key, data, "sha256"))
        out = data + b" " + mac.encode() + b"\n"
        while out:
            out = out[write(REPORT_FD, out) :]

    def tamper(why: str, test_id: str = "") -> None:
        if why in reported:
            return
        reported.add(why)
        record(f'{{"event":"tamper","id":{_encode(test_id)},"why":{_encode(why[:500])}')

    def caller(frame: Any) -> "tuple[str, bool]":
        """(file, whether it is the tree's) of the first frame outside the import system."""
        while frame is not None and frame.f_code.co_filename.startswith("<frozen "):
            frame = frame.f_back
        if frame is None:
            return "<none>", False
        code = frame.f_code
        found = origins.code_from_tree(code)
        return (found or code.co_filename), bool(found)

    def patch_on_stack(frame: Any, within_import: bool = False) -> str:
        """The first file of the patch's on the stack from `frame` up, or ""; with
        `within_import`, only up to the module being imported, if one is (its importer
        asked for the module, not for what the module's own code does)."""
        depth = 0
        while frame is not None and depth < 400:
            code = frame.f_code
            if within_import and code is machinery.call:
                return ""
            found = origins.code_from_tree(code)
            if found:
                return found
            frame = frame.f_back
            depth += 1
        return ""

    def caller_file(frame: Any) -> str:
        return caller(frame)[0]

    def who_did(frame: Any) -> "tuple[str, bool]":
        """`caller`, where a thread other than the main one counts as the tree's: it may
        run the patch's errand on a library function, none of its frames on the stack."""
        who, tree = caller(frame)
        if not tree and elsewhere():
            return f"a thread of the run (in {who})", True
        return who, tree

    read_only_dirs: "set[str]" = set()

    def read_only_dir(path: str) -> bool:
        """Whether `path` lies in a directory on a read-only mount (remembered: the run
        cannot mount anything, so such a directory stays read-only)."""
        directory = os.path.dirname(path)
        if directory in read_only_dirs:
            return True
        try:
            if os.statvfs(directory).f_flag & os.ST_RDONLY:
                read_only_dirs.add(directory)
                return True
        except OSError:
            pass
        return False

    def elsewhere() -> str:
        """A thread other than the main one: whatever runs there may be the patch's,
        started on a library function (none of its frames on that thread's stack)."""
        if get_ident() != main_thread:
            return "a thread of the run (anything may have started it)"
        return ""

    def library_import(frame: Any) -> bool:
        """Whether the first frame outside the import system is the top-level code of a
        module the patch did not write, being imported (its arguments are its own)."""
        while frame is not None and frame.f_code.co_filename.startswith("<frozen "):
            frame = frame.f_back
        if frame is None or frame.f_code.co_name != "<module>":
            return False
        module = modules.get(frame.f_globals.get("__name__"))
        if getattr(module, "__dict__", None) is not frame.f_globals:
            return False  # a module's code run again, on globals of somebody's choosing
        return not origins.code_from_tree(frame.f_code)

    def bytecode_problem(frame: Any) -> str:
        """Why the bytecode an import is reading cannot be trusted: a file the run could
        write, or a loader the patch made or fitted (its own `get_data` feeds any bytes)."""
        depth = 0
        while frame is not None and depth < 8:
            code = frame.f_code
            if not code.co_filename.startswith("<frozen "):
                return ""
            if code.co_name not in BYTECODE_READERS:
                frame = frame.f_back
                depth += 1
                continue
            outer = frame.f_back
            if (
                code.co_name == "_compile_bytecode"
                and outer is not None
                and outer.f_code.co_name == "get_code"  # whose locals name the same file
            ):
                frame = outer
                depth += 1
                continue
            local = frame.f_locals
            path = local.get("bytecode_path")
            if type(path) is not str and code.co_name == "get_code":
                path = local.get("path")  # the loader of bytecode files names its file so
            loader = local.get("self")
            if loader is not None and code.co_name != "_compile_bytecode":
                found = origins.from_tree(loader)
                if not found:
                    attrs = getattr(loader, "__dict__", None)
                    for value in list(attrs.values()) if type(attrs) is dict else ():
                        found = origins.from_tree(value)
                        if found:
                            break
                if found:
                    return f"an import read bytecode through a loader from {found}"
                if type(path) is not str:
                    path = getattr(loader, "archive", None)
            if type(path) is str and not read_only_dir(path) and run_could_write(path):
                return f"bytecode from {path}, a file the run could write, was loaded"
            if loader is not None and code.co_name != "_compile_bytecode":
                return ""  # the loader and its file both judged
            frame = frame.f_back
            depth += 1
        return ""

    def stack_problem(frame: Any) -> str:
        """Code from the tree between the plugin and the runner's main: a forger's wrapper."""
        depth = 0
        while frame is not None and depth < 400:
            code = frame.f_code
            if code is main_code:
                return ""
            found = origins.code_from_tree(code)
            if found:
                return f"code from {found} stands between pytest and its report"
            frame = frame.f_back
            depth += 1
        return "the report was not made by pytest under this runner"

    def importing(frame: Any) -> bool:
        """Whether the import system's own loader (a frozen `get_code`) is on the way here."""
        depth = 0
        while frame is not None and depth < 8:
            code = frame.f_code
            if code.co_name == "get_code" and code.co_filename.startswith("<frozen "):
                return True
            if not code.co_filename.startswith("<frozen "):
                return False
            frame = frame.f_back
            depth += 1
        return False

    def integrity() -> "list[str]":
        if own_changed():
            return ["the runner's own code or the builtins were changed"]
        problems: "list[str]" = []
        snapshot.check(problems)
        registry = holder["registry"]
        if registry is not None:
            registry.check(problems)
            verify = getattr(registry, "verify_module", None)
            while snapshot.fresh and verify is not None:
                verify(*snapshot.fresh.pop(), problems)
        else:
            snapshot.fresh.clear()
        if sys.__dict__.get("modules") is not modules:
            problems.append("sys.modules was replaced")
        for name in MEMORY_MODULES:
            if name in modules and name not in let_in:
                problems.append(f"{name} was loaded past the import system's events")
        return problems

    modules = sys.modules

    def op(args: "tuple[Any, ...]", frame: Any) -> None:
        if frame is None or not any(frame.f_code is c for c in plugin_codes):
            tamper(f"a runner record was asked for by {caller_file(frame)}")
            return
        kind = args[0]
        if kind == "start":  # ("start", framework, its version)
            level = "monitor" if hasattr(sys, "addaudithook") else "reduced"
            level = "reduced" if capped == "reduced" or not sealed or let_in else level
            record(f'{{"event":"start","{_word(args[1])}":{_encode(args[2])},"integrity":"{level}"')
            for name in preloaded:
                by = "the interpreter's start, before the runner"
                record(f'{{"event":"memory","module":{_encode(name)},"by":{_encode(by)}')
        elif kind == "arm":  # ("arm", what `checks` watches, e.g. pytest's Config)
            if checks is not None:
                holder["registry"] = checks(origins, args[1])
            problems: "list[str]" = []
            snapshot.arm(problems, deep=state["early"])
            if holder["registry"] is not None:
                holder["registry"].check(problems)
            state["armed"] = True
            for why in problems:
                tamper(why)
        elif kind == "session":  # ("session", an object whose attributes `checks` watches)
            if holder["registry"] is not None:
                holder["registry"].add_object("Session", args[1])
        elif kind == "collected":
            for why in integrity():
                tamper(why)
        elif kind == "item":  # ("item", the test about to run, its id, whether it is observed)
            holder["item"] = args[1]
            holder["item_id"] = args[2]
            # args[3]: "strict" (the function surely runs through its observer), "raised"
            # (it may run another way: only a raise it reports counts), or falsy.
            holder["observed"] = args[2] if len(args) > 3 and args[3] else None
            holder["strict"] = len(args) > 3 and args[3] is not None and args[3] != "raised"
            holder["function"] = args[4] if len(args) > 4 else None  # what the observer wraps
            holder["observer"] = args[5] if len(args) > 5 else None
            holder["ran"] = None
            # A passing call's report is checked whole right after; here, the test itself.
            for why in item_check(args[1], origins) if item_check is not None else []:
                tamper(why, args[2])
        elif kind == "ran":  # ("ran", test id, the exception's name or "" when it returned)
            # Only the observer of the test's own function counts (another one, made
            # around something else, would say what its maker likes); a raise always wins.
            # A report naming no test is the running test's (SymPy's runner observes the
            # call from the framework's frame, not through a wrapper of its own).
            wrapped = frame.f_locals.get("function")
            test_id = holder["observed"] if args[1] is None else args[1]
            ours = test_id is not None and test_id == holder["observed"]
            ours = ours and wrapped is holder["function"]
            # Anything but the exact "" of a return is a raise.
            raised = args[2] if type(args[2]) is str else "an exception"
            if ours and (raised or holder["ran"] is None):
                holder["ran"] = raised
        elif kind == "test":
            _, test_id, when, outcome, xfail, report = args
            if test_id is None:  # the running test's report (SymPy's reporter names none)
                test_id, holder["item_id"] = holder["item_id"], None
                if test_id is None:
                    holder["unnamed"] += 1
                    test_id = f"<no test {holder['unnamed']}>"
            # A call reported passed is checked whole (only a pass helps a forger); other
            # reports by where they come from (a change that stays is found at the next
            # passing call or at the end).
            problems = integrity() if when == "call" and outcome == "passed" else []
            if when == "call" and outcome == "passed" and test_id == holder["observed"]:
                ran = holder["ran"]
                observer = holder["observer"]  # none where the runner observes no wrapper
                if observer is not None and not observing(observer, holder["function"]):
                    problems.append("the test's observer no longer calls the test's function")
                if ran is None and holder["strict"]:
                    problems.append("the report says passed but the test's function never ran")
                elif ran:
                    problems.append(f"the report says passed but the test raised {ran}")
            found = origins.from_tree(type(report))
            if found:
                problems.append(f"the report is an instance of a class from {found}")
            why = stack_problem(frame)
            if why:
                problems.append(why)
            if when == "call" and holder["item"] is not None and item_check is not None:
                problems += item_check(holder["item"], origins)
            for why in problems:
                tamper(why, test_id)
            flag = "true" if xfail else "false"
            record(
                f'{{"event":"test","id":{_encode(test_id)},"when":{_encode(when)},'
                f'"outcome":{_encode(outcome)},"xfail":{flag}'
            )
        elif kind == "tamper":  # ("tamper", why): what the runner found where only it looks
            # (SymPy's reporter instance), against the running test
            found = args[1] if len(args) > 1 and type(args[1]) is str else "tampering"
            tamper(found, holder["item_id"] or "")
        elif kind == "collect":
            why = stack_problem(frame)
            if why:
                tamper(why, args[1])
            record(f'{{"event":"collect","id":{_encode(args[1])},"outcome":"error"')
        elif kind == "finish":
            if state["finished"]:
                tamper("the session finished twice")
                return
            problems = integrity()
            why = stack_problem(frame)
            if why:
                problems.append(why)
            for why in problems:
                tamper(why)
            state["finished"] = True
            record(f'{{"event":"finish","exit":{int(args[1]):d}')

    def laundered(code: Any, filename: str, frame: Any) -> str:
        """Why `code`, claiming to be `filename` and run from `frame`, may not be that
        file's code; "" when it surely is: made by the import system as it was, or by the
        framework's rewriting of a file whose text it was seen to read, or the very code
        the file compiles to."""
        if machinery.imports(frame, code):
            return ""
        rewriting = frame is not None and rewriter(frame.f_code)
        if rewriting and (
            origins.is_protected(filename) or realpath_(filename) in origins.rewritten
        ):
            return ""  # a protected module is compared with a fresh rewrite as well
        if origins.same_code(code):
            return ""
        who, _ = who_did(frame)
        return f"code claiming to be {filename} but not that file's was run by {who}"

    def rewritten(filename: str, frame: Any) -> None:
        """A test module's syntax tree compiled by the framework (pytest's assertion
        rewriting): the text it read must be the file's, and nothing the rewriting runs
        on may be the patch's while it runs. Then the module need not be rewritten again
        to be checked (`Origins.rewritten`)."""
        read = frame.f_locals.get("source") if frame is not None else None
        if type(read) not in (bytes, str):
            return  # not the rewriting this knows: the module is compared after it loads
        if not origins.same_source(filename, read):
            refuse(f"the text rewritten as {filename} is not that file's")
        problems: "list[str]" = []
        snapshot.check(problems, scan=False)
        for why in problems:
            tamper(f"while {filename} was rewritten: {why}")
        if not problems:
            origins.rewritten.add(realpath_(filename))

    def refuse(why: str) -> None:
        tamper(why)
        raise Refused(f"jouled: refused while grading: {why}")

    def asker(frame: Any) -> str:
        """The file that asked for a module: the first frame outside the import system
        and the module's own package (ctypes asks for _ctypes on its importer's behalf)."""
        depth = 0
        while frame is not None and depth < 400:
            filename = frame.f_code.co_filename
            if not filename.startswith("<frozen ") and not any(
                part in filename for part in MEMORY_PACKAGES
            ):
                return os.path.relpath(filename, root) if origins.inside(filename) else filename
            frame = frame.f_back
            depth += 1
        return "<none>"

    def stand_in(frame: Any) -> None:
        """The test framework's own `import ctypes` (Django's test runner has one, for
        its parallel mode) gets a module without memory access in the real one's place:
        the import system takes a module put in `sys.modules` while it looks."""
        if frame is None or "ctypes" in modules:
            return
        importer = frame.f_globals.get("__name__")
        if type(importer) is not str or not (
            _top(importer) in WATCHED or importer.startswith(WATCHED_PREFIXES)
        ):
            return
        if origins.code_from_tree(frame.f_code):
            return
        module = type(sys)("ctypes", "A stand-in: graded runs have no ctypes (jouled).")

        def missing(attribute: str) -> Any:
            raise AttributeError(
                f"module 'ctypes' has no attribute {attribute!r}: ctypes is withheld from "
                "graded runs (a daemon run with --memory-modules allow loads it)"
            )

        module.__getattr__ = missing  # type: ignore[method-assign]
        modules["ctypes"] = module
        if "ctypes" not in withheld:
            withheld.add("ctypes")
            by = _encode(asker(frame))
            record(f'{{"event":"withheld","module":"ctypes","by":{by}')

    def memory_module(name: str, frame: Any) -> None:
        found = patch_on_stack(frame)
        if found:
            what = "which hands Python code the process's memory"
            refuse(f"{name}, {what}, was loaded by {found}")
        if name in let_in:
            return
        who = asker(frame)
        if allow_memory:
            # Allowed by the daemon: loaded, and the run is `reduced` from here on.
            let_in.add(name)
            record(f'{{"event":"memory","module":{_encode(name)},"by":{_encode(who)}')
            return
        if name not in withheld:
            withheld.add(name)
            record(f'{{"event":"withheld","module":{_encode(name)},"by":{_encode(who)}')
        raise Withheld(
            f"jouled: {name} is withheld from graded runs (it hands Python code the "
            "process's memory); a daemon run with --memory-modules allow loads it, "
            "its results signed reduced"
        )

    def policy(event: str, args: "tuple[Any, ...]") -> None:
        if event in REFUSED:
            refuse(f"{event} was called from {caller_file(getframe(2))}")
        elif event in TRACING:
            if args and args[0] is not None:
                refuse(f"{event} installed a callback from {caller_file(getframe(2))}")
        elif event == "open":
            path = args[0]
            if type(path) is bytes:
                path = path.decode(errors="replace")
            if type(path) is not str:
                return
            if memory_file(path):
                refuse(f"{path} was opened")
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            writing = (type(mode) is str and any(c in mode for c in "wax+")) or (
                type(flags) is int and flags & (os.O_WRONLY | os.O_RDWR)
            )
            if writing and path.endswith((".pyc", ".pyo")):
                refuse(f"bytecode was written to {path}")
        elif event == "import":
            # Raised with no file as any module is first looked for, and again with the
            # file's name as an extension module is loaded, by whatever route (import
            # statement, importlib, a loader made by hand).
            name = args[0] if type(args[0]) is str else ""
            filename = args[1] if len(args) > 1 else None
            if name == "ctypes" and filename is None and not allow_memory:
                stand_in(getframe(2))
            if name.rpartition(".")[2] in MEMORY_MODULES:
                memory_module(name, getframe(2))
            elif type(filename) is str and run_could_write(filename):
                refuse(f"native code from {filename}, a file the run could write, was loaded")
        elif event in ("os.rename", "os.link", "os.symlink"):
            target = args[1] if len(args) > 1 else ""
            if type(target) is str and target.endswith((".pyc", ".pyo")):
                refuse(f"bytecode was placed at {target}")
        elif event == "ctypes.dlsym":
            name = args[1] if len(args) > 1 else ""
            if type(name) is str and name.startswith(("Py", "_Py")):
                refuse(f"ctypes looked up the interpreter's {name}")
        elif event == "ctypes.call_function":
            ctypes = sys.modules.get("ctypes")
            pointer = args[0] if args else None
            if ctypes is not None and pointer in (
                getattr(ctypes, "_memmove_addr", None),
                getattr(ctypes, "_memset_addr", None),
                getattr(ctypes, "_string_at_addr", None),
            ):
                refuse("ctypes wrote or read memory by address")
            py_object = getattr(ctypes, "py_object", None)
            if py_object is not None and any(
                a is py_object for a in (args[1] if len(args) > 1 else ())
            ):
                refuse("ctypes cast an address to a Python object")
        elif event in ("object.__setattr__", "object.__delattr__"):
            target, name = args[0], args[1]
            if name not in SPECIAL_WRITES and not state["armed"]:
                return
            if name in ("__module__", "__name__", "__qualname__") and not isinstance(target, type):
                return
            kind = type(target)
            if kind is _FunctionType:
                if name in SPECIAL_WRITES and not origins.function_from_tree(target):
                    who, tree = who_did(getframe(2))
                    if tree:
                        refuse(f"{name} of {target.__qualname__} was written by {who}")
            elif isinstance(target, type):
                # Before arming, or while the class's own module is being imported (pytest
                # imported late, by a test helper), the framework builds classes this way.
                if state["armed"]:
                    module = _TYPE_DICT(target).get("__module__")
                    if type(module) is str and _top(module) in WATCHED and not initializing(module):
                        refuse(f"{name} of class {module}.{target.__qualname__} was written")
            elif name == "__class__" and len(args) > 2:
                # An object of the test framework's (a report, an item, a result) may not
                # become the tree's; any other object's class is the program's business
                # (Django clones a query by giving an empty object the query's class).
                module = _TYPE_DICT(kind).get("__module__")
                framework = type(module) is str and (
                    _top(module) in WATCHED or module.startswith(WATCHED_PREFIXES)
                )
                found = origins.from_tree(args[2]) if framework else ""
                if found and not origins.from_tree(kind):
                    refuse(f"an object of {kind.__name__} was given a class from {found}")
        elif event == "compile":
            # Code is judged by its file name: the tree may not compile code under the
            # name of a file the patch did not write unless it is that file's source.
            if len(args) > 1 and args[1] is None:
                # A syntax tree (its file name is not in the event): pytest's assertion
                # rewriting names the file in its own frame, and the text it read.
                frame = getframe(2)
                named = frame.f_locals.get("strfn") if frame is not None else None
                if type(named) is str and origins.real_file(named) and origins.trusted_file(named):
                    who, tree = caller(frame)
                    if tree:
                        return
                    if origins.is_protected(named):
                        if state["armed"]:
                            rewritten(named, frame)
                    elif origins.same_source(named, frame.f_locals.get("source")):
                        origins.rewritten.add(realpath_(named))
                return
            if len(args) < 2 or type(args[1]) is not str:
                return
            filename, source = args[1], args[0]
            if not origins.real_file(filename):
                return
            origins.compiled(filename, source)
            if not origins.trusted_file(filename):
                return
            protected = origins.is_protected(filename)
            if type(source) in (bytes, str) and protected:
                # A test file is read-only: its source is what is on disk, whoever
                # reads it (an import system changed to feed it other text is not).
                if not origins.same_source(filename, source):
                    refuse(f"the source compiled as {filename} is not that file's")
                return
            who, tree = caller(getframe(2))
            if protected and not tree and state["armed"]:
                rewritten(filename, getframe(2))
                return
            if not tree:
                who, tree = who_did(getframe(2))
            if tree and not origins.same_source(filename, source):
                refuse(f"code compiled by {who} claims to be {filename}")
        elif event == "code.__new__":
            # Bytecode is not verified: code made by hand can read and write any memory.
            frame = getframe(2)
            filename = args[1] if len(args) > 1 else ""
            who, tree = caller(frame)
            if tree and type(filename) is str and origins.trusted_file(filename):
                refuse(f"a code object made by {who} claims to be {filename}")
            if importing(frame) or library_import(frame):
                return  # unmarshalling (Python 3.8), a library's own import-time code
            found = patch_on_stack(frame) or elsewhere()
            if found:
                refuse(f"a code object was made by hand (bytecode is not verified) by {found}")
        elif event in ("marshal.loads", "marshal.load"):
            frame = getframe(2)
            if importing(frame):
                why = bytecode_problem(frame)
                if why:
                    refuse(why)
                return
            found = patch_on_stack(frame) or elsewhere()
            if found:
                refuse(f"code was unmarshalled by {found}")
        elif event == "exec" or event == "function.__new__":
            code = args[0] if args else None
            if type(code) is not _CodeType:
                return
            filename = code.co_filename
            trusted = origins.trusted_file(filename)
            if not trusted:
                state["tree_ran"] = True
                if not state["armed"]:
                    state["early"] = True
            if not origins.real_file(filename):
                # Generated code is the tree's when the tree runs it, or when a library
                # function runs it on the tree's behalf (the tree's frames below it, short
                # of an import: a library's own classes made as it is imported are its).
                frame = getframe(2)
                who, tree = caller(frame)
                if not tree and state["tree_ran"]:
                    who = patch_on_stack(frame, within_import=True) or elsewhere()
                    tree = bool(who)
                if tree:
                    state["tree_ran"] = True
                    origins.mark_dynamic(code, who)
            elif event == "function.__new__" and trusted:
                who, tree = who_did(getframe(2))
                if tree:
                    refuse(f"a function of {filename} was remade by {who}")
            elif trusted and state["tree_ran"]:
                # Code under the name of a file the patch did not write, once code of the
                # tree has run: it must be that file's code, whoever runs it (a syntax
                # tree compiled under a borrowed name is not, and audit events do not
                # show its name; a library function may run it on the tree's behalf).
                why = laundered(code, filename, getframe(2))
                if why:
                    refuse(why)

    if not hasattr(sys, "addaudithook"):  # Python < 3.8: the plugin writes, checked here
        state["armed"] = False

        def direct(event: str, *args: Any) -> None:
            if event != EVENT:
                return
            try:
                op(args, getframe(1))
            except Exception as err:
                tamper(f"the runner's check failed: {type(err).__name__}: {err}")

        return direct, register

    own_file = start.__code__.co_filename

    def hook(event: str, args: "tuple[Any, ...]") -> None:
        if event not in HANDLED:  # most events (builtins.id, os.*, import...): nothing to do
            return
        if state["busy"]:
            if state["own"]:
                return
            # Code running while the monitor checks is code the check called: a value
            # of the tree's (a property, a __getattr__). It may not look around.
            frames = event != "object.__getattr__" or (len(args) > 1 and args[1] in FRAME_ATTRS)
            if frames and event in INTROSPECTION and not state["inner"]:
                state["inner"] = True
                try:
                    frame = getframe(1)
                    if frame.f_code.co_filename != own_file:
                        tamper(f"{event} by {frame.f_code.co_filename} during the runner's check")
                        raise Refused("jouled: introspection during the runner's check")
                finally:
                    state["inner"] = False
            return
        if event == EVENT:
            state["busy"] = True
            try:
                op(args, getframe(1))
            except Refused:
                raise
            except Exception as err:
                tamper(f"the runner's check failed: {type(err).__name__}: {err}")
            finally:
                state["busy"] = False
            return
        if event in WANTED:
            state["busy"] = True
            try:
                policy(event, args)
            finally:
                state["busy"] = False

    sys.addaudithook(hook)
    return sys.audit, register


_CodeType = type(start.__code__)
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
INTROSPECTION = frozenset(
    {"sys._getframe", "sys._getframemodulename", "sys._current_frames", "object.__getattr__"}
    | REFUSED
)
WANTED = frozenset(
    {
        *REFUSED,
        *TRACING,
        "open",
        "os.rename",
        "os.link",
        "os.symlink",
        "ctypes.dlsym",
        "ctypes.call_function",
        "import",
        "object.__setattr__",
        "object.__delattr__",
        "exec",
        "compile",
        "code.__new__",
        "marshal.loads",
        "marshal.load",
        "function.__new__",
    }
)
HANDLED = WANTED | INTROSPECTION | {EVENT}
# The builtins the monitor's own code calls: they may not change under it.
OWN_BUILTINS = (
    "all",
    "any",
    "bytes",
    "callable",
    "compile",
    "dict",
    "frozenset",
    "getattr",
    "hasattr",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "list",
    "map",
    "next",
    "object",
    "open",
    "set",
    "sorted",
    "str",
    "tuple",
    "type",
    "zip",
)
