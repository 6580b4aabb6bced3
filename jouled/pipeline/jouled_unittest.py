"""The daemon's unittest runner: runs in the sandbox after the monitor, imports no jouled.

The boot code executes the monitor and then this file into one namespace
(`jouled_monitor.py` describes how, and what the monitor checks) and calls
`main`, which runs a test script (Django's `tests/runtests.py`) or
`python -m unittest` exactly as the interpreter would: same `sys.argv`,
`sys.path[0]` the script's directory (or the working directory for `-m`),
`__main__` as its name.

Before any of it runs, the result methods of `unittest.result.TestResult`
(which every unittest result class calls, Django's included) are wrapped to
hand each outcome to the monitor through `sys.audit`, and `startTest` to have
the running test's function checked. The monitor watches unittest's and
`django.test`'s namespaces from then on. The run's log still carries the
verdict of record (the repository's own parser reads it); the daemon holds
it against these authenticated outcomes, and a log that reports a test
passing which the runner saw fail is a forgery.
"""

import inspect as _inspect
import os
import runpy
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files, executed first
    from jouled.pipeline.jouled_case import (
        binding_problems,
        identity_problems,
        machinery_problems,
    )
    from jouled.pipeline.jouled_failures import signal_failures
    from jouled.pipeline.jouled_hook import start
    from jouled.pipeline.jouled_monitor import (
        EVENT,
        exit_status,
        read_setup,
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
        Origins,
        nested_codes,
    )

# unittest result method -> (outcome, expected failure) recorded for its test
OUTCOMES = {
    "addSuccess": ("passed", False),
    "addFailure": ("failed", False),
    "addError": ("failed", False),
    "addSkip": ("skipped", False),
    "addExpectedFailure": ("skipped", True),
    "addUnexpectedSuccess": ("failed", False),
}


def test_problems(test: Any, origins: "Origins") -> "list[str]":
    """Why a unittest test no longer runs the method its class defines; [] when nothing says so."""
    name = _attr(test, "_testMethodName")
    if name is None:
        return []  # a setUpClass/module error holder: no method of its own
    found = origins.from_tree(type(test))
    if found:
        return [f"the test is an instance of a class from {found}"]
    machinery = machinery_problems(type(test), origins, test)  # a name not a str too
    if machinery or type(name) is not str:
        return machinery
    namespace = getattr(test, "__dict__", {})
    method = namespace.get(name) if isinstance(namespace, dict) else None
    if method is None:
        method = getattr(type(test), name, None)
    if method is None:
        return [f"the test's method {name} is gone"]
    # What runs may be the runner's observer or the framework's wrapper (Django wraps
    # async tests on the instance): every layer, followed to the method, is checked,
    # and the method must be the one its class's source defines under its name.
    problems = function_problems(method, origins) + binding_problems(method, test)
    return problems + identity_problems(method, type(test), name, None)


def test_id(test: Any) -> str:
    """unittest's own id of a test ("package.module.Class.method")."""
    try:
        value = test.id()
    except Exception:  # an error holder or a broken test: its text instead
        value = str(test)
    return value if type(value) is str else str(value)


def install_reporter(audit: Any) -> "tuple[Any, ...]":
    """Wrap TestResult's result methods; returns the wrappers' code (the monitor's callers)."""
    import unittest.case
    import unittest.result

    result_class = unittest.result.TestResult
    codes = []

    def wrap(method_name: str, outcome: str, xfail: bool) -> Any:
        original = result_class.__dict__[method_name]

        def reporter(self: Any, test: Any, *args: Any) -> Any:
            audit(EVENT, "test", test_id(test), "call", outcome, xfail, test)
            return original(self, test, *args)

        reporter.__name__ = reporter.__qualname__ = method_name
        return reporter

    for method_name, (outcome, xfail) in OUTCOMES.items():
        wrapper = wrap(method_name, outcome, xfail)
        setattr(result_class, method_name, wrapper)
        codes.append(wrapper.__code__)
    original_start = result_class.__dict__["startTest"]
    original_run = unittest.case.TestCase.__dict__["run"]
    original_subtest = result_class.__dict__["addSubTest"]
    failed_subtests = [0]

    def observe(test: Any) -> "tuple[Any, Any, Any]":
        """(the test's method wrapped to tell the monitor how it ended, the method, its
        own function observed inside its wrappers or None); (None, None, None): left as
        it is.

        A test reported passed must then be one whose method ran and returned,
        however unittest's machinery was changed, and changed back, meanwhile.
        """
        name = getattr(test, "_testMethodName", None)
        namespace = getattr(test, "__dict__", None)
        if type(name) is not str or type(namespace) is not dict:
            return None, None, None
        # What the test itself holds under its name is what unittest calls (Django puts
        # an async test there, in an object that runs it to completion): it is observed.
        method = namespace[name] if name in namespace else getattr(test, name, None)
        if method is None:
            return None, None, None
        tid = test_id(test)
        within = observe_within(audit, method, tid, test)
        return observer(audit, method, tid), method, within

    # test id -> (its observer, the method it wraps, `observe_within`), until it starts
    installed: "dict[str, tuple[Any, Any, Any]]" = {}

    def run(self: Any, result: Any = None) -> Any:
        # Before unittest looks the method up (3.12 does so before `startTest`).
        observed, method, within = observe(self)
        if observed is not None:
            installed[test_id(self)] = (observed, method, within)
            self.__dict__[self._testMethodName] = observed
        try:
            return original_run(self, result)
        finally:
            put_back(within)

    def startTest(self: Any, test: Any) -> Any:
        tid = test_id(test)
        observed, method, within = installed.pop(tid, (None, None, None))
        name = getattr(test, "_testMethodName", None)
        namespace = getattr(test, "__dict__", None)
        watching = (
            observed is not None and type(namespace) is dict and namespace.get(name) is observed
        )
        # A coroutine's observer hears it end wherever its event loop runs it: its raise
        # counts (a loop made to swallow it is found), as for pytest's coroutines.
        # (an async test case awaits it: there it must run, as a plain function must)
        coroutine = _inspect.iscoroutinefunction(method) and not awaits(test)
        how = ("raised" if coroutine else "strict") if watching else None
        # The test's own function inside its wrappers is heard even where the method on
        # the test was wrapped again (Django runs an async test through async_to_sync).
        audit(EVENT, "item", test, tid, how, method, observed, within)
        return original_start(self, test)

    def addSubTest(self: Any, test: Any, subtest: Any, err: Any) -> Any:
        if err is not None:
            failed_subtests[0] += 1
            when = f"subtest-{failed_subtests[0]}"
            audit(EVENT, "test", test_id(test), when, "failed", False, test)
        return original_subtest(self, test, subtest, err)

    guard_part_executor(audit, unittest.case)
    signal_failures(audit, unittest.case, None)
    setattr(result_class, "startTest", startTest)  # noqa: B010
    setattr(unittest.case.TestCase, "run", run)  # noqa: B010
    setattr(result_class, "addSubTest", addSubTest)  # noqa: B010
    own = (startTest.__code__, addSubTest.__code__, observe.__code__)
    guards = (*nested_codes(guard_part_executor), *nested_codes(signal_failures))
    return (*codes, *own, *nested_codes(observer), *guards)


def main() -> None:
    mode, target, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    key, setup = read_setup()
    # The canaries' labels join the script's own, in this process only (on no command line).
    args = [*args, *setup.pop("labels", [])]
    # Nothing the checks rely on stays in this frame, which code of the tree can read.
    audit, register = start(key, setup, main.__code__, None, test_problems)
    del key
    codes = install_reporter(audit)
    register((*codes, main.__code__))
    audit(EVENT, "start", "unittest", sys.version.split()[0])
    audit(EVENT, "arm", None)
    code: Any = 0
    try:
        if mode == "module":
            sys.argv = [target, *args]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as done:
        code = done.code
    status = exit_status(code)
    audit(EVENT, "finish", status)
    sys.exit(code)
