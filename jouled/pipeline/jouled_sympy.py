"""The daemon's SymPy runner: runs in the sandbox after the monitor, imports no jouled.

The boot code executes the monitor and then this file into one namespace
(`jouled_monitor.py` describes how, and what the monitor checks) and calls
`main`, which runs SymPy's `bin/test` exactly as the interpreter would: same
`sys.argv`, `sys.path[0]` the script's directory, `__main__` as its name.

SymPy's runner reports every test through its reporter (`PyTestReporter` of
`sympy.testing.runtests`, `sympy.utilities.runtests` before SymPy 1.6): the
moment that module has run, its reporter's `entering_test` is wrapped to hand
the test function to the monitor (which checks it is the test file's own) and
its outcome methods to report that test's outcome through `sys.audit`. The
report names no test: the monitor takes the id of the test it was handed, so
nothing in the process decides which test an outcome belongs to. What the
monitor cannot see, the wrappers check before each report: that nothing on the
reporter instance shadows a method of its class (a failure method rebound to
the pass method leaves no code of the patch's on the stack), and that a pass
is not reported while the test's exception is being handled. An unexpected
pass (SymPy's `X`, which its log never calls `ok`) is reported as skipped, so
no `ok` in the log can stand on it. The daemon
sets `PYTHONHASHSEED` for the run, so SymPy runs its tests in this process
(hash randomization on, as the official command has it) rather than in a
child the monitor would not watch. The log is still the verdict of record;
the daemon holds it against these outcomes.
"""

import os
import runpy
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files, executed first
    from jouled.pipeline.jouled_hook import start
    from jouled.pipeline.jouled_monitor import (
        EVENT,
        exit_status,
        read_setup,
    )
    from jouled.pipeline.jouled_observe import (
        function_problems,
        innermost,
        observe_within,
        observer,
        put_back,
    )
    from jouled.pipeline.jouled_origins import (
        nested_codes,
    )

# The modules SymPy's test runner lives in, newest first.
RUNTESTS = ("sympy.testing.runtests", "sympy.utilities.runtests")
# reporter method -> (outcome, expected failure) recorded for the running test. SymPy's
# log writes `X` for an unexpected pass, never `ok`: reported as skipped, no log pass can
# stand on it (a library raising SymPy's XPass in a test would otherwise make one).
OUTCOMES = {
    "test_pass": ("passed", False),
    "test_fail": ("failed", False),
    "test_exception": ("failed", False),
    "test_skip": ("skipped", False),
    "test_xfail": ("skipped", True),
    "test_xpass": ("skipped", True),
}
_GETATTRIBUTE = object.__getattribute__
_CLASS_DICT: Any = type.__dict__["__dict__"].__get__
_CLASS_NAME: Any = type.__dict__["__name__"].__get__
_CLASS_MRO: Any = type.__dict__["__mro__"].__get__
_EXC_INFO = sys.exc_info
_GETFRAME = sys._getframe
# The context manager SymPy's runner calls each test in, and its name for the test called.
CALL_CONTEXT, CALLED = "raise_on_deprecated", "f"


def test_id(function: Any, root: str, seen: "dict[str, int]") -> str:
    """ "path/test_file.py::test_name" of a test function (a repeat gets "#2", "#3"...),
    by the file of its own `def` inside any wrappers that hold it."""
    code = getattr(innermost(function) or function, "__code__", None)
    filename = getattr(code, "co_filename", "")
    filename = filename if type(filename) is str else ""
    if filename.startswith(root + os.sep):
        filename = filename[len(root) + 1 :]
    name = getattr(function, "__name__", "")
    tid = f"{filename}::{name if type(name) is str else '?'}"
    seen[tid] = seen.get(tid, 0) + 1
    return tid if seen[tid] == 1 else f"{tid}#{seen[tid]}"


def shadowing(reporter: Any) -> str:
    """Why the reporter instance does not run its class's methods; "" when it does.

    An attribute of the instance named as a method (or any attribute) of its class
    is called instead of the class's: a failure method rebound to the pass method,
    say, which leaves no code of the patch's on the stack when it reports.
    """
    try:
        namespace = _GETATTRIBUTE(reporter, "__dict__")
    except AttributeError:
        return ""
    if type(namespace) is not dict:
        return "the reporter's attributes are not a plain dict"
    classes = [_CLASS_DICT(klass) for klass in _CLASS_MRO(type(reporter))]
    for name in list(dict.keys(namespace)):
        if type(name) is not str:
            return "the reporter has an attribute whose name is not a plain str"
        if any(name in namespace_of_class for namespace_of_class in classes):
            return f"the reporter's {name} is its instance's own attribute, not its class's"
    return ""


def observes(code: Any) -> bool:
    """Whether SymPy code `code` calls each test, as `f`, in the context manager the runner
    wraps (SymPy's `test_file` since 1.1): then every call's ending is observed."""
    names, local = getattr(code, "co_names", ()), getattr(code, "co_varnames", ())
    return type(names) is tuple and CALL_CONTEXT in names and CALLED in local


def wrap_calls(audit: Any, module: Any) -> None:
    """Wrap the context manager SymPy's runner calls each test in so that it tells the
    monitor how the call ended, before the manager's own exit runs (a forger's code in
    it could swallow the test's failure, and the runner would then report a pass)."""
    original = module.__dict__.get(CALL_CONTEXT)
    tests = module.__dict__.get("SymPyTests")
    test_file = tests.__dict__.get("test_file") if isinstance(tests, type) else None
    code = getattr(test_file, "__code__", None)
    if not callable(original) or not observes(code):
        return

    class Observed:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __enter__(self) -> Any:
            return self.inner.__enter__()

        def __exit__(self, kind: Any, value: Any, traceback: Any) -> Any:
            frame = _GETFRAME(1)
            if frame is not None and frame.f_code is code:
                # The test SymPy's runner is calling: the monitor takes this report only
                # where this frame's `function` is the running test's, and a raise always
                # wins over a return reported before it.
                function = frame.f_locals.get(CALLED)
                raised = ""
                if kind is not None:
                    named = _CLASS_NAME(kind) if issubclass(type(kind), type) else ""
                    raised = named if type(named) is str and named else "an exception"
                audit(EVENT, "ran", None, raised)
                del function
            return self.inner.__exit__(kind, value, traceback)

    def observed(*args: Any, **kwargs: Any) -> Any:
        return Observed(original(*args, **kwargs))

    observed.__name__ = observed.__qualname__ = CALL_CONTEXT
    setattr(module, CALL_CONTEXT, observed)


def wrap_reporter(audit: Any, module: Any, root: str, done: "list[Any]") -> None:
    """Wrap the reporter class of a runtests module, once."""
    reporter = module.__dict__.get("PyTestReporter")
    if not isinstance(reporter, type) or reporter in done:
        return
    done.append(reporter)
    namespace = reporter.__dict__
    seen: dict[str, int] = {}
    within: list[Any] = []  # the running test's `observe_within`, until its report

    def wrap(method_name: str, outcome: str, xfail: bool) -> Any:
        original = namespace[method_name]

        def report(self: Any, *args: Any, **kwargs: Any) -> Any:
            why = shadowing(self)
            if why:
                audit(EVENT, "tamper", why)
            if outcome == "passed" and _EXC_INFO()[0] is not None:
                audit(EVENT, "tamper", "a pass was reported while the test's exception was handled")
            audit(EVENT, "test", None, "call", outcome, xfail, self)
            put_back(within.pop() if within else None)
            return original(self, *args, **kwargs)

        report.__name__ = report.__qualname__ = method_name
        return report

    for method_name, (outcome, xfail) in OUTCOMES.items():
        if method_name in namespace:
            setattr(reporter, method_name, wrap(method_name, outcome, xfail))
    original_enter = namespace["entering_test"]

    def entering_test(self: Any, function: Any) -> Any:
        # Called by SymPy's own test_file (the frame cannot be forged, a closure's cell
        # can): when it calls the test in the wrapped context manager, the test's report
        # of a pass must follow a call seen to return.
        strict = "strict" if observes(_GETFRAME(1).f_code) else None
        tid = test_id(function, root, seen)
        put_back(within.pop() if within else None)
        within.append(observe_within(audit, function, tid))  # inside its wrappers
        audit(EVENT, "item", function, tid, strict, function, None, within[0])
        return original_enter(self, function)

    setattr(reporter, "entering_test", entering_test)  # noqa: B010
    wrap_calls(audit, module)


def install_finder(audit: Any, root: str) -> None:
    """Put a finder first on `sys.meta_path` that wraps SymPy's reporter as soon as its
    module has run (wherever the tree imports it from)."""
    done: list[Any] = []

    def find_spec(fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in RUNTESTS:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is RunnerFinder or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def run_then_wrap(module: Any) -> None:
            exec_module(module)
            wrap_reporter(audit, module, root, done)

        loader.exec_module = run_then_wrap
        return spec

    class RunnerFinder:
        pass

    RunnerFinder.find_spec = staticmethod(find_spec)  # type: ignore[attr-defined]
    sys.meta_path.insert(0, RunnerFinder)  # type: ignore[arg-type]


def main() -> None:
    target, args = sys.argv[1], sys.argv[2:]
    key, setup = read_setup()
    root = os.path.realpath(setup["root"])
    # The canary file joins the script's own test paths, in this process only.
    args = [*args, *setup.pop("labels", [])]
    # Nothing the checks rely on stays in this frame, which code of the tree can read.
    audit, register = start(key, setup, main.__code__, None, function_problems)
    del key
    install_finder(audit, root)
    own = (*nested_codes(wrap_reporter), *nested_codes(wrap_calls), main.__code__)
    register((*own, *nested_codes(observer)))
    audit(EVENT, "start", "sympy", sys.version.split()[0])
    audit(EVENT, "arm", None)
    code: Any = 0
    try:
        sys.argv = [target, *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
    except SystemExit as done:
        code = done.code
    audit(EVENT, "finish", exit_status(code))
    sys.exit(code)
