"""What may not change while tests run: namespaces kept by the identity of every value.

The eighth of the monitor's files (`jouled_monitor.py` says how they run). A
`Snapshot` takes the module globals and class attributes of the test framework
at arming and compares them at every call reported passed and at the end; a
test module is held to the names its own source binds.
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_compared import _interpreter_code
    from jouled.pipeline.jouled_failures import _MISSING, _children
    from jouled.pipeline.jouled_monitor import (
        JUDGING_HELPERS,
        MEMORY_MODULES,
        OWN_BUILTINS,
        SYS_WATCHED,
        WATCHED,
        WATCHED_PREFIXES,
    )
    from jouled.pipeline.jouled_origins import (
        _COMPILE,
        _MODULE_DICT,
        _ONLY_AST,
        _TYPE_DICT,
        Origins,
        _has_code,
        _module_file,
        _top,
        framework_module,
    )
    from jouled.pipeline.jouled_sealed import read_source

# -- what may not change --------------------------------------------------------------------


class Snapshot:
    """Namespaces outcomes depend on, by the identity of every value they held at arming.

    `check` names what changed to a value tree code made; changes to values
    made elsewhere (pytest setting its own state) are taken into the snapshot.
    Protected test modules are held stricter: what their source binds must
    stay bound, and a value from the tree under a name their source never
    binds was put there by someone else.
    """

    def __init__(self, origins: Origins, tag: Any = None, builtins_: Any = None) -> None:
        self.origins = origins
        self.tag = tag  # `version_tags()`: None where this interpreter's cannot be read
        # The builtins the frameworks' modules run with (`framework_builtins`), or None.
        self.framework_builtins = builtins_
        # The builtins the test modules run with (`TestsBuiltins`), or None.
        self.tests_builtins: Any = None
        # [label, namespace, keys, values, strict, watched for put-backs]
        self.entries: list[list[Any]] = []
        # Each entry's version tag (a view, `version_tags`) and its value when last read.
        self.tags: list[Any] = []
        self.tag_values: list[int] = []
        self.seen_modules: dict[str, Any] = {}
        self.module_count = -1
        self.classes: dict[tuple[str, str], Any] = {}
        # name: [name, namespace, its values not from the tree, its tag view, the tag when
        # read, its names and values when last compared, the names its functions declare
        # global, the names its source binds]
        self.test_modules: dict[str, Any] = {}
        self.sys_values: list[Any] = []
        self.fresh: list[tuple[str, Any, str]] = []  # test modules not yet compared
        self.deep = True

    def add(self, label: str, namespace: Any, strict: bool = False, put_back: bool = False) -> None:
        """Watch a namespace; `put_back`: one written and found as it was is tampering."""
        tag = self.tag(namespace) if self.tag is not None else None
        self.entries.append(
            [label, namespace, list(namespace), list(namespace.values()), strict, put_back]
        )
        if tag is not None:
            self.tags.append(tag)
            self.tag_values.append(tag.value)

    def arm(self, problems: "list[str]", deep: bool) -> None:
        """Take the watched namespaces as they are; `deep`: also judge every value in them
        (needed only when code of the tree ran before this: a plugin the configuration loads)."""
        self.deep = deep
        if self.framework_builtins is not None:
            # Nothing but the patch writes here: any value changed, even put back, is its.
            label = "the test frameworks' builtins"
            self.add(label, self.framework_builtins, strict=True, put_back=True)
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
            elif name in JUDGING_HELPERS:  # what the frameworks judge with: put-backs only
                self.add(name, _MODULE_DICT(module), put_back=True)
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
        # A value swapped and put back within a test is tampering, save in the two
        # namespaces test suites patch and put back themselves (`builtins.open`,
        # `unittest.main`), whose values the frameworks' checks do not turn on.
        self.add(name, namespace, put_back=name not in UNTAGGED)

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
        # A warning attributed to the module keeps its registry here: made now, so that
        # every later write to the namespace is somebody's code, never the interpreter's.
        namespace.setdefault("__warningregistry__", {})
        builtins_ = namespace.get("__builtins__")
        ours = self.tests_builtins.namespace if self.tests_builtins is not None else None
        python = builtins_ is _BUILTINS or builtins_ is _MODULE_DICT(_BUILTINS)
        if not python and (ours is None or builtins_ is not ours):
            problems.append(f"test module {name} runs with builtins other than Python's")
        bound, star, declared = source_names(filename)
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
        tag = self.tag(namespace) if self.tag is not None else None
        keys, values = list(namespace), list(namespace.values())
        entry = [name, namespace, own, tag, tag.value if tag else 0, keys, values, declared, bound]
        self.test_modules[name] = entry
        self.fresh.append((name, module, filename))

    def check(self, problems: "list[str]", scan: bool = True) -> None:
        """What changed since the last check; `scan`: take in modules loaded since too
        (never in the middle of an import, whose module is not whole yet).

        With version tags only the namespaces written since are compared (an unwritten
        dict holds what it held), in one pass of C code over the tags; without, all.
        """
        if scan:
            self.scan_modules(problems)
        if self.tag is None:
            self._compare(problems, range(len(self.entries)))
            self._test_modules(problems, list(self.test_modules.values()), written=False)
        else:
            now = list(map(_VALUE, self.tags))
            written = list(_compress(_COUNT(), map(_NE, now, self.tag_values)))
            self.tag_values = now
            differ = self._compare(problems, written) if written else set()
            self._put_back(problems, written, differ)
            moved = []
            for module in self.test_modules.values():
                value = module[3].value
                if value != module[4]:
                    module[4] = value
                    moved.append(module)
            self._test_modules(problems, moved, written=True)
        if self.tests_builtins is not None:
            self.tests_builtins.check(problems)
        self._sys(problems)

    def _put_back(self, problems: "list[str]", written: "list[int]", differ: "set[int]") -> None:
        """A namespace watched for put-backs written since the last check that holds what
        it held: a value was swapped and put back in between, while a test ran (a
        framework helper the test called, changed for that call alone)."""
        for index in written:
            entry = self.entries[index]
            if entry[5] and index not in differ:
                problems.append(f"{entry[0]} was written and put back since the last check")

    def _compare(self, problems: "list[str]", indices: Any) -> "set[int]":
        """Compare the namespaces at `indices`; returns the positions of those whose values
        or names differ, and takes them in."""
        differ: set[int] = set()
        for index in indices:
            entry = self.entries[index]
            label, namespace, keys, values, strict = entry[:5]
            now_values = list(namespace.values())
            if same(now_values, values) and len(namespace) == len(keys):
                continue
            differ.add(index)
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
                elif attr == "__builtins__" and attr in before:
                    # What the module's functions look their builtins up in.
                    problems.append(f"{label}.__builtins__ was replaced")
            if strict:
                gone = [attr for attr in keys if attr not in namespace]
                if gone:
                    problems.append(f"{label}.{gone[0]} was deleted")
            entry[2], entry[3] = now_keys, now_values
        return differ

    def _test_modules(self, problems: "list[str]", modules: "list[Any]", written: bool) -> None:
        """A test module's namespace is the test's: what its source binds stays bound, and
        nothing changes but the names its functions declare `global` (and names its
        source binds that it had not bound yet: a runner script's body, still running).
        One `written` (its tag moved) that holds what it held had a value swapped and put
        back: a function the test calls, swapped for the test's call."""
        for module in modules:
            name, namespace, own, _, _, keys, values, declared, bound = module
            for attr, value in own.items():
                if namespace.get(attr, _MISSING) is not value and attr not in declared:
                    problems.append(f"{name}.{attr}, bound by the test module, was rebound")
            now = list(namespace.values())
            if len(namespace) == len(keys) and same(now, values):
                if written:
                    problems.append(f"test module {name} was written and put back")
                continue
            before = dict(zip(keys, values))  # noqa: B905 - Python 3.6 runs this too
            for attr in list(namespace):
                if attr in own or attr in declared:
                    continue  # judged above; the test's own to bind as it runs
                if attr not in before:
                    if attr not in bound:
                        problems.append(f"test module {name} gained {attr}, which it never binds")
                elif namespace.get(attr) is not before[attr]:
                    problems.append(f"{name}.{attr} was rebound")
            for attr in keys:
                if attr not in namespace and attr not in declared:
                    problems.append(f"{name}.{attr} was deleted")
            module[5], module[6] = list(namespace), now

    def _sys(self, problems: "list[str]") -> None:
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


# Namespaces whose version tags are not read (see `_take_module`).
UNTAGGED = ("builtins", "unittest")
_IS = __import__("operator").is_
_NE = __import__("operator").ne
_VALUE = __import__("operator").attrgetter("value")
_compress = __import__("itertools").compress
_COUNT = __import__("itertools").count


def same(now: "list[Any]", before: "list[Any]") -> bool:
    """Whether two lists hold the very same objects (identity only: no `__eq__` of theirs runs)."""
    return len(now) == len(before) and all(map(_IS, now, before))


_BUILTINS = sys.modules["builtins"]


def source_names(filename: str) -> "tuple[frozenset[str], bool, frozenset[str]]":
    """The names a module's source binds at its top level (or declares global), whether
    it star-imports (which binds names the source does not spell), and the names its
    functions declare global (which they may bind at any time).

    Only statements and their binding targets are walked, never expressions at
    large (a test module's parameter tables can be most of it); function and
    class bodies only for `global`, and only when the source says `global`.
    """
    try:
        source = read_source(filename)
        tree = _COMPILE(source, filename, "exec", _ONLY_AST)
    except (OSError, SyntaxError, ValueError):
        return frozenset(), True, frozenset()
    says_global = b"global" in source
    names: set[str] = set()
    declared: set[str] = set()
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
            declared.update(node.names)
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
    return frozenset(names), star, frozenset(declared)


def defined_names(filename: str) -> "frozenset[str]":
    """The functions and classes a module's source defines at its top level (or under a
    top-level `if` or `try`)."""
    try:
        tree = _COMPILE(read_source(filename), filename, "exec", _ONLY_AST)
    except (OSError, SyntaxError, ValueError, TypeError):
        return frozenset()
    names: set[str] = set()
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


def _globals_in(node: Any) -> "list[Any]":
    """The `global` statements anywhere inside a function or class body."""
    found, todo = [], [node]
    while todo:
        current = todo.pop()
        if type(current).__name__ == "Global":
            found.append(current)
        todo.extend(_children(current))
    return found


def version_tags() -> Any:
    """A maker of views of a namespace's version tag, or None where none can be read.

    CPython 3.8-3.13 keep in every dict a tag (PEP 509) that takes a new value
    whenever the dict is written with another object than it held, and never
    otherwise: a namespace whose tag held was not written, and a module namespace
    whose tag moved while its values did not was written and put back. A class's
    namespace is read through the dict behind its `__dict__` proxy. Reading either
    needs ctypes, loaded here before any code of the tree runs and then taken out of
    `sys.modules`, so the tree's own `import` of it meets the monitor as if it
    never was. The layout is proved on a dict and a class made here (the size
    beside the tag, the tag moving on a write and only then); an interpreter where
    it does not hold gets None: 3.6 and 3.7 (the tag moves on every store, the same
    object too), 3.14 and free-threaded builds (another layout).
    """
    before = set(sys.modules)
    try:
        import ctypes
    except Exception:
        return None
    finally:
        for name in set(sys.modules) - before:
            if name == "ctypes" or name.startswith("ctypes.") or name in MEMORY_MODULES:
                del sys.modules[name]
    word = ctypes.sizeof(ctypes.c_void_p)
    tag_type, size_type, pointer_type = ctypes.c_uint64, ctypes.c_ssize_t, ctypes.c_void_p
    proxy_type = type(type.__dict__)

    def address(namespace: Any) -> int:
        """The dict's own address: a class's `__dict__` proxy holds it after its header."""
        at = id(namespace)
        if type(namespace) is proxy_type:
            at = pointer_type.from_address(at + 2 * word).value or 0
        return at

    def tag(namespace: Any) -> Any:
        return tag_type.from_address(address(namespace) + 3 * word)

    try:
        probe: dict[str, Any] = {"a": None}
        other: dict[str, Any] = {}
        size = size_type.from_address(id(probe) + 2 * word)
        first, beside = tag(probe), tag(other)
        start, start_beside = first.value, beside.value
        probe["a"] = None  # the object it holds: no write
        held = first.value
        probe["b"] = 1
        grown = first.value
        probe["a"] = probe.pop("b")  # another object, then none at that name
        swapped = first.value
        made = type("Probe", (), {"a": None})
        proxy = _TYPE_DICT(made)
        class_size = size_type.from_address(address(proxy) + 2 * word).value
        class_tag = tag(proxy)
        class_start = class_tag.value
        made.a = 1  # type: ignore[attr-defined]
        class_moved = class_tag.value
    except Exception:
        return None
    if not (
        size.value == len(probe) == 1
        and held == start
        and start < grown < swapped
        and beside.value == start_beside
        and class_size == len(proxy)
        and class_start < class_moved
    ):
        return None
    return tag


class TestsBuiltins:
    """The builtins the test modules run with: Python's, as fixtures leave them.

    A test calls builtins itself (`abs`, `len`, `sorted` in its assertions), so
    code the test calls could swap one for a liar, let the test's own call take
    the lie and put the real one back before any check. Each protected test
    module that never names `builtins` (so never patches one for itself) is given
    this copy as it is first run; at the start of every test (after its fixtures)
    it is brought in line with Python's builtins, save values the patch's code
    made. A builtin swapped while the test runs is then not the one the test
    calls; a test that patches builtins itself runs with Python's, as before.
    Only the monitor writes the copy: any other write is tampering.
    """

    def __init__(self, origins: Origins, tag: Any) -> None:
        self.origins = origins
        self.namespace: dict[str, Any] = dict(_MODULE_DICT(_BUILTINS))
        self.view = tag(self.namespace) if tag is not None else None
        self.mentions: dict[str, bool] = {}  # by file: whether its source names `builtins`
        self.written = self._state()
        self.real: list[Any] = list(self.namespace.values())  # Python's, when last taken
        self.original = dict(self.namespace)  # Python's builtins as they were

    def _state(self) -> Any:
        """What only the monitor's writes may change: the tag, else the values."""
        if self.view is not None:
            return self.view.value
        return list(self.namespace.values())

    def wanted(self, filename: str) -> bool:
        """Whether a protected module of this file runs with the copy (its source never
        names `builtins`, so it does not patch them for its own calls)."""
        found = self.mentions.get(filename)
        if found is None:
            try:
                found = b"builtins" in read_source(filename)
            except OSError:
                found = True
            self.mentions[filename] = found
        return not found

    def refresh(self) -> "list[str]":
        """At a test's start and after each phase: take what Python's builtins hold now
        (a fixture's patch, its undoing), save what the patch's code made; returns what
        was found written meanwhile."""
        problems: list[str] = []
        self.check(problems)
        real = _MODULE_DICT(_BUILTINS)
        now = list(real.values())
        if same(now, self.real):
            return problems  # Python's builtins hold what they held: nothing to take
        self.real = now
        copy = self.namespace
        for name, value in list(real.items()):
            if copy.get(name, _MISSING) is not value and not self._patch_made(name, value):
                copy[name] = value
        for name in [name for name in copy if name not in real]:
            del copy[name]
        self.written = self._state()
        return problems

    def _patch_made(self, name: str, value: Any) -> bool:
        """Whether a builtin's new value is the patch's to give, or no test suite's own:
        made by the patch's code; an object that holds code of the patch's (a mock whose
        `side_effect` is the patch's); or code of the interpreter's own (a builtin, a
        slot, a partial or method of one: `_interpreter_code`) that is not this builtin
        itself (`all` made `bool`, `abs` a partial of `min`), which would decide the
        test's checks with no frame of Python's to be seen."""
        if self.origins.from_tree(value):
            return True
        if _interpreter_code(value):
            return value is not self.original.get(name, _MISSING)
        try:
            held = object.__getattribute__(value, "__dict__")
        except AttributeError:
            return False
        values = list(held.values()) if type(held) is dict else []
        return any(self.origins.from_tree(item) for item in values[:256])

    def check(self, problems: "list[str]") -> None:
        now = self._state()
        if not (now == self.written if self.view is not None else same(now, self.written)):
            problems.append("the test modules' builtins were written by the code under test")
            self.written = now


def own_builtins(namespace: "dict[str, Any]") -> "tuple[dict[str, Any], tuple[str, ...]]":
    """The builtins the functions of the monitor's `namespace` call, and which of them to
    compare: all of a copy of its own (the boot gives it one, which nothing else calls or
    writes), or, where they are Python's (run without the boot), `OWN_BUILTINS`."""
    builtins_ = namespace.get("__builtins__")
    if type(builtins_) is not dict:
        builtins_ = _MODULE_DICT(builtins_)
    if builtins_ is _MODULE_DICT(_BUILTINS):
        return builtins_, OWN_BUILTINS
    return builtins_, tuple(builtins_)


def framework_builtins() -> "dict[str, Any]":
    """A copy of Python's builtins for the test frameworks' modules to run with.

    Test suites patch `builtins` for the code they test (`mock.patch("builtins.open")`)
    and put it back, so a builtin changed and put back there says nothing; the
    frameworks' modules (pytest's, unittest's, Django's test framework) are given this
    copy as they are first run (`run_with_framework_builtins`), which no test touches:
    a builtin a framework calls as it judges a test (`isinstance`, `abs`) is no longer
    one the patch can swap for that call, except by writing here, which is tampering.
    """
    return dict(_MODULE_DICT(_BUILTINS))


def run_with_framework_builtins(
    frame: Any, code: Any, builtins_: "dict[str, Any]", tests: Any = None
) -> None:
    """At the `exec` audit event of `code` (`frame`: the caller of `exec`), before it
    runs: a framework module's namespace gets `builtins_` (its functions keep what they
    are made with), a protected test module's the tests' own (`tests`, a
    `TestsBuiltins`, where it wants them), and any other that got them from the code
    calling `exec` (`exec` fills in its caller's: pytest's rewritten test modules,
    SymPy's test files) gets Python's back."""
    if frame is None:
        return
    local = frame.f_locals
    found = []
    args = local.get("args")  # the import system's _call_with_frames_removed(exec, code, ns)
    if type(args) is tuple and len(args) > 1 and args[0] is code and type(args[1]) is dict:
        found.append(args[1])
    module = local.get("module")  # a loader's own exec_module(module)
    if type(module) is type(sys):
        found.append(_MODULE_DICT(module))
    for value in list(local.values()):  # `exec(code, namespace)` with a dict of its own
        if type(value) is dict and value.get("__builtins__") is builtins_:
            found.append(value)
    for namespace in found:
        name = namespace.get("__name__")
        now = namespace.get("__builtins__")
        framework = name not in ("builtins", "ast") and framework_module(name)
        python = now is _BUILTINS or now is _MODULE_DICT(_BUILTINS)
        filename = code.co_filename
        if framework and python:
            namespace["__builtins__"] = builtins_
        elif (
            not framework
            and tests is not None
            and (python or now is builtins_)
            and tests.origins.is_protected(filename)
            and tests.wanted(filename)
        ):
            namespace["__builtins__"] = tests.namespace
        elif not framework and now is builtins_:
            namespace["__builtins__"] = _MODULE_DICT(_BUILTINS)
