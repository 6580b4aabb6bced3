"""What the patch audit looks for: the names, attributes, strings and files that flag.

Each rule names a lever of the test machinery that a patch has no business
pulling (the runner's modules, `sys.modules`, builtins, start-up hooks,
report files); `jouled.pipeline.audit` says where and how they are looked for.
"""

from __future__ import annotations

import re

# Dotted names (after resolving imports): a name flags when it is one of these
# or inside one ("subprocess" covers "subprocess.run"); a trailing "*" matches
# any name that starts with the rest ("os.exec*" covers "os.execv").
NAME_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pytest-internals", ("_pytest", "pluggy", "py._path", "iniconfig")),
    (
        "pytest-internals",
        tuple(
            f"pytest.{name}"
            for name in (
                "main",
                "console_main",
                "hookimpl",
                "hookspec",
                "TestReport",
                "CollectReport",
                "CallInfo",
                "Config",
                "PytestPluginManager",
                "Session",
                "Item",
                "Function",
                "Module",
                "Class",
                "Package",
                "Collector",
                "File",
                "Stash",
                "StashKey",
                "register_assert_rewrite",
            )
        ),
    ),
    (
        "unittest-internals",
        (
            "unittest.case",
            "unittest.result",
            "unittest.runner",
            "unittest.suite",
            "unittest.main",
            "unittest.TestResult",
            "unittest.TextTestResult",
            "unittest.TextTestRunner",
            "unittest.TestSuite",
            "unittest.TestCase.run",
            "unittest.TestCase.__call__",
            "unittest.installHandler",
            # the runners other repositories grade with: Django's and SymPy's
            "django.test.runner",
            "django.test.utils.get_runner",
            "django.test.utils.setup_test_environment",
            "sympy.testing.runtests",
            "sympy.utilities.runtests",
        ),
    ),
    # The daemon's runner reports through audit events; a patch has no business there.
    ("runner", ("sys.audit", "sys.addaudithook")),
    ("code-rewrite", ("types.FunctionType", "types.CodeType", "types.CellType")),
    ("sys-modules", ("sys.modules",)),
    ("builtins", ("builtins", "__builtins__")),
    ("process-exit", ("os._exit", "os.abort", "pytest.exit")),
    ("atexit", ("atexit",)),
    (
        "tracing",
        (
            "sys.settrace",
            "sys.setprofile",
            "sys.monitoring",
            "threading.settrace",
            "threading.setprofile",
            "threading.settrace_all_threads",
            "threading.setprofile_all_threads",
        ),
    ),
    ("gc-introspection", ("gc.get_referrers", "gc.get_referents", "gc.get_objects")),
    ("ctypes", ("ctypes", "_ctypes", "cffi")),
    (
        "frame-access",
        (
            "sys._getframe",
            "sys._current_frames",
            "inspect.currentframe",
            "inspect.stack",
            "inspect.trace",
            "inspect.getouterframes",
            "inspect.getinnerframes",
        ),
    ),
    ("signal", ("signal", "os.kill", "os.killpg")),
    ("faulthandler", ("faulthandler",)),
    (
        "import-hooks",
        (
            "sys.meta_path",
            "sys.path_hooks",
            "sys.path_importer_cache",
            "importlib.abc",
            "importlib.machinery",
            "importlib._bootstrap",
            "importlib._bootstrap_external",
        ),
    ),
    (
        "process-spawn",
        (
            "subprocess",
            "pty",
            "os.system",
            "os.popen",
            "os.exec*",
            "os.spawn*",
            "os.posix_spawn*",
            "os.fork",
            "os.forkpty",
            "asyncio.create_subprocess_exec",
            "asyncio.create_subprocess_shell",
        ),
    ),
    (
        "sys-hooks",
        (
            "sys.excepthook",
            "sys.unraisablehook",
            "sys.displayhook",
            "sys.breakpointhook",
            "os.dup2",
        ),
    ),
    ("dynamic-code", ("marshal.loads", "marshal.load")),
)

# Attribute names that flag on any object (the object is seldom a module).
ATTRIBUTE_RULES = {
    "pluginmanager": "pytest-internals",
    "_hookexec": "pytest-internals",
    "from_item_and_call": "pytest-internals",
    "f_locals": "frame-access",
    "f_back": "frame-access",
    "f_globals": "frame-access",
    "f_builtins": "frame-access",
    "f_trace": "frame-access",
    "tb_frame": "frame-access",
    "gi_frame": "frame-access",
    "cr_frame": "frame-access",
    "co_code": "code-rewrite",
    "f_code": "frame-access",
    "ag_frame": "frame-access",
    "__closure__": "code-rewrite",
    "cell_contents": "code-rewrite",
    "__globals__": "code-rewrite",
    "__builtins__": "builtins",
    "__defaults__": "code-rewrite",
    "__kwdefaults__": "code-rewrite",
}
DYNAMIC_BUILTINS = ("exec", "eval", "compile", "__import__")
EXIT_BUILTINS = ("exit", "quit")
REPORT_OUTCOMES = ("passed", "failed", "skipped", "error")

# String constants.
PROC_RE = re.compile(r"^/proc(?:/|$)")
# The daemon's runner: its directory in the sandbox, its files, its audit event, its namespace.
RUNNER_RE = re.compile(r"/run/jouled|jouled_(?:monitor|pytest|unittest)|jouled\.runner|__jouled__")
JUNIT_RE = re.compile(r"(?i)junit|<testsuites?[\s>]|<testcase[\s>/]")
# A line as pytest's `-rA` summary prints it: "PASSED tests/test_x.py::test_y".
SUMMARY_RE = re.compile(r"(?m)^(?:PASSED|FAILED|ERROR|XPASS|XFAIL|SKIPPED) \S+::")
PYTEST_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTHONSTARTUP")
TEST_ENV = ("PYTEST_CURRENT_TEST", "PYTEST_VERSION")
# Runner names flag only where code tests for them ("pytest" in sys.modules), not in
# a dependency list.
RUNNER_NAMES = ("pytest", "_pytest", "unittest", "py.test")
PROBES = ("startswith", "endswith", "find", "rfind", "index", "count", "__contains__")

# File names.
REPORT_FILE_RE = re.compile(r"(?i)(?:junit|report|results?)[^/]*\.xml$")
TEST_CONFIG_FILES = ("pytest.ini", ".pytest.ini", "tox.ini")
# A library's own testing helpers (xarray.testing, sklearn.utils._testing): the tests judge
# with them, and the patch may change them.
TEST_HELPERS = ("testing", "_testing", "test_utils", "testutils", "_test_utils")
PACKAGING_FILES = ("setup.cfg", "pyproject.toml", "setup.py")
STARTUP_FILES = ("sitecustomize.py", "usercustomize.py")
# Modules the test runner imports: a file of that name at the root of the tree,
# which `python -m pytest` puts first on sys.path, replaces them.
RUNNER_MODULES = frozenset(
    {"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "exceptiongroup", "tomli"}
)
PYTHON_SUFFIXES = (".py", ".pyw")
