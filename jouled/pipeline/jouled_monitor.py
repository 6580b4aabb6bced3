"""The integrity monitor of the daemon's test runners: runs in the sandbox, imports no jouled.

The boot code of a graded run executes the monitor's files and then a runner's
(`jouled_pytest.py`, `jouled_unittest.py`, `jouled_sympy.py`) into one namespace
with `exec`: none is ever a module (no name in `sys.modules`), and their
directory is never on `sys.path`. The monitor's files, in the order they run:

- this one: what is watched, refused and let in; the setup; the records' encoding;
- `jouled_origins.py`: whose code is whose (the tree's, the patch's, or neither);
- `jouled_observe.py`: what runs as a test, and the observers that hear how it ended;
- `jouled_case.py`: what a test case holds (its machinery, assertions, identity, binding);
- `jouled_failures.py`: a test's failures, heard where they are raised, and who catches them;
- `jouled_compared.py`: comparisons the patch's code decides for a test (asked again);
- `jouled_traced.py`: a test's own frames, traced while it runs (what its `with` blocks
  swallow), and the calls they make;
- `jouled_snapshot.py`: the namespaces that may not change, and their comparison;
- `jouled_stack.py`: the import system as it was, and who is asking (the frames);
- `jouled_sealed.py`: the sealed test files, and who may read their text;
- `jouled_hook.py`: `start`, the audit hook and the only writer of records.
 The run's setup arrives on fd 3 (a 32-byte key, then
where the tree is, the canary test files and the sealed test modules' text) and the
descriptor is closed before any code of the tree runs; the key and the sealed text
live only in `start`'s closures. Records go to the daemon on fd 4, one line
each, authenticated with the key.

`start` installs the monitor (Python 3.8+: a PEP 578 audit hook, which cannot
be removed once added) before the test framework is imported. It is the only
holder of the key and the only writer of records. The runner reports through
`sys.audit`; the monitor takes a record only from the runner's own code,
called through code the patch did not write (every frame between the runner
and its `main`), and only after checking that nothing the framework computes
outcomes with was changed by such code:

- the runner's own namespace and classes, and its builtins, compared first,
  with functions bound at start: the boot gives the namespace a copy of the
  builtins of its own, so a builtin a test suite patches (`open` under a fake
  file system) is not one the monitor calls, and any write to the copy is
  tampering;
- the module globals of pytest, pluggy, unittest, `ast`, `django.test`,
  SymPy's test runner and the builtins, and the attributes of their classes
  that define behaviour in Python, taken when the run arms and compared at
  every call reported passed and at the end (a value may change only to one
  made by code the patch did not write); only the namespaces whose dicts'
  version tags moved since the last comparison are compared again, and a
  module namespace (theirs, and those of the standard library they judge
  with, `JUDGING_HELPERS`) whose tag moved but whose values did not had a
  value swapped and put back in between;
- the frameworks' own builtins: a copy their modules are given as they are
  first run, which nothing but the patch could change;
- the test modules' own builtins: another copy, given to each test module that
  never names `builtins`, brought in line with Python's at each test's start
  and after each phase, save what the patch made, so a builtin swapped while a
  test runs is not the one the test calls; only the monitor writes it;
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
# environments of old SWE-bench instances (Python 3.6) run these files too.

import hashlib
import hmac
import json
import os
import sys
from typing import Any

SETUP_FD, REPORT_FD = 3, 4
EVENT = "jouled.runner"
SEAL_EVENT = "jouled.sealed"  # a sealed test file's text asked of the hook
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
# Standard library modules whose functions and classes the frameworks look up as they
# judge (`collections.Counter` in assertCountEqual, `re.search` in `raises(match=)`,
# `math.isnan` in `approx`), and which test suites do not patch: a value swapped in
# them and put back within a test is tampering (their version tags are read). Modules
# suites do patch and restore (`os`, `time`, `warnings`, which the frameworks write
# and restore around every test) are not among them.
JUDGING_HELPERS = frozenset(
    {
        "collections",
        "re",
        "math",
        "cmath",
        "operator",
        "functools",
        "itertools",
        "difflib",
        "pprint",
        "reprlib",
        "numbers",
        "decimal",
        "fractions",
    }
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
# Of those, what a library of the environment (or a test file) may call itself: never on
# the patch's behalf (`Stack.own_use`). Hypothesis weighs its own Random's referrers.
OWN_USE = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
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

FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
INTROSPECTION = frozenset(
    {"sys._getframe", "sys._getframemodulename", "sys._current_frames", "object.__getattr__"}
    | REFUSED
)
WANTED = frozenset(
    {
        *REFUSED,
        *TRACING,
        "sys.unraisablehook",
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
HANDLED = WANTED | INTROSPECTION | {EVENT, SEAL_EVENT}
# Python 3.13+: a running frame's locals are writable through `frame.f_locals`, unaudited.
FRAMES_WRITABLE = sys.version_info >= (3, 13)
# The builtins the monitor's own code calls, compared where it runs with Python's
# (without the boot's copy of its own): they may not change under it.
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


_CodeType = type(_read_exact.__code__)


# -- records ---------------------------------------------------------------------------------


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
