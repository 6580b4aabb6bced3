"""What may not change while tests run: namespaces kept by the identity of every value.

The third of the monitor's files (`jouled_monitor.py` says how they run). A
`Snapshot` takes the module globals and class attributes of the test framework
at arming and compares them at every call reported passed and at the end; a
test module is held to the names its own source binds.
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_monitor import (
        JUDGING_HELPERS,
        MEMORY_MODULES,
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
    )

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
        # [label, namespace, keys, ids, strict, version tag (a module's), its value when read]
        self.entries: list[list[Any]] = []
        self.tagged: list[int] = []  # the positions of the entries with a version tag
        self.seen_modules: dict[str, Any] = {}
        self.module_count = -1
        self.classes: dict[tuple[str, str], Any] = {}
        self.test_modules: dict[str, Any] = {}
        self.sys_values: list[Any] = []
        self.last: list[Any] = []
        self.fresh: list[tuple[str, Any, str]] = []  # test modules not yet compared
        self.deep = True
        self.offsets: list[int] = []
        self.entries_seen = 0
        # The namespaces compared and views of their values, made again only after one was
        # taken in (`taken` counts those) rather than at every check.
        self.taken = 0
        self.views_made = -1
        self.namespaces: list[Any] = []
        self.views: list[Any] = []

    def add(self, label: str, namespace: Any, strict: bool = False, module: bool = False) -> None:
        tag = self.tag(namespace) if module and self.tag is not None else None
        entry = [label, namespace, list(namespace), list(namespace.values()), strict, tag, 0]
        if tag is not None:
            entry[6] = tag.value
            self.tagged.append(len(self.entries))
        self.entries.append(entry)
        self.taken += 1

    def arm(self, problems: "list[str]", deep: bool) -> None:
        """Take the watched namespaces as they are; `deep`: also judge every value in them
        (needed only when code of the tree ran before this: a plugin the configuration loads)."""
        self.deep = deep
        if self.framework_builtins is not None:
            # Nothing but the patch writes here: any value changed, even put back, is its.
            label = "the test frameworks' builtins"
            self.add(label, self.framework_builtins, strict=True, module=True)
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
                self.add(name, _MODULE_DICT(module), module=True)
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
        # Its version tag is read for a value swapped and put back within a test, save in
        # the two namespaces test suites patch and put back themselves (`builtins.open`,
        # `unittest.main`), whose values the frameworks' checks do not turn on.
        self.add(name, namespace, module=name not in UNTAGGED)

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
        self.taken += 1
        self.fresh.append((name, module, filename))

    def fingerprint(self) -> "list[Any]":
        """Every watched value and each namespace's size, in a few passes of C code (no
        `id`: it is audited); names are compared when a namespace changed."""
        if self.views_made != self.taken:
            self.namespaces = [entry[1] for entry in self.entries]
            self.namespaces += [entry[1] for entry in self.test_modules.values()]
            self.views = list(map(_VALUES, self.namespaces))
            self.views_made = self.taken
        sizes = list(map(len, self.namespaces))
        self.offsets = list(_accumulate([0, *sizes[: len(self.entries)]]))
        values = list(_chain(self.views))
        values += sizes
        sys_namespace = _MODULE_DICT(sys)
        values += [sys_namespace.get(name) for name in SYS_WATCHED]
        return values

    def check(self, problems: "list[str]", scan: bool = True) -> None:
        """What changed since the last check; `scan`: take in modules loaded since too
        (never in the middle of an import, whose module is not whole yet)."""
        if scan:
            self.scan_modules(problems)
        written = self._written()
        offsets, seen, last = self.offsets, self.entries_seen, self.last
        now = self.fingerprint()
        changed = None
        if len(now) == len(last) and len(self.entries) == seen:
            # The namespaces whose values moved (their sizes are equal, or `now` would not
            # be as long): found by position in one pass of C code, so pytest's own
            # per-test state (the assertion plugin's hooks, set and reset around every
            # test) costs little.
            moved = list(_compress(_COUNT(), map(_NOT_IS, now, last)))
            changed = sorted({_bisect(self.offsets, i) - 1 for i in moved})
        elif 0 < seen < len(self.entries) and self.offsets[: seen + 1] == offsets[: seen + 1]:
            # Namespaces taken in since the last check (judged as they were taken) after
            # the others, whose sizes held: those compared by position as above.
            end = offsets[seen]
            moved = list(_compress(_COUNT(), map(_NOT_IS, now[:end], last[:end])))
            changed = sorted({_bisect(self.offsets, i) - 1 for i in moved})
        differ = self._full(problems, changed) if changed != [] else set()
        self._put_back(problems, written, differ)
        # What was compared is what is now: nothing of the tree's runs in a check.
        self.last = now
        self.entries_seen = len(self.entries)

    def _written(self) -> "list[int]":
        """The module namespaces written since the last check, by their version tags
        (taken in as they are read)."""
        moved = []
        entries = self.entries
        for index in self.tagged:
            entry = entries[index]
            value = entry[5].value
            if value != entry[6]:
                entry[6] = value
                moved.append(index)
        return moved

    def _put_back(self, problems: "list[str]", written: "list[int]", differ: "set[int]") -> None:
        """A module namespace written since the last check that holds what it held: a
        value was swapped and put back in between, while a test ran (a framework helper
        the test called, changed for that call alone)."""
        for index in written:
            if index not in differ:
                label = self.entries[index][0]
                problems.append(f"{label} was written and put back since the last check")

    def _full(self, problems: "list[str]", changed: "list[int] | None" = None) -> "set[int]":
        """Compare the namespaces at `changed` (all of them: None); returns the positions of
        those whose values or names differ, and takes them in."""
        indices = range(len(self.entries)) if changed is None else changed
        differ: set[int] = set()
        for index in indices:
            if not 0 <= index < len(self.entries):
                continue
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
        return differ


# Namespaces whose version tags are not read (see `_take_module`).
UNTAGGED = ("builtins", "unittest")
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
    names: set[str] = set()
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


def _children(node: Any) -> "list[Any]":
    """The syntax nodes directly under `node`."""
    found: list[Any] = []
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


def version_tags() -> Any:
    """A maker of views of a dict's version tag, or None where none can be read.

    CPython 3.8-3.13 keep in every dict a tag (PEP 509) that takes a new value
    whenever the dict is written with another object than it held, and never
    otherwise: a module namespace whose tag moved while its values did not was
    written and put back. Reading it needs ctypes, loaded here before any code
    of the tree runs and then taken out of `sys.modules`, so the tree's own
    `import` of it meets the monitor as if it never was. The layout is proved on
    dicts made here (the size beside the tag, the tag moving on a write and
    only then); an interpreter where it does not hold gets None: 3.6 and 3.7
    (the tag moves on every store, the same object too), 3.14 and free-threaded
    builds (another layout).
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
    tag_type, size_type = ctypes.c_uint64, ctypes.c_ssize_t

    def tag(namespace: Any) -> Any:
        return tag_type.from_address(id(namespace) + 3 * word)

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
    except Exception:
        return None
    if not (
        size.value == len(probe) == 1
        and held == start
        and start < grown < swapped
        and beside.value == start_beside
    ):
        return None
    return tag


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


def run_with_framework_builtins(frame: Any, code: Any, builtins_: "dict[str, Any]") -> None:
    """At the `exec` audit event of `code` (`frame`: the caller of `exec`), before it
    runs: a framework module's namespace gets `builtins_` (its functions keep what they
    are made with), and any other that got them from the code calling `exec` (`exec`
    fills in its caller's: pytest's rewritten test modules, SymPy's test files) gets
    Python's back."""
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
        framework = (
            type(name) is str
            and name not in ("builtins", "ast")
            and (_top(name) in WATCHED or name.startswith(WATCHED_PREFIXES))
        )
        if framework and (now is _BUILTINS or now is _MODULE_DICT(_BUILTINS)):
            namespace["__builtins__"] = builtins_
        elif not framework and now is builtins_:
            namespace["__builtins__"] = _MODULE_DICT(_BUILTINS)
