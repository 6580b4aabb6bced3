"""The daemon's pytest runner: runs in the sandbox after the monitor, imports no jouled.

The boot code executes the monitor and then this file into one namespace
(`jouled_monitor.py` describes how, and what the monitor checks), and calls
`main`. pytest and this plugin load before anything of the tree is
importable; then (MODE "module", as `python -m pytest` does) the working
directory goes on `sys.path` and pytest runs. The plugin hands every report
to the monitor through `sys.audit`; test outcomes never come from pytest's
junit or terminal output, which the code under test can rewrite at will.

What this file adds to the monitor's checks: pytest's plugin manager (no
implementation or wrapper from the patch on a hook that makes, changes or
writes reports; the config, session, plugin manager and hook callers keep
their own functions), the running item (no method replaced by the patch's
code; its test function is the one its file defines, wrapped in an observer
that tells the monitor how it ended), and the test modules pytest rewrote
(compared with a fresh rewrite where the monitor could not check the
rewriting as it ran). The canaries are added to the paths pytest collects
once it has parsed its arguments (a directory argument that holds one finds it
there), never on the command line.
"""

import inspect as _inspect
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files, executed first
    from jouled.pipeline.jouled_case import (
        binding_problems,
        identity_problems,
        machinery_problems,
    )
    from jouled.pipeline.jouled_failures import module_of_patch, signal_failures
    from jouled.pipeline.jouled_hook import start
    from jouled.pipeline.jouled_monitor import (
        EVENT,
        read_setup,
        run_could_write,
    )
    from jouled.pipeline.jouled_observe import (
        _attr,
        awaits,
        function_problems,
        guard_part_executor,
        observe_within,
        observer,
        put_back,
    )
    from jouled.pipeline.jouled_origins import (
        _TYPE_DICT,
        Origins,
        _FunctionType,
        _MethodType,
        nested_codes,
    )
    from jouled.pipeline.jouled_snapshot import same

# What a hook implementation may be besides a Python function or method (where the
# plugin is not the patch's): one a compiled plugin of the environment's defines.
_COMPILED = ("builtin_function_or_method", "cython_function_or_method")
# pytest's hooks an implementation of the patch's may answer: those that only read or
# print, start or end the session's bookkeeping, or can at most leave a test out (which
# no grade counts as passed). Every other hook of pytest's computes what a test is, what
# it is given or how its outcome is made and reported (`pytest_runtest_makereport`,
# `pytest_fixture_setup`, `pytest_collection_modifyitems`, `pytest_generate_tests`, ...).
READ_ONLY_HOOKS = frozenset(
    {
        "pytest_addoption",
        "pytest_addhooks",
        "pytest_configure",
        "pytest_unconfigure",
        "pytest_plugin_registered",
        "pytest_sessionstart",
        "pytest_report_header",
        "pytest_report_collectionfinish",
        "pytest_terminal_summary",
        "pytest_assertion_pass",
        "pytest_warning_recorded",
        "pytest_runtest_logstart",
        "pytest_runtest_logfinish",
        "pytest_internalerror",
        "pytest_keyboard_interrupt",
        "pytest_enter_pdb",
        "pytest_leave_pdb",
        "pytest_ignore_collect",
        "pytest_deselected",
        "pytest_markeval_namespace",
    }
)


class Registry:
    """pytest's plugin manager: which hook implementations run, and who made them."""

    def __init__(self, origins: "Origins", config: Any) -> None:
        self.origins = origins
        self.config = config
        self.pm = _attr(config, "pluginmanager")
        self.relay = _attr(self.pm, "hook") if self.pm is not None else None
        self.known: "dict[str, list[Any]]" = {}
        self.objects: "list[list[Any]]" = []
        self.last: "list[Any]" = []
        self.callers: "list[Any]" = []
        self.lists: "list[Any]" = []  # the callers' lists of implementations
        for obj in (self.config, self.pm, self.relay):
            if obj is not None:
                self.add_object(type(obj).__name__, obj)
        # pytest's own assertion rewriting, as it is now (before any code of the tree ran).
        rewrite = sys.modules.get("_pytest.assertion.rewrite")
        self.rewrite_test = getattr(rewrite, "_rewrite_test", None)
        self.hook_type = getattr(rewrite, "AssertionRewritingHook", None)
        self.rewriting = any(type(finder) is self.hook_type for finder in sys.meta_path)

    def verify_module(self, name: str, module: Any, filename: str, problems: "list[str]") -> None:
        """A test module: one pytest rewrites was rewritten, and its functions are exactly
        what pytest's rewriting makes of the file (so nothing changed pytest's rewriting,
        or its input, meanwhile)."""
        namespace = object.__getattribute__(module, "__dict__")
        spec = namespace.get("__spec__")
        loader = getattr(spec, "loader", None)
        if self.rewrite_test is None:
            return
        real = self.origins.realpath(filename)
        if real in self.origins.canaries:
            return  # a canary made to pass shows as one
        if type(loader) is not self.hook_type:
            # pytest rewrites every test file it collects: one loaded past its rewriting
            # (the hook told it is writing bytecode, taken out of the import path) fails
            # with no word to the monitor
            if self.rewriting and self._collected_name(filename):
                problems.append(f"test module {name} was not rewritten by pytest")
            return
        if real in self.origins.rewritten:
            return  # checked as it was made
        try:
            made = self.rewrite_test(_Path(filename), self.config)[-1]
        except Exception:  # an older pytest's signature, an unreadable file: not comparable
            return
        expected = {}
        todo = [made]
        while todo:
            code = todo.pop()
            expected[(code.co_name, code.co_firstlineno)] = code
            todo.extend(c for c in code.co_consts if type(c) is type(made))
        functions = [v for v in list(namespace.values()) if type(v) is _FunctionType]
        for value in list(namespace.values()):
            if isinstance(value, type) and _TYPE_DICT(value).get("__module__") == name:
                functions += [v for v in _TYPE_DICT(value).values() if type(v) is _FunctionType]
        for function in functions:
            code = function.__code__
            if code.co_filename != filename and code.co_filename != made.co_filename:
                continue  # imported from elsewhere
            if expected.get((code.co_name, code.co_firstlineno)) != code:
                problems.append(
                    f"{name}.{code.co_name} is not what pytest makes of its source in {filename}"
                )
                return

    def _collected_name(self, filename: str) -> bool:
        """Whether pytest rewrites a file of this name (conftest, `python_files`)."""
        base = os.path.basename(filename)
        try:
            patterns = self.config.getini("python_files")
        except Exception:  # an older pytest's config: no word on the patterns
            return base == "conftest.py"
        return base == "conftest.py" or any(
            _fnmatch(base, pattern) for pattern in patterns if "/" not in pattern
        )

    def add_object(self, label: str, obj: Any) -> None:
        namespace = object.__getattribute__(obj, "__dict__")
        self.objects.append([label, namespace, []])

    def fingerprint(self) -> "list[Any]":
        """Everything checked below, in a few passes of C code (no `id`: it is audited)."""
        relay = object.__getattribute__(self.relay, "__dict__")
        callers = list(relay.values())
        if not same(callers, self.callers):
            self.callers = callers
            self.lists = [
                impls
                for caller in callers
                for attr in ("_hookimpls", "_wrappers", "_nonwrappers")
                for impls in (_attr(caller, attr),)
                if type(impls) is list
            ]
        values = list(_chain(map(_VALUES, [entry[1] for entry in self.objects])))
        values += callers
        values += _chain(self.lists)
        values += map(_HOOKEXEC, callers)
        values += (_attr(self.config, "pluginmanager"), _attr(self.pm, "hook"))
        return values

    def check(self, problems: "list[str]") -> None:
        if self.pm is None or self.relay is None:
            problems.append("pytest's plugin manager is missing")
            return
        if same(self.fingerprint(), self.last):
            return
        self._full(problems)
        self.last = self.fingerprint()

    def _full(self, problems: "list[str]") -> None:
        if _attr(self.config, "pluginmanager") is not self.pm:
            problems.append("config.pluginmanager was replaced")
        if _attr(self.pm, "hook") is not self.relay:
            problems.append("the plugin manager's hook relay was replaced")
        for entry in self.objects:
            label, namespace, values = entry
            now = list(namespace.values())
            if same(now, values):
                continue
            for attr, value in list(namespace.items()):
                found = self.origins.from_tree(value)
                if found:
                    problems.append(f"the {label}'s {attr} was replaced by code from {found}")
            entry[2] = now
        for name, caller in list(object.__getattribute__(self.relay, "__dict__").items()):
            found = self.origins.from_tree(type(caller))
            if found:
                problems.append(f"hook {name} is an object from {found}")
                continue
            for attr in ("_hookimpls", "_wrappers", "_nonwrappers"):
                impls = _attr(caller, attr)
                if type(impls) is list:
                    for impl in impls:
                        self._impl(name, impl, problems)
            found = self.origins.from_tree(_attr(caller, "_hookexec"))
            if found:
                problems.append(f"hook {name} calls its implementations through code from {found}")

    def _impl(self, hook: str, impl: Any, problems: "list[str]") -> None:
        if any(seen is impl for seen in self.known.get(hook, ())):
            return
        function = _attr(impl, "function")
        found = self.origins.from_tree(type(impl)) or self.origins.from_tree(function)
        guarded = hook.startswith("pytest_") and hook not in READ_ONLY_HOOKS
        if guarded:
            # Who made the plugin counts too, and what is not a function is judged by
            # nothing it can hide behind (a mock whose side effect is the patch's).
            found = found or self._plugin_from_tree(_attr(impl, "plugin"))
            kind = type(function).__name__
            plain = type(function) in (_FunctionType, _MethodType) or kind in _COMPILED
            if not found and not plain:
                found = f"a {kind}, not a function"
        if found and guarded:
            problems.append(f"an implementation of {hook} from {found} is registered")
            return
        self.known.setdefault(hook, []).append(impl)

    def _plugin_from_tree(self, plugin: Any) -> str:
        """Where the patch's code stands behind a plugin object: its class, or, for a
        module, its file or a function of the patch's it holds."""
        if not isinstance(plugin, type(sys)):
            return self.origins.from_tree(plugin)
        return module_of_patch(plugin, self.origins)


_HOOKEXEC = __import__("operator").attrgetter("_hookexec")
_fnmatch = __import__("fnmatch").fnmatch
_VALUES = __import__("operator").methodcaller("values")
_chain = __import__("itertools").chain.from_iterable
_Path = __import__("pathlib").Path


def item_problems(item: Any, origins: "Origins") -> "list[str]":
    """Why `item` no longer runs the code its file defines; [] when nothing says so."""
    problems: "list[str]" = []
    namespace = getattr(item, "__dict__", {})
    for attr, value in list(namespace.items()):
        if attr in ("obj", "_obj", "funcargs", "_request", "_fixtureinfo", "fixturenames"):
            continue
        if callable(value) and not isinstance(value, type):
            found = origins.from_tree(value)
            if found:
                problems.append(f"the test item's {attr} was replaced by code from {found}")
    found = origins.from_tree(type(item))
    if found:
        problems.append(f"the test item is an instance of a class from {found}")
    function = namespace.get("_obj", namespace.get("obj"))
    if function is not None:
        problems += function_problems(function, origins)
        name = namespace.get("originalname") or namespace.get("name")
        if type(name) is str and type(item).__name__ in ("Function", "TestCaseFunction"):
            cls = getattr(item, "cls", None)
            module = getattr(item, "module", None) if cls is None else None
            problems += identity_problems(function, cls, name, module)
    instance = unittest_case(item)
    if function is not None:  # called with the test's own `self`, or none
        problems += binding_problems(function, test_instance(item))
    if instance is not None:
        problems += machinery_problems(type(instance), origins, instance)  # a unittest case's
        named, name = _attr(instance, "_testMethodName"), _attr(item, "name")
        if type(named) is str and type(name) is str and named != name.partition("[")[0]:
            problems.append(f"the unittest case runs {named}, not the test {name}")
    return problems


def test_instance(item: Any) -> Any:
    """The object a pytest item's test method runs on (its class's instance, or the
    unittest case), None for a test function."""
    instance = unittest_case(item)
    if instance is None and getattr(item, "cls", None) is not None:
        instance = getattr(item, "instance", None)
    return instance


def unittest_case(item: Any) -> Any:
    """The unittest case a pytest item runs (pytest's own attribute for it differs by
    version), None for any other item."""
    if type(item).__name__ != "TestCaseFunction":
        return None
    namespace = getattr(item, "__dict__", {})
    return namespace.get("_testcase", namespace.get("_instance"))


# -- the plugin -----------------------------------------------------------------------------


def canary_args(config: Any, canaries: "list[str]") -> "list[str]":
    """The canaries to collect as path arguments beside `config.args`: those no directory
    argument holds. One a directory argument holds (its name one pytest collects there) is
    found in it: pytest 8.0 to 8.3, named a directory and a file in it, collects the file
    alone, and the directory's tests would never run."""
    import fnmatch

    params = getattr(config, "invocation_params", None)
    base = str(getattr(params, "dir", "") or os.getcwd())
    dirs = []
    for arg in config.args:
        path = os.path.join(base, str(arg).split("::")[0])
        if os.path.isdir(path):
            dirs.append(os.path.realpath(path).rstrip(os.sep) + os.sep)
    patterns = list(config.getini("python_files") or [])
    out = []
    for canary in canaries:
        real = os.path.realpath(os.path.join(base, canary))
        named = any(fnmatch.fnmatch(os.path.basename(real), p) for p in patterns)
        if not (named and any(real.startswith(d) for d in dirs)):
            out.append(canary)
    return out


def environment_plugins(root: str) -> "list[tuple[str, Any]]":
    """The pytest plugins the test environment installed, as (entry point name, plugin).

    What pytest's autoloading would load (every `pytest11` entry point), but only
    from distributions in a directory the run cannot write: a dist-info the patch
    adds to the tree, or the tree's own (an editable install's egg-info), is not
    the environment's. Loaded here, before the tree is first on `sys.path`, so a
    module of the tree cannot stand in for a plugin's.
    """
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8: the backport pytest itself depends on there
        try:
            import importlib_metadata as metadata  # type: ignore[no-redef]
        except ImportError:
            return []
    top = os.path.realpath(root)
    names = set()  # type: set[str]
    found = []
    for dist in list(metadata.distributions()):
        where = os.path.realpath(str(dist.locate_file("")))
        if where == top or where.startswith(top + os.sep) or run_could_write(where):
            continue
        for point in dist.entry_points:
            if point.group == "pytest11" and point.name not in names:
                names.add(point.name)
                found.append((point.name, point.load()))
    return found


def make_plugin(
    audit: Any, pytest: Any, canaries: "list[str]", installed: "list[tuple[str, Any]]"
) -> Any:
    """The pytest plugin: hands every report to the monitor through `audit` (sys.audit).

    `installed` are the environment's plugins (`environment_plugins`): registered
    under their entry point names before pytest reads its options, where its own
    autoloading would, so `-p no:NAME` still unregisters one.
    """

    class Reporter:
        __slots__ = ()

        @pytest.hookimpl(tryfirst=True)
        def pytest_cmdline_parse(self, pluginmanager: Any, args: Any) -> None:
            for name, loaded in installed:
                if pluginmanager.get_plugin(name) is None and not pluginmanager.is_blocked(name):
                    pluginmanager.register(loaded, name=name)

        @pytest.hookimpl(tryfirst=True)
        def pytest_load_initial_conftests(self, early_config: Any) -> None:
            audit(EVENT, "arm", early_config)

        @pytest.hookimpl(trylast=True)
        def pytest_configure(self, config: Any) -> None:
            # The canaries are collected like the tests, but are on no command line.
            config.args.extend(canary_args(config, canaries))

        def pytest_sessionstart(self, session: Any) -> None:
            audit(EVENT, "session", session)
            audit(EVENT, "start", "pytest", pytest.__version__)

        def pytest_collectreport(self, report: Any) -> None:
            if report.failed:
                audit(EVENT, "collect", report.nodeid)

        def pytest_collection_finish(self, session: Any) -> None:
            audit(EVENT, "collected", session)

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_call(self, item: Any) -> None:
            function = item.__dict__.get("_obj")
            observed, how = observe(item)
            put_back(within.pop() if within else None)
            if observed is not None:  # and inside its wrappers, the test's own function
                within.append(observe_within(audit, function, item.nodeid, test_instance(item)))
            inner = within[0] if within else None
            audit(EVENT, "item", item, item.nodeid, how, function, observed, inner)
            if observed is not None:
                item.obj = observed
                if _inspect.iscoroutinefunction(function):
                    # pytest leaves an async unittest case to unittest, which looks the
                    # method up on the test itself: the observer goes there.
                    instance = unittest_case(item)
                    if instance is not None:
                        setattr(instance, item.name, observed)

        def pytest_runtest_logreport(self, report: Any) -> None:
            audit(
                EVENT,
                "test",
                report.nodeid,
                report.when,
                report.outcome,
                hasattr(report, "wasxfail"),
                report,
            )
            if report.when == "call":
                put_back(within.pop() if within else None)

        def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
            audit(EVENT, "finish", int(exitstatus))

    within: "list[Any]" = []  # the running test's `observe_within`, until its report

    def observe(item: Any) -> "tuple[Any, Any]":
        """The test function of a pytest item, wrapped to tell the monitor how it ended,
        and how far that holds: "strict" for a plain function (pytest calls `item.obj`,
        so a report may say `passed` only for a function that ran and returned),
        "raised" for a unittest case (pytest versions differ in how they call it: only
        a raise it reports counts) and a coroutine function (the plugin that runs it
        may call it its own way), None for anything else (doctests, other plugins)."""
        kind = type(item)
        if kind.__module__ == "_pytest.python" and kind.__name__ == "Function":
            how = "strict"
        elif kind.__module__ == "_pytest.unittest" and kind.__name__ == "TestCaseFunction":
            how = "raised"
        else:
            return None, None
        function = item.__dict__.get("_obj")
        if function is None:
            return None, None
        if _inspect.iscoroutinefunction(function):
            # (unittest's async test case awaits it, through the observer put on the case
            # itself: there it must run, as a plain function must)
            how = "strict" if awaits(unittest_case(item)) else "raised"
        return observer(audit, function, item.nodeid), how

    return Reporter()


def plugin_codes() -> "tuple[Any, ...]":
    """Every function `make_plugin` defines, and the observer's: the only code whose
    records the monitor takes."""
    return (
        *nested_codes(make_plugin),
        *nested_codes(observer),
        *nested_codes(guard_part_executor),
        *nested_codes(signal_failures),
    )


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    key, setup = read_setup()
    # Nothing the checks rely on stays in this frame, which code of the tree can read.
    audit, register = start(key, setup, main.__code__, Registry, item_problems)
    del key
    import pytest

    installed = environment_plugins(setup["root"]) if setup.get("plugins") else []
    plugin = make_plugin(audit, pytest, list(setup.pop("canaries", [])), installed)
    guard_part_executor(audit, __import__("unittest.case").case)
    modules = sys.modules
    rewrite, outcomes = modules.get("_pytest.assertion.rewrite"), modules.get("_pytest.outcomes")
    signal_failures(audit, modules["unittest.case"], rewrite, outcomes)
    register(plugin_codes())
    if mode == "module":
        sys.path.insert(0, os.getcwd())
    sys.argv = [sys.argv[0], *args]
    code = pytest.main(list(args), plugins=[plugin])
    sys.exit(int(code))
