"""Sealed test files: the run's secret test modules, and who may read their text.

The tenth of the monitor's files (`jouled_monitor.py` says how they run). The run's
secret test modules (hidden tests, and those the task's test patch writes) are, on
disk, unreadable to every process of the run (the daemon shows an unreadable file
over each), so no thread or child process can learn what a test expects from one.
Their text arrives on fd 3 and lives only in `start`'s closure, as the key does: this
namespace is reachable from any frame of the runner's, so it holds only the files'
real paths. A read asks the audit hook for the text (`SEAL_EVENT`, with a list the
hook fills): the monitor's own checks (`read_source`), and reads through Python's
`open`, `io.open_code` and `tokenize`'s `open` (`sealed_open`). The hook answers
with `sealed_server`'s judge, made in `start` and held only by the hook, which
judges by who is reading.
"""

# Python 3.6 runs this file too: no `from __future__ import annotations`, no walrus, and
# every annotation naming a generic is a string (`jouled_monitor.py`).

import _thread
import io
import os
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these come from the monitor's files run before
    from jouled.pipeline.jouled_monitor import SEAL_EVENT
    from jouled.pipeline.jouled_origins import Origins
    from jouled.pipeline.jouled_snapshot import Snapshot
    from jouled.pipeline.jouled_stack import Machinery, handed_by_test, loading_file

_SEALED: "set[str]" = set()
_SEALED_NAMES: "set[str]" = set()
_OPEN = open  # the boot's copy of the builtins: Python's own `open`
_OPEN_CODE: Any = getattr(io, "open_code", None)
_AUDIT: Any = getattr(sys, "audit", None)
_BASENAME, _REALPATH, _FSPATH = os.path.basename, os.path.realpath, os.fspath
_BYTES_IO, _TEXT_IO = io.BytesIO, io.TextIOWrapper


def _sealed_path(file: Any) -> "str | None":
    """The real path of a sealed file `file` names, None for any other."""
    name = file if type(file) is str else None
    if name is None and type(file) is not int:
        try:
            name = os.fsdecode(_FSPATH(file))
        except TypeError:
            return None
    return _sealed_name(name) if name is not None else None


def _sealed_name(name: str) -> "str | None":
    """The real path of a sealed file the path `name` names, None for any other."""
    if _BASENAME(name) not in _SEALED_NAMES:
        return None
    real = _REALPATH(name)
    return real if real in _SEALED else None


def read_source(path: str) -> bytes:
    """The bytes of a source file as the monitor checks it (a sealed one's from the hook,
    only to the monitor's own code while it checks)."""
    real = _sealed_path(path) if _SEALED else None
    if real is None:
        with _OPEN(path, "rb") as fh:
            return fh.read()
    box: list[bytes] = []
    _AUDIT(SEAL_EVENT, real, "own", box)
    if not box:
        raise PermissionError(13, "Permission denied", path)
    return box.pop()


def _sealed_text(real: str) -> "list[bytes]":
    """What the hook hands this read of the sealed file `real`: [its text], [its outline]
    (`_outline`) or nothing (refused)."""
    box: list[bytes] = []
    _AUDIT(SEAL_EVENT, real, "read", box)
    if not box:
        raise PermissionError(13, "Permission denied", real)
    return box


def sealed_open(
    file: Any,
    mode: str = "r",
    buffering: int = -1,
    encoding: Any = None,
    errors: Any = None,
    newline: Any = None,
    closefd: bool = True,
    opener: Any = None,
) -> Any:
    """Python's `open`, but for a sealed file's reads, which get what the hook hands out."""
    real = None
    if type(mode) is str and not ("w" in mode or "a" in mode or "x" in mode or "+" in mode):
        real = _sealed_path(file)
    if real is None:
        return _OPEN(file, mode, buffering, encoding, errors, newline, closefd, opener)
    # The text is held by nothing a frame shows (no local names it) while a wrapper that
    # may look up a codec is made.
    if "b" in mode:
        return _BYTES_IO(_sealed_text(real).pop())
    return _TEXT_IO(_BYTES_IO(_sealed_text(real).pop()), encoding, errors, newline)


def sealed_open_code(path: str) -> Any:
    """`io.open_code` (how the import system reads source), sealed files as `sealed_open`."""
    real = _sealed_path(path)
    if real is None:
        return _OPEN_CODE(path)
    return _BYTES_IO(_sealed_text(real).pop())


_DEFINES = re.compile(rb"^([ \t]*)(async[ \t]+def|def|class)[ \t]+(\w+)")
_DECORATES = re.compile(rb"^([ \t]*)@")


def _outline(data: bytes) -> bytes:
    """A sealed file's text as any other reader of the main thread sees it (a traceback's
    lines, `inspect` finding where a function starts): its lines, each empty but those
    that define a function or class (`def name():`) or decorate one (`@_`), at their
    place and indent. Nothing a test compares with is in it."""
    lines = []
    for line in data.split(b"\n"):
        found = _DEFINES.match(line)
        if found is not None:
            indent, kind, name = found.groups()
            lines.append(indent + kind + b" " + name + (b":" if kind == b"class" else b"():"))
        else:
            found = _DECORATES.match(line)
            lines.append(found.group(1) + b"@_" if found is not None else b"")
    return b"\n".join(lines)


_VARARGS, _VARKEYWORDS = 0x04, 0x08  # code flags: the function takes *args, **kwargs


def sealed_arguments(frame: Any) -> "frozenset[str]":
    """The sealed files (real paths) a frame that has just been called was handed among
    its arguments: a path as a string, bytes or a `pathlib` path, or in its `*args`."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & _VARARGS) + bool(code.co_flags & _VARKEYWORDS)
    local = frame.f_locals
    values: list[Any] = []
    for name in code.co_varnames[:count]:
        value = local.get(name)
        values.extend(value if type(value) is tuple else [value])
    found: set[str] = set()
    for value in values:
        if type(value).__module__ == "pathlib":  # a path object of the standard library's
            value = str(value)
        if type(value) is bytes:
            value = os.fsdecode(value)
        real = _sealed_name(value) if type(value) is str else None
        if real is not None:
            found.add(real)
    return frozenset(found)


def seal_sources(root: str, sealed: "dict[str, str]") -> "dict[str, bytes]":
    """Take the sealed files (tree-relative path -> base64 text): their real paths here,
    their text returned (for `start`'s closure alone), and `sealed_open` put in the place
    of Python's `open`, `io.open_code` (the import system's `_io.open_code`) and
    `tokenize`'s `open` (what `linecache` reads with). A run with none changes nothing."""
    if not sealed or _AUDIT is None:
        return {}
    import _io
    import binascii
    import builtins
    import importlib.util  # noqa: F401 - taken as it was by `Machinery.READING`
    import pathlib  # noqa: F401 - the same
    import tokenize

    texts = {}
    for rel, text in sealed.items():
        real = _REALPATH(os.path.join(root, rel))
        texts[real] = binascii.a2b_base64(text)
        _SEALED.add(real)
        _SEALED_NAMES.add(_BASENAME(real))
    builtins.open = io.open = tokenize._builtin_open = sealed_open  # type: ignore[attr-defined]
    if _OPEN_CODE is not None:
        _io.open_code = io.open_code = sealed_open_code
    return texts


def sealed_server(
    texts: "dict[str, bytes]",
    state: "dict[str, Any]",
    origins: "Origins",
    trace: Any,  # the hook's `Trace`: what tests handed the code they called
    machinery: "Machinery",
    snapshot: "Snapshot",
    hooks: Any,
) -> Any:
    """The hook's answer to `SEAL_EVENT`, made in `start` and held only by the hook: a
    function of the event's arguments that fills the asker's list with the text of a
    sealed file, its outline, or nothing. `texts` (real path -> text) is kept only in
    its closure; `hooks` is the hook's (getframe, tamper, patch_on_stack, the codes of
    the hook and the tracers, the run's read-only directory).

    The text is read only in the main thread: by the read that loads that very module,
    with no code of the patch's on the stack and what reads it as it was, or by code a
    test handed the file to. The patch's code reading it otherwise is tampering; another
    thread is refused, as the disk refuses every process; any other read gets its
    outline (`_outline`: a traceback's lines)."""
    getframe, tamper, patch_on_stack, own_codes, ro = hooks
    main_thread, thread_now = _thread.get_ident(), _thread.get_ident
    outlines: dict[str, bytes] = {}  # path -> `_outline` of its text, made once
    asks_own, asks_read = read_source.__code__, _sealed_text.__code__
    monitor_files = os.path.join(ro, "jouled_")

    def sealed_read(path: str, reader: Any) -> str:
        if state["busy"] or thread_now() != main_thread:
            return ""
        state["busy"] = True
        try:
            if handed_by_test(reader, path, origins, trace.handed):
                return "text"
            found = patch_on_stack(reader)
            if found:
                tamper(f"{found} read {path}, a test file the run keeps sealed")
                return ""
            if not loading_file(reader, path, origins):
                return "outline"
            changed = machinery.changed_reader()
            if changed:
                tamper(f"{changed} was changed before {path}, a sealed test file, was read")
                return ""
            if state["armed"] and reader.f_code.co_name != "get_data":
                # pytest's rewriting, or SymPy's runner, goes on with the text: the frameworks'
                # namespaces must be as they were. A change found is tampering (the run can
                # no longer resolve), and the run goes on to be judged as it was.
                problems: list[str] = []
                snapshot.check(problems, scan=False)
                for why in problems:
                    tamper(f"before {path}, a sealed test file, was read: {why}")
            return "text"
        finally:
            state["busy"] = False

    def own_read(frame: Any) -> bool:
        """Whether `frame` (the caller of `read_source`) is the monitor's own code checking:
        monitor frames up to the audit hook or a trace function, or up to a frame that
        is not the patch's (pytest calling the runner), with none of the patch's above."""
        while frame is not None:
            code = frame.f_code
            if code in own_codes:
                return True
            if not code.co_filename.startswith(monitor_files):
                return not patch_on_stack(frame)
            frame = frame.f_back
        return False

    def sealed_asked(args: "tuple[Any, ...]") -> None:
        """A sealed file's text asked of the hook (`SEAL_EVENT`): by the monitor's own
        code while it checks (`read_source`), or for a read through `sealed_open`."""
        path, kind, box = args if len(args) == 3 else ("", None, None)
        text = texts.get(path) if type(path) is str else None
        if text is None or type(box) is not list or box:
            return
        asker = getframe(2)  # the frame that raised the event
        code = asker.f_code if asker is not None else None
        if kind == "own" and code is asks_own:
            if own_read(asker.f_back):
                box.append(text)
        elif kind == "read" and code is asks_read:
            opener = asker.f_back  # `sealed_open` or `sealed_open_code`
            given = sealed_read(path, opener.f_back if opener is not None else None)
            if given == "outline":
                if path not in outlines:
                    outlines[path] = _outline(text)
                box.append(outlines[path])
            elif given == "text":
                box.append(text)

    return sealed_asked
