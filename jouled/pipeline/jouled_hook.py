"""The integrity monitor's audit hook: `start`, the only holder of the key and writer of records.

The last of the monitor's files (`jouled_monitor.py` says how they run and what
is checked). What the checks trust lives only in `start`'s closures.
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_failures import note_failure
    from jouled.pipeline.jouled_monitor import (
        _HMAC,
        EVENT,
        FRAME_ATTRS,
        FRAMES_WRITABLE,
        HANDLED,
        INTROSPECTION,
        MEMORY_MODULES,
        OWN_BUILTINS,
        OWN_USE,
        REFUSED,
        REPORT_FD,
        SEAL_EVENT,
        SPECIAL_WRITES,
        TRACING,
        WANTED,
        WATCHED,
        Refused,
        Withheld,
        _CodeType,
        _encode,
        _read_exact,
        _word,
        load_trusted,
        memory_file,
        memory_sealed,
        run_could_write,
    )
    from jouled.pipeline.jouled_observe import heard, passed_problems
    from jouled.pipeline.jouled_origins import (
        _TYPE_DICT,
        Origins,
        _FunctionType,
        _top,
        framework_module,
        initializing,
    )
    from jouled.pipeline.jouled_sealed import seal_sources, sealed_server
    from jouled.pipeline.jouled_snapshot import (
        _IS,
        Snapshot,
        TestsBuiltins,
        framework_builtins,
        own_builtins,
        run_with_framework_builtins,
        version_tags,
    )
    from jouled.pipeline.jouled_stack import (
        Machinery,
        Stack,
        ctypes_stand_in,
        pytest_rewriter,
    )
    from jouled.pipeline.jouled_traced import Trace


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
    # Before anything else imports: ctypes comes and goes here (`version_tags`).
    tag = version_tags()
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
    # The sealed test files' text, and `open` serving it, before the import system is
    # taken as it was (`Machinery`): what reads and compiles a sealed file is compared
    # with what it was here each time the text is handed out.
    sealed_texts = seal_sources(root, setup.get("sealed") or {})
    # The suite's own frames, traced while a test runs (audit hooks: 3.8+).
    trace = Trace(origins, getattr(sys, "audit", None), setup["root"])
    runner = globals()
    # A warning attributed to a frame of the runner's (unittest's "test returned a
    # value", stacklevel=3) keeps its registry here: made now, so it is never a new name.
    runner.setdefault("__warningregistry__", {})
    own = [runner]
    own += [
        _TYPE_DICT(value)
        for value in list(runner.values())
        if isinstance(value, type) and _TYPE_DICT(value).get("__module__") == runner["__name__"]
    ]
    own_values = [list(namespace.values()) for namespace in own]
    builtins_namespace, builtin_names = own_builtins(runner)
    private = builtin_names is not OWN_BUILTINS
    builtins_values = [builtins_namespace.get(name) for name in builtin_names]
    _list, _all, _map, _len, _is, _zip = list, all, map, len, _IS, zip

    def own_changed() -> bool:
        for namespace, before in _zip(own, own_values):
            now = _list(namespace.values())
            if _len(now) != _len(before) or not _all(_map(_is, now, before)):
                return True
        if private and _len(builtins_namespace) != _len(builtin_names):
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

    # The test frameworks' own builtins (audit hooks run as their modules are first run),
    # and the test modules' (audit hooks again), brought in line at each test.
    builtins_ = framework_builtins() if hasattr(sys, "addaudithook") else None
    snapshot = Snapshot(origins, tag, builtins_)
    tests_builtins = TestsBuiltins(origins, tag) if builtins_ is not None else None
    snapshot.tests_builtins = tests_builtins
    machinery = Machinery()
    stack = Stack(origins, machinery, main_code)
    caller, caller_file, who_did, elsewhere = (
        stack.caller,
        stack.caller_file,
        stack.who_did,
        stack.elsewhere,
    )
    patch_on_stack, library_import, importing, own_use = (
        stack.patch_on_stack,
        stack.library_import,
        stack.importing,
        stack.own_use,
    )
    bytecode_problem, stack_problem, asker = (
        stack.bytecode_problem,
        stack.stack_problem,
        stack.asker,
    )

    state: dict[str, Any] = {
        "n": 0,
        "busy": False,
        "own": False,  # the monitor itself is looking up a frame
        "inner": False,
        "armed": False,
        "early": False,  # code of the tree ran before arming
        "tree_ran": False,  # code of the tree ran (until then no code can be laundered)
        "finished": False,
    }
    holder: dict[str, Any] = {
        "registry": None,
        "item": None,
        "observed": None,
        "strict": False,
        "function": None,
        "observer": None,
        "ran": None,
        "within": None,  # `observe_within`: the test's own function, observed
        "inner_ran": None,
        "swallowed": [],  # failures only the patch's code could catch (`note_failure`)
        "decided": [],  # checks the patch's code decided (the trace's `_callee`)
        "item_id": None,  # the running test's id, for a report that names none
        "unnamed": 0,  # reports made with no test running
    }
    reported: set[tuple[str, str]] = set()
    plugin_codes: list[Any] = []
    # Memory modules: withheld from every import unless the daemon allows them; any in
    # the process before the monitor (a .pth file of the environment's) is open to all.
    allow_memory = setup.get("memory_modules") == "allow"
    withheld: set[str] = set()
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
        if (why, test_id) in reported:  # once per finding and test: each test it touched
            return
        reported.add((why, test_id))
        record(f'{{"event":"tamper","id":{_encode(test_id)},"why":{_encode(why[:500])}')

    def integrity() -> "list[str]":
        if own_changed():
            return ["the runner's own code or the builtins were changed"]
        problems: list[str] = []
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
        code = frame.f_code if frame is not None else None
        if any(code is own for own in trace.codes) and args[0] == "traced":
            trace.heard(holder, frame, args)
            return
        if frame is None or not any(frame.f_code is c for c in plugin_codes):
            tamper(f"a runner record was asked for by {caller_file(frame)}")
            return
        kind = args[0]
        if kind == "start":  # ("start", framework, its version)
            level = "monitor" if hasattr(sys, "addaudithook") else "reduced"
            # Without version tags a value swapped and put back within a test goes unseen;
            # from 3.13 code the test calls may rewrite its variables through `f_locals`.
            reduced = capped == "reduced" or not sealed or let_in or tag is None
            reduced = reduced or FRAMES_WRITABLE
            level = "reduced" if reduced else level
            record(f'{{"event":"start","{_word(args[1])}":{_encode(args[2])},"integrity":"{level}"')
            for name in preloaded:
                by = "the interpreter's start, before the runner"
                record(f'{{"event":"memory","module":{_encode(name)},"by":{_encode(by)}')
        elif kind == "arm":  # ("arm", what `checks` watches, e.g. pytest's Config)
            if checks is not None:
                holder["registry"] = checks(origins, args[1])
            problems: list[str] = []
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
            holder["item"], holder["item_id"] = args[1], args[2]
            # args[3]: "strict" (the function surely runs through its observer), "raised"
            # (it may run another way: only a raise it reports counts), or falsy; then what
            # the observer wraps, the observer, and `observe_within`'s.
            holder["observed"] = args[2] if len(args) > 3 and args[3] else None
            holder["strict"] = len(args) > 3 and args[3] is not None and args[3] != "raised"
            function, observer, within = (*args[4:7], None, None, None)[:3]
            holder.update(function=function, observer=observer, within=within)
            holder.update(ran=None, inner_ran=None, swallowed=[], decided=[])
            trace.start()
            # A passing call's report is checked whole right after; here, the test itself.
            problems = item_check(args[1], origins) if item_check is not None else []
            snapshot.scan_modules(problems)  # test modules unittest imported just now
            problems += tests_builtins.refresh() if tests_builtins else []  # after fixtures
            for why in problems:
                tamper(why, args[2])
        elif kind == "failed":  # ("failed",): a framework's failure path (`signal_failures`)
            note_failure(holder, frame, origins, args[1] if len(args) > 1 else None)
        elif kind == "ran":  # ("ran", test id, "" or what it raised, the raise): `heard`
            for why in heard(holder, frame, args, origins, patch_on_stack, item_check):
                tamper(why, holder["item_id"] or "")
        elif kind == "test":
            _, test_id, when, outcome, xfail, report = args
            running = holder["item_id"]
            if test_id is None:  # the running test's report (SymPy's reporter names none)
                test_id, holder["item_id"] = running, None
                if test_id is None:
                    holder["unnamed"] += 1
                    test_id = f"<no test {holder['unnamed']}>"
            # A call reported passed is checked whole (only a pass helps a forger); others
            # by where they come from (a lasting change is found at the next pass or end).
            traced = trace.stop()
            problems = integrity() if when == "call" and outcome == "passed" else []
            if when == "call" and outcome == "passed":
                problems += passed_problems(holder, test_id, running, origins) + traced
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
            for why in tests_builtins.refresh() if tests_builtins else []:  # after a teardown
                tamper(why, test_id)
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
            problems = integrity() + trace.stop()
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
        rewriting = frame is not None and pytest_rewriter(frame.f_code, origins, modules)
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
        problems: list[str] = []
        snapshot.check(problems, scan=False)
        for why in problems:
            tamper(f"while {filename} was rewritten: {why}")
        if not problems:
            origins.rewritten.add(realpath_(filename))

    def refuse(why: str) -> None:
        tamper(why)
        raise Refused(f"jouled: refused while grading: {why}")

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
            if event in OWN_USE and own_use(getframe(2), event):
                return
            refuse(f"{event} was called from {caller_file(getframe(2))}")
        elif event == "sys.unraisablehook":  # an exception dropped where it was raised
            trace.unraisable(holder, args[1] if len(args) > 1 else None)
        elif event in TRACING:  # (the event names no function: a change either way)
            found = patch_on_stack(getframe(2))
            if found:
                refuse(f"{event} was called by {found}")
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
                frame = getframe(2)
                if ctypes_stand_in(frame, origins, modules) and "ctypes" not in withheld:
                    withheld.add("ctypes")
                    record(f'{{"event":"withheld","module":"ctypes","by":{_encode(asker(frame))}')
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
            elif issubclass(kind, type):  # (`isinstance` would ask the object)
                # Before arming, or while the class's own module is being imported (pytest
                # imported late, by a test helper), the framework builds classes this way.
                if state["armed"]:
                    module = _TYPE_DICT(target).get("__module__")
                    if type(module) is str and _top(module) in WATCHED and not initializing(module):
                        refuse(f"{name} of class {module}.{target.__qualname__} was written")
                    elif origins.test_class(target):  # the suite's own test case
                        found = patch_on_stack(getframe(2)) or elsewhere()
                        if found:
                            refuse(f"{name} of test class {target.__qualname__} written by {found}")
            elif name == "__class__" and len(args) > 2:
                # An object of the test framework's (a report, an item, a result) may not
                # become the tree's; any other object's class is the program's business
                # (Django clones a query by giving an empty object the query's class),
                # but the patch's giving is kept: a `with` judges what it entered by it.
                if len(origins.reclassed) < 100000 and patch_on_stack(getframe(2)):
                    origins.reclassed.add(id(target))
                module = _TYPE_DICT(kind).get("__module__")
                found = origins.from_tree(args[2]) if framework_module(module) else ""
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
            if importing(frame):  # unmarshalling (3.8): its bytes were judged at marshal.loads
                return
            filename = args[1] if len(args) > 1 else ""
            who, tree = caller(frame)
            if tree and type(filename) is str and origins.trusted_file(filename):
                refuse(f"a code object made by {who} claims to be {filename}")
            if library_import(frame):
                return  # a library's own import-time code
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
            if event == "exec" and builtins_ is not None:
                run_with_framework_builtins(getframe(2), code, builtins_, tests_builtins)
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

    # The monitor's files: their code may look around while it checks.
    own_files = frozenset(
        code.co_filename
        for code in (
            start.__code__,
            _read_exact.__code__,
            Origins.inside.__code__,
            heard.__code__,
            Snapshot.check.__code__,
            Stack.caller.__code__,
            Trace.heard.__code__,
        )
    )

    def hook(event: str, args: "tuple[Any, ...]") -> None:
        if event not in HANDLED:  # most events (builtins.id, os.*, import...): nothing to do
            return
        if event == SEAL_EVENT:
            sealed_asked(args)
            return
        if state["busy"]:
            if state["own"]:
                return
            # Code running while the monitor checks is code the check called: a value
            # of the tree's (a property, a __getattr__). It may not look around, nor
            # set a trace (the trace of the test's frames).
            frames = event != "object.__getattr__" or (len(args) > 1 and args[1] in FRAME_ATTRS)
            watched = (frames and event in INTROSPECTION) or event in TRACING
            if watched and not state["inner"]:
                state["inner"] = True
                try:
                    frame = getframe(1)
                    if frame.f_code.co_filename not in own_files:
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

    tracers = (trace.local.__code__, trace.traced.__code__, trace.answered.__code__)
    hooks = (getframe, tamper, patch_on_stack, (hook.__code__, *tracers), setup["ro"])
    sealed_asked = sealed_server(sealed_texts, state, origins, trace, machinery, snapshot, hooks)
    sys.addaudithook(hook)
    return sys.audit, register
