"""The import system as it was, and who is asking: the frames above an event.

The ninth of the monitor's files (`jouled_monitor.py` says how they run).
`Machinery` tells the import system's own making of a module's code from code
run under its name; `Stack` reads the frames above an event to name the file
that asked, whether the patch's code is on the way, and whether an import is
reading bytecode it cannot trust.
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import _thread
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_monitor import (
        BYTECODE_READERS,
        MEMORY_PACKAGES,
        run_could_write,
    )
    from jouled.pipeline.jouled_origins import (
        _FUNC_CODE,
        _MODULE_DICT,
        _TYPE_DICT,
        Origins,
        _FunctionType,
        framework_module,
    )
    from jouled.pipeline.jouled_snapshot import (
        _BUILTINS,
        same,
    )


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
    # What else a sealed test file's text passes through as it is made a module (pytest
    # hashes, parses and tokenizes it; `open` wraps it): compared as it is handed out.
    READING = ("importlib.util", "tokenize", "token", "io", "ast", "pathlib")

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
        self.namespaces: list[tuple[Any, list[str], list[Any], int]] = []
        for name in self.MODULES:
            module = modules.get(name)
            if type(module) is type(sys):
                # Dunder names change as `importlib` adopts the frozen modules; nothing
                # of the import system reads them.
                self._take(_MODULE_DICT(module), [k for k in _MODULE_DICT(module) if k[:2] != "__"])
        self._take(_MODULE_DICT(_BUILTINS), list(self.BUILTINS), sized=False)
        self.loaders: dict[Any, str] = {}
        found = [getattr(external, name, None) for name in self.LOADERS[:2]] + [zipimporter]
        for name, cls in zip(self.LOADERS, found):  # noqa: B905 - Python 3.8 runs this too
            if type(cls) is not type:
                continue
            self.loaders[cls] = name
            for klass in type.__dict__["__mro__"].__get__(cls)[:-1]:  # not `object`
                namespace = _TYPE_DICT(klass)
                if all(entry[0] is not namespace for entry in self.namespaces):
                    self._take(namespace, list(namespace))

        reading = []
        for name in self.READING:
            module = modules.get(name)
            if type(module) is type(sys):
                reading.append((name, _MODULE_DICT(module)))
        # pytest reads a test module through a `pathlib` path, and makes its name with `str`
        path_class = getattr(modules.get("pathlib"), "PosixPath", None)
        for klass in type.__dict__["__mro__"].__get__(path_class)[:-1] if path_class else ():
            reading.append((f"pathlib's {klass.__name__}", _TYPE_DICT(klass)))
        self.reading: list[tuple[str, Any, list[str], list[Any]]] = [
            (name, namespace, list(namespace), list(namespace.values()))
            for name, namespace in reading
        ]

    def changed_reader(self) -> str:
        """The first namespace of the import system's, or of what else reads a sealed
        file's text (`READING`), with a value changed since the start, or a class of
        theirs with a name added (a module may gain names as the process runs: the
        import system's does as threads start); "" when none did."""
        entries = [("the import system", n, k, v) for n, k, v, _ in self.namespaces]
        for name, namespace, keys, values in entries + self.reading:
            is_class = type(namespace.get("__name__")) is not str
            if is_class and len(namespace) != len(keys):
                return name
            if not same(list(map(namespace.get, keys)), values):
                return name
        return ""

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


class Stack:
    """Who is asking: the frames above an event, read as the monitor reads them.

    Made once by `start`, whose closures call its methods bound; `main_code` is
    the runner's `main`, under which every report must be made.
    """

    __slots__ = ("machinery", "main_code", "main_thread", "modules", "origins", "read_only_dirs")

    def __init__(self, origins: "Origins", machinery: "Machinery", main_code: Any) -> None:
        self.origins = origins
        self.machinery = machinery
        self.main_code = main_code
        self.main_thread = _thread.get_ident()  # the monitor starts in the main thread
        self.modules = sys.modules
        self.read_only_dirs: set[str] = set()

    def frozen(self, code: Any) -> bool:
        """Whether `code` is the import system's own (frozen), not code the tree compiled
        under a frozen module's name to pass for it."""
        return code.co_filename.startswith("<frozen ") and not self.origins.code_from_tree(code)

    def caller(self, frame: Any) -> "tuple[str, bool]":
        """(file, whether it is the tree's) of the first frame outside the import system."""
        while frame is not None and self.frozen(frame.f_code):
            frame = frame.f_back
        if frame is None:
            return "<none>", False
        code = frame.f_code
        found = self.origins.code_from_tree(code)
        return (found or code.co_filename), bool(found)

    def patch_on_stack(self, frame: Any, within_import: bool = False) -> str:
        """The first file of the patch's on the stack from `frame` up, or ""; with
        `within_import`, only up to the module being imported, if one is (its importer
        asked for the module, not for what the module's own code does)."""
        depth = 0
        while frame is not None and depth < 400:
            code = frame.f_code
            if within_import and code is self.machinery.call:
                return ""
            found = self.origins.code_from_tree(code)
            if found:
                return found
            frame = frame.f_back
            depth += 1
        return ""

    def own_use(self, frame: Any, event: str) -> bool:
        """Whether `frame` calls the function of `event` itself, as code of a library's (or
        a test file's) that names it, with no code of the patch's on the stack and in the
        main thread: not the patch's call, nor one it steered a library's code into (a
        partial, `map` or a callback the library runs names no such function)."""
        if frame is None or event.rpartition(".")[2] not in frame.f_code.co_names:
            return False
        return not (self.patch_on_stack(frame) or self.elsewhere())

    def caller_file(self, frame: Any) -> str:
        return self.caller(frame)[0]

    def who_did(self, frame: Any) -> "tuple[str, bool]":
        """`caller`, where a thread other than the main one counts as the tree's: it may
        run the patch's errand on a library function, none of its frames on the stack."""
        who, tree = self.caller(frame)
        if not tree and self.elsewhere():
            return f"a thread of the run (in {who})", True
        return who, tree

    def read_only_dir(self, path: str) -> bool:
        """Whether `path` lies in a directory on a read-only mount (remembered: the run
        cannot mount anything, so such a directory stays read-only)."""
        directory = os.path.dirname(path)
        if directory in self.read_only_dirs:
            return True
        try:
            if os.statvfs(directory).f_flag & os.ST_RDONLY:
                self.read_only_dirs.add(directory)
                return True
        except OSError:
            pass
        return False

    def elsewhere(self) -> str:
        """A thread other than the main one: whatever runs there may be the patch's,
        started on a library function (none of its frames on that thread's stack)."""
        if _thread.get_ident() != self.main_thread:
            return "a thread of the run (anything may have started it)"
        return ""

    def library_import(self, frame: Any) -> bool:
        """Whether the frames from `frame` up, outside the import system, are code the
        patch did not write up to the top-level code of a module being imported (its
        arguments are its own: asyncio's import remakes code through `types.coroutine`)."""
        depth = 0
        while frame is not None and depth < 50:
            code = frame.f_code
            if self.origins.code_from_tree(code):
                return False
            if code.co_name == "<module>" and not self.frozen(code):
                module = self.modules.get(frame.f_globals.get("__name__"))
                # Not a module's code run again, on globals of somebody's choosing.
                return getattr(module, "__dict__", None) is frame.f_globals
            frame = frame.f_back
            depth += 1
        return False

    def bytecode_problem(self, frame: Any) -> str:
        """Why the bytecode an import is reading cannot be trusted: a file the run could
        write, or a loader the patch made or fitted (its own `get_data` feeds any bytes)."""
        depth = 0
        while frame is not None and depth < 8:
            code = frame.f_code
            if not self.frozen(code):
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
                found = self.origins.from_tree(loader)
                if not found:
                    attrs = getattr(loader, "__dict__", None)
                    for value in list(attrs.values()) if type(attrs) is dict else ():
                        found = self.origins.from_tree(value)
                        if found:
                            break
                if found:
                    return f"an import read bytecode through a loader from {found}"
                if type(path) is not str:
                    path = getattr(loader, "archive", None)
            if type(path) is str and not self.read_only_dir(path) and run_could_write(path):
                return f"bytecode from {path}, a file the run could write, was loaded"
            if loader is not None and code.co_name != "_compile_bytecode":
                return ""  # the loader and its file both judged
            frame = frame.f_back
            depth += 1
        return ""

    def stack_problem(self, frame: Any) -> str:
        """Code from the tree between the plugin and the runner's main: a forger's wrapper."""
        depth = 0
        while frame is not None and depth < 400:
            code = frame.f_code
            if code is self.main_code:
                return ""
            found = self.origins.code_from_tree(code)
            if found:
                return f"code from {found} stands between pytest and its report"
            frame = frame.f_back
            depth += 1
        return "the report was not made by pytest under this runner"

    def importing(self, frame: Any) -> bool:
        """Whether the import system's own loader (a frozen `get_code`) is on the way here."""
        depth = 0
        while frame is not None and depth < 8:
            code = frame.f_code
            if not self.frozen(code):
                return False
            if code.co_name == "get_code":
                return True
            frame = frame.f_back
            depth += 1
        return False

    def asker(self, frame: Any) -> str:
        """The file that asked for a module: the first frame outside the import system
        and the module's own package (ctypes asks for _ctypes on its importer's behalf)."""
        depth = 0
        while frame is not None and depth < 400:
            filename = frame.f_code.co_filename
            if not self.frozen(frame.f_code) and not any(
                part in filename for part in MEMORY_PACKAGES
            ):
                return (
                    os.path.relpath(filename, self.origins.root)
                    if self.origins.inside(filename)
                    else filename
                )
            frame = frame.f_back
            depth += 1
        return "<none>"


def pytest_rewriter(code: Any, origins: "Origins", modules: "dict[str, Any]") -> bool:
    """Whether `code` is pytest's own that runs a module it rewrote (its assertion
    rewriting hook's `exec_module`, as pytest's module holds it now, code the patch
    did not write; `modules`: `sys.modules` as the monitor found it)."""
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


_MODULE_SPEC = type(sys.__spec__)


def loading_file(reader: Any, path: str, origins: "Origins") -> bool:
    """Whether `reader` (the frame that opened the sealed file `path`, a real path) is the
    very read that loads that module, by code the patch did not write: the import
    system's (`get_data` called by `get_code` by `exec_module` by `_load_unlocked` of the
    module's spec), pytest's rewriting of it (`_rewrite_test`, directly or through
    `pathlib`'s `read_bytes`, called by its `exec_module` of that module), or SymPy's
    runner running that file (`test_file`). What it reads there becomes that module."""

    def step(frame: Any, name: str) -> Any:
        ok = frame is not None and frame.f_code.co_name == name
        return frame if ok and origins.trusted_file(frame.f_code.co_filename) else None

    name = reader.f_code.co_name if reader is not None else ""
    if not name or not origins.trusted_file(reader.f_code.co_filename):
        return False
    if name == "get_data":
        code = step(reader.f_back, "get_code")
        run = step(code.f_back if code else None, "exec_module")
        load = step(run.f_back if run else None, "_load_unlocked")
        return load is not None and _origin(load) == path
    if name == "open":  # pathlib's, as pytest reads a test module
        read = step(reader.f_back, "read_bytes")
        reader = read.f_back if read is not None else None
        name = reader.f_code.co_name if reader is not None else ""
    if name == "_rewrite_test" and origins.trusted_file(reader.f_code.co_filename):
        run = step(reader.f_back, "exec_module")
        return run is not None and _local_path(reader, "fn") == path and _origin(run) == path
    if name == "<lambda>":  # SymPy's `open_file`
        reader = step(reader.f_back, "test_file")
        name = "test_file" if reader is not None else ""
    return name == "test_file" and _local_path(reader, "filename") == path


def _local_path(frame: Any, local: str) -> "str | None":
    """The real path a frame's local variable names (a string or a `pathlib` path)."""
    value = frame.f_locals.get(local)
    if type(value).__module__ == "pathlib":
        value = str(value)
    return os.path.realpath(value) if type(value) is str else None


def _origin(frame: Any) -> "str | None":
    """The real path of the file a frame of the import system's loads (its `spec`, or its
    `module`'s), if any."""
    local = frame.f_locals
    spec = local.get("spec")
    if type(spec) is not _MODULE_SPEC:
        module = local.get("module")
        spec = (_MODULE_DICT(module) if type(module) is type(sys) else {}).get("__spec__")
    origin = vars(spec).get("origin") if type(spec) is _MODULE_SPEC else None
    return os.path.realpath(origin) if type(origin) is str else None


def handed_by_test(frame: Any, path: str, origins: "Origins", handed: "dict[int, Any]") -> bool:
    """Whether the file `path` (a real path) is read for a test: the innermost frame of the
    suite's own files on the stack is that file's own (a test that has the code it calls
    load its own file as a configuration, by its name or through the environment), or the
    call it makes was given the file among its arguments as it was called
    (`Trace.handed`). Code a test of the file calls could read as much of it through the
    test's frame."""
    callee = None
    depth = 0
    while frame is not None and depth < 400:
        filename = frame.f_code.co_filename
        if origins.is_protected(filename):
            if origins.realpath(filename) == path:
                return True
            entry = handed.get(id(callee)) if callee is not None else None
            return entry is not None and entry[0] is callee and path in entry[1]
        callee = frame
        frame = frame.f_back
        depth += 1
    return False


def ctypes_stand_in(frame: Any, origins: "Origins", modules: "dict[str, Any]") -> bool:
    """Whether the import of ctypes that `frame` asks for was given a stand-in: the test
    framework's own `import ctypes` (Django's test runner has one, for its parallel mode)
    gets a module without memory access in the real one's place (the import system takes
    a module put in `sys.modules` while it looks)."""
    if frame is None or "ctypes" in modules:
        return False
    if not framework_module(frame.f_globals.get("__name__")):
        return False
    if origins.code_from_tree(frame.f_code):
        return False
    module = type(sys)("ctypes", "A stand-in: graded runs have no ctypes (jouled).")

    def missing(attribute: str) -> Any:
        raise AttributeError(
            f"module 'ctypes' has no attribute {attribute!r}: ctypes is withheld from "
            "graded runs (a daemon run with --memory-modules allow loads it)"
        )

    module.__getattr__ = missing  # type: ignore[method-assign]
    modules["ctypes"] = module
    return True
