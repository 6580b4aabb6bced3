"""Unified diffs: parse and validate them, apply them all-or-nothing, produce them from two trees.

Patches come from untrusted agents. Parsing is strict wherever leniency could
hide a mistake (hunk counts, context lines, file names), and every rejection
is a PatchError that names the file, the reason and what to do about it.
Application computes every file's new content in memory before it writes
anything, so a patch that fails on its last file leaves the tree untouched.

Both git-style diffs (`diff --git`, mode, rename and /dev/null headers) and
plain `diff -u` / `diff -ruN` output are accepted. Binary patches, copies,
symlinks and submodules are not: a task tree is text, and a patch that needs
more than text has to be rejected rather than half-applied.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath

from jouled.errors import JouledError, PatchError, PreconditionError

MAX_PATCH_BYTES = 1 << 20

_REGENERATE = "regenerate the patch with `git diff` against the pristine task tree"
_HUNK_RE = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# `diff -N` dates an absent side at the epoch; negative UTC offsets show 1969-12-31.
_EPOCH_RE = re.compile(r"\s*19(?:70-01-01|69-12-31)\b")
_QUOTED_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_GIT_EXTENDED = (
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "rename from ",
    "rename to ",
    "copy from ",
    "copy to ",
    "similarity index ",
    "dissimilarity index ",
    "index ",
)
_REGULAR = 0o100000
_NO_NEWLINE = "\\ No newline at end of file"


# -- the parsed form --------------------------------------------------------------------


@dataclass(frozen=True)
class Hunk:
    """One `@@` section.

    `lines` keep their ' ', '-' or '+' prefix and no line terminator. A line
    starting with a backslash (`\\ No newline at end of file`) says that the
    line before it is the last of its file and has no trailing newline.
    """

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class FilePatch:
    """The change to one file: `old_path` is None for a new file, `new_path` for a deletion."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]
    # A git mode (0o100644 or 0o100755) from `new file mode` or `new mode`; None keeps the mode.
    new_mode: int | None = None

    @property
    def is_new(self) -> bool:
        return self.old_path is None

    @property
    def is_delete(self) -> bool:
        return self.new_path is None

    @property
    def is_rename(self) -> bool:
        return (
            self.old_path is not None
            and self.new_path is not None
            and self.old_path != self.new_path
        )

    @property
    def path(self) -> str:
        # Parsing never yields a FilePatch without either side, and paths are never empty.
        return self.new_path or self.old_path or ""


@dataclass(frozen=True)
class Patch:
    files: tuple[FilePatch, ...]
    sha256: str  # hex digest of the raw bytes as submitted

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the patch touches, old and new sides, sorted."""
        touched = {p for f in self.files for p in (f.old_path, f.new_path) if p is not None}
        return tuple(sorted(touched))


def patch_sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


# -- parsing ----------------------------------------------------------------------------


def parse_patch(raw: bytes, *, max_bytes: int = MAX_PATCH_BYTES) -> Patch:
    """Parse and validate a unified diff; raises PatchError on anything it cannot trust."""
    if len(raw) > max_bytes:
        raise PatchError(
            f"patch is {len(raw)} bytes, over the bound of {max_bytes} bytes",
            hint="submit only the source changes: leave generated, vendored or data files out",
        )
    if not raw.strip():
        raise PatchError("patch is empty", hint="submit a unified diff (`git diff` output)")
    # surrogateescape keeps undecodable bytes visible, so the error can name their file.
    lines = raw.decode("utf-8", errors="surrogateescape").split("\n")
    if lines[-1] == "":
        lines.pop()
    files = _parse_files(_Cursor(lines))
    if not files:
        raise PatchError(
            "patch contains no file changes",
            hint="submit a unified diff with `--- path` / `+++ path` headers and `@@` hunks",
        )
    _reject_repeats(files)
    return Patch(files=tuple(files), sha256=patch_sha256(raw))


class _Cursor:
    """Where the parser is in the patch's lines."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.at = 0

    def peek(self, ahead: int = 0) -> str | None:
        index = self.at + ahead
        return self.lines[index] if index < len(self.lines) else None

    def take(self) -> str:
        line = self.lines[self.at]
        self.at += 1
        return line

    @property
    def lineno(self) -> int:
        return self.at + 1

    def at_plain_header(self, ahead: int = 0) -> bool:
        first, second = self.peek(ahead), self.peek(ahead + 1)
        return (
            first is not None
            and second is not None
            and first.startswith("--- ")
            and second.startswith("+++ ")
        )


def _header(line: str) -> str:
    # A patch saved with CRLF endings still has readable headers; its content lines keep the CR.
    return line.removesuffix("\r")


def _parse_files(cur: _Cursor) -> list[FilePatch]:
    files: list[FilePatch] = []
    while (line := cur.peek()) is not None:
        head = _header(line)
        if head.startswith("diff --git "):
            files.append(_parse_git_file(cur))
        elif cur.at_plain_header():
            files.append(_parse_plain_file(cur))
        else:
            _check_between_files(head, cur.lineno)
            cur.take()
    return files


def _check_between_files(head: str, lineno: int) -> None:
    """Text between files is commentary (commit messages, `diff -r` command lines), with three
    exceptions that mean the diff is not something this parser can apply in full."""
    if head.startswith("@@"):
        raise PatchError(
            f"line {lineno}: hunk has no file header before it",
            hint="every file's hunks must follow its `--- path` and `+++ path` lines",
        )
    if head.startswith("Binary files ") or head == "GIT binary patch":
        raise _binary_error("", head)
    if head.startswith("Only in "):
        raise PatchError(
            f"line {lineno}: `{head}`: the diff left out a file that exists on one side only",
            hint="run `diff -ruN` (with -N) or `git diff` so new and deleted files are included",
        )


def _binary_error(path: str, line: str) -> PatchError:
    return PatchError(
        f"binary patches are not accepted (`{line}`)",
        path=path,
        hint="patch only text files; binary files cannot be changed by a submission",
    )


def _parse_git_file(cur: _Cursor) -> FilePatch:
    names = _header(cur.take())[len("diff --git ") :]
    git_old, git_new = _split_git_names(names)
    label = git_new or git_old or names
    fields: dict[str, str] = {}
    while (line := cur.peek()) is not None:
        head = _header(line)
        key = next((k for k in _GIT_EXTENDED if head.startswith(k)), None)
        if key is None:
            if head.startswith("Binary files ") or head == "GIT binary patch":
                raise _binary_error(label, head)
            break
        fields[key.strip()] = head[len(key) :]
        cur.take()
    if "copy from" in fields or "copy to" in fields:
        raise PatchError(
            "file copies are not accepted",
            path=label,
            hint="regenerate the diff without copy detection (no -C / --find-copies)",
        )
    sides: tuple[str | None, str | None] | None = None
    if cur.at_plain_header():
        sides = (_header_name(cur.take()[4:]), _header_name(cur.take()[4:]))
    old, new = _clean_paths(*_git_paths(names, git_old, git_new, fields, sides, label))
    mode = _git_mode(fields, new or old or label)
    hunks = _parse_hunks(cur, new or old or label)
    return _checked_file(old, new, hunks, mode)


def _git_paths(
    names: str,
    git_old: str | None,
    git_new: str | None,
    fields: dict[str, str],
    sides: tuple[str | None, str | None] | None,
    label: str,
) -> tuple[str | None, str | None]:
    # `rename from/to` carry no a/ b/ prefix and are exact, so they win when present.
    if "rename from" in fields and "rename to" in fields:
        old: str | None = _unquote_name(fields["rename from"])
        new: str | None = _unquote_name(fields["rename to"])
    elif sides is not None:
        prefixed = _has_git_prefixes(names)
        old = _strip_prefix(sides[0], "a/", label) if prefixed else sides[0]
        new = _strip_prefix(sides[1], "b/", label) if prefixed else sides[1]
    elif git_old is not None and git_new is not None:
        old, new = git_old, git_new
    else:
        raise PatchError(
            f"cannot read the file name from `diff --git {names}`",
            path=label,
            hint=_REGENERATE,
        )
    if "new file mode" in fields:
        old = None
    if "deleted file mode" in fields:
        new = None
    if old is None and new is None:
        raise PatchError("both sides of the diff are /dev/null", path=label, hint=_REGENERATE)
    if old is not None and new is not None and old != new and "rename from" not in fields:
        raise PatchError(
            f"the diff names two files, {old} and {new}, without `rename from`/`rename to`",
            path=label,
            hint=_REGENERATE,
        )
    return old, new


def _git_mode(fields: dict[str, str], label: str) -> int | None:
    for key in ("old mode", "deleted file mode"):
        if key in fields:
            _parse_mode(fields[key], label)
    for key in ("new file mode", "new mode"):
        if key in fields:
            return _parse_mode(fields[key], label)
    return None


def _parse_mode(text: str, label: str) -> int:
    try:
        mode = int(text.strip(), 8)
    except ValueError:
        raise PatchError(f"malformed file mode {text!r}", path=label, hint=_REGENERATE) from None
    kind = mode & 0o170000
    if kind == 0o120000:
        reason = "symlinks are not accepted"
    elif kind == 0o160000:
        reason = "submodules are not accepted"
    elif kind != _REGULAR:
        reason = f"file mode {text.strip()} is not a regular file"
    else:
        return mode
    raise PatchError(reason, path=label, hint="patch only regular text files")


def _parse_plain_file(cur: _Cursor) -> FilePatch:
    old_raw, old_date = _split_header(cur.take()[4:])
    new_raw, new_date = _split_header(cur.take()[4:])
    label = new_raw if new_raw != "/dev/null" else old_raw
    old = None if old_raw == "/dev/null" else old_raw
    new = None if new_raw == "/dev/null" else new_raw
    old, new = _clean_paths(*_plain_paths(old, new, label))
    hunks = _parse_hunks(cur, new or old or label)
    # `diff -N` shows an absent file as an empty one dated at the epoch.
    if old is not None and _EPOCH_RE.match(old_date) and _all_empty(hunks, old_side=True):
        old = None
    elif new is not None and _EPOCH_RE.match(new_date) and _all_empty(hunks, old_side=False):
        new = None
    return _checked_file(old, new, hunks, None)


def _plain_paths(old: str | None, new: str | None, label: str) -> tuple[str | None, str | None]:
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")):
        old, new = (old and old[2:]), (new and new[2:])
    elif old is not None and new is not None and old != new:
        # `diff -ruN before after` names both trees; like `patch -p1`, drop the first component.
        old_parts, new_parts = old.split("/", 1), new.split("/", 1)
        if len(old_parts) == 2 and len(new_parts) == 2 and old_parts[1] == new_parts[1]:
            old, new = old_parts[1], new_parts[1]
    if old is not None and new is not None and old != new:
        raise PatchError(
            f"the diff names two different files, {old} and {new}",
            path=label,
            hint="a plain diff cannot rename; use `git diff` (with rename headers) or one name",
        )
    if old is None and new is None:
        raise PatchError("both sides of the diff are /dev/null", path=label, hint=_REGENERATE)
    return old, new


def _all_empty(hunks: Sequence[Hunk], *, old_side: bool) -> bool:
    return bool(hunks) and all(
        (h.old_start, h.old_len) == (0, 0) if old_side else (h.new_start, h.new_len) == (0, 0)
        for h in hunks
    )


def _clean_paths(old: str | None, new: str | None) -> tuple[str | None, str | None]:
    return (None if old is None else _clean_path(old)), (None if new is None else _clean_path(new))


def _checked_file(
    old: str | None, new: str | None, hunks: tuple[Hunk, ...], mode: int | None
) -> FilePatch:
    label = new or old or ""
    if old is None and any(h.old_len for h in hunks):
        raise PatchError(
            "a new file's hunks remove lines", path=label, hint="new files use `@@ -0,0 +1,N @@`"
        )
    if new is None and any(h.new_len for h in hunks):
        raise PatchError(
            "a deleted file's hunks add lines", path=label, hint="deletions use `@@ -1,N +0,0 @@`"
        )
    if old is not None and new is not None and not hunks and old == new and mode is None:
        raise PatchError(
            "the file header is followed by no change",
            path=label,
            hint="drop the header or add the hunks that belong to it",
        )
    return FilePatch(old_path=old, new_path=new, hunks=hunks, new_mode=mode)


def _reject_repeats(files: Iterable[FilePatch]) -> None:
    seen: set[str] = set()
    for file in files:
        for path in {p for p in (file.old_path, file.new_path) if p is not None}:
            if path in seen:
                raise PatchError(
                    "the patch touches this file more than once",
                    path=path,
                    hint="put all changes to one file in one diff section",
                )
            seen.add(path)
    # A file the patch leaves in place cannot also be a directory of another file it writes.
    written = {file.new_path for file in files if file.new_path is not None}
    for path in written:
        for parent in PurePosixPath(path).parents:
            if str(parent) in written:
                raise PatchError(
                    f"the patch also writes {parent} as a file",
                    path=path,
                    hint="a path cannot be both a file and a directory",
                )


# -- file names -------------------------------------------------------------------------


def _split_header(text: str) -> tuple[str, str]:
    """A `---`/`+++` value: the name, then whatever followed a tab (a date, for plain diffs)."""
    text = _header(text)
    if text.startswith('"'):
        match = _QUOTED_RE.match(text)
        if match:
            return _unquote(match.group()), text[match.end() :]
    name, _, rest = text.partition("\t")
    return name, rest


def _header_name(text: str) -> str | None:
    name = _split_header(text)[0]
    return None if name == "/dev/null" else name


def _unquote_name(text: str) -> str:
    return _unquote(text) if text.startswith('"') else text


def _unquote(quoted: str) -> str:
    """Undo git's C-style quoting of names with special or non-ASCII bytes."""
    body = quoted[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out += char.encode("utf-8", errors="surrogateescape")
            i += 1
        elif body[i + 1 : i + 2] in _C_ESCAPES:
            out.append(_C_ESCAPES[body[i + 1]])
            i += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", body[i + 1 : i + 4]):
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            raise PatchError(f"malformed quoted file name {quoted}", hint=_REGENERATE)
    return out.decode("utf-8", errors="surrogateescape")


def _split_git_names(names: str) -> tuple[str | None, str | None]:
    """The two names of a `diff --git` line, prefixes stripped; (None, None) when ambiguous.

    Unquoted names may contain spaces, so the line is only trusted when it splits into two
    halves naming the same file; renames take their names from other headers anyway.
    """
    if names.startswith('"'):
        match = _QUOTED_RE.match(names)
        if not match:
            return None, None
        left, right = _unquote(match.group()), _unquote_name(names[match.end() :].lstrip(" "))
    else:
        left = right = ""
        for index, char in enumerate(names):
            if char != " ":
                continue
            candidate_left, candidate_right = names[:index], _unquote_name(names[index + 1 :])
            if candidate_left.removeprefix("a/") == candidate_right.removeprefix("b/"):
                left, right = candidate_left, candidate_right
                break
        if not left:
            return None, None
    if _has_git_prefixes(names):
        if not (left.startswith("a/") and right.startswith("b/")):
            return None, None
        return left[2:], right[2:]
    return left, right


def _has_git_prefixes(names: str) -> bool:
    return names.startswith(("a/", '"a/')) and (" b/" in names or ' "b/' in names)


def _strip_prefix(name: str | None, prefix: str, label: str) -> str | None:
    if name is None:
        return None
    if not name.startswith(prefix):
        raise PatchError(
            f"file name {name} lacks the `{prefix}` prefix its `diff --git` line uses",
            path=label,
            hint=_REGENERATE,
        )
    return name[len(prefix) :]


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _clean_path(path: str) -> str:
    """The normalised relative path, or a PatchError saying why it cannot be trusted."""
    shown = path if path.isprintable() else ascii(path)

    def reject(reason: str, hint: str) -> PatchError:
        return PatchError(reason, path=shown, hint=hint)

    if not _is_text(path):
        raise reject("file name is not UTF-8", "rename the file to a UTF-8 name")
    if "\x00" in path:
        raise reject("file name contains a NUL byte", _REGENERATE)
    if "\\" in path:
        raise reject(
            "file name contains a backslash",
            "separate directories with `/`; Windows-style paths are not accepted",
        )
    if not path.isprintable():
        raise reject("file name contains control characters", _REGENERATE)
    if path.startswith("/"):
        raise reject(
            "absolute paths are not accepted",
            "name files relative to the repository root (`a/src/x.py` or `src/x.py`)",
        )
    parts = [part for part in path.split("/") if part != "."]
    if ".." in parts:
        raise reject(
            "file name has a `..` component", "patches may only touch files inside the task tree"
        )
    if not parts or "" in parts:
        raise reject("file name has an empty component (`//` or a trailing `/`)", _REGENERATE)
    if ".git" in (part.lower() for part in parts):
        raise reject(
            "patches may not touch .git", "change the repository's files, not its git metadata"
        )
    return "/".join(parts)


# -- hunks ------------------------------------------------------------------------------


def _parse_hunks(cur: _Cursor, label: str) -> tuple[Hunk, ...]:
    hunks: list[Hunk] = []
    while (line := cur.peek()) is not None and line.startswith("@@"):
        hunks.append(_parse_hunk(cur, label, len(hunks) + 1))
    return tuple(hunks)


def _parse_hunk(cur: _Cursor, label: str, number: int) -> Hunk:
    header = _header(cur.take())
    match = _HUNK_RE.match(header)
    if not match:
        raise PatchError(
            f"hunk {number} has a malformed header {header!r}",
            path=label,
            hint="hunk headers look like `@@ -12,7 +12,8 @@`",
        )
    old_start, new_start = int(match[1]), int(match[3])
    old_len = 1 if match[2] is None else int(match[2])
    new_len = 1 if match[4] is None else int(match[4])
    body: list[str] = []
    old_seen = new_seen = 0
    while old_seen < old_len or new_seen < new_len:
        # The header's counts alone say where the body ends, as for `patch` and `git apply`.
        line = cur.peek()
        if line is None:
            break
        # Some tools strip the space from blank context lines; `patch` and `git apply` accept that.
        tag = line[:1] or " "
        if tag == "\\" and body and not body[-1].startswith("\\"):
            body.append(cur.take())
            continue
        if tag not in " -+":
            break
        old_seen += tag != "+"
        new_seen += tag != "-"
        body.append(line or " ")
        cur.take()
    line = cur.peek()
    if line is not None and line.startswith("\\") and body and not body[-1].startswith("\\"):
        body.append(cur.take())
    extra_old, extra_new = _overrun(cur)
    hunk = Hunk(old_start, old_len, new_start, new_len, tuple(body))
    if (old_seen + extra_old, new_seen + extra_new) != (old_len, new_len):
        raise PatchError(
            f"hunk {number} ({_hunk_header(hunk)}) is malformed: its header counts {old_len} "
            f"old and {new_len} new lines but its body has {old_seen + extra_old} and "
            f"{new_seen + extra_new}",
            path=label,
            hint="do not edit diffs by hand; " + _REGENERATE,
        )
    _check_hunk_body(hunk, label, number)
    return hunk


def _overrun(cur: _Cursor) -> tuple[int, int]:
    """Body-like lines right after a hunk its header did not count: old and new line counts."""
    extra_old = extra_new = 0
    ahead = 0
    while (line := cur.peek(ahead)) is not None and line[:1] in (" ", "-", "+"):
        # A following file's header, or a mail signature, ends the hunk legitimately.
        if cur.at_plain_header(ahead) or line == "-- ":
            break
        extra_old += line[0] != "+"
        extra_new += line[0] != "-"
        ahead += 1
    return extra_old, extra_new


def _check_hunk_body(hunk: Hunk, label: str, number: int) -> None:
    for offset, line in enumerate(hunk.lines, 1):
        if not _is_text(line):
            raise PatchError(
                f"hunk {number} line {offset} is not UTF-8 text",
                path=label,
                hint="patch only UTF-8 text files; binary content cannot be submitted",
            )
    old, new = _sides(hunk.lines)
    if any(not line.endswith("\n") for line in old[:-1] + new[:-1]):
        raise PatchError(
            f"hunk {number} ({_hunk_header(hunk)}) marks a line in its middle as the file's "
            "last (`\\ No newline at end of file`)",
            path=label,
            hint="do not edit diffs by hand; " + _REGENERATE,
        )


def _hunk_header(hunk: Hunk) -> str:
    return f"@@ -{hunk.old_start},{hunk.old_len} +{hunk.new_start},{hunk.new_len} @@"


def _sides(lines: Sequence[str]) -> tuple[list[str], list[str]]:
    """The old and new text of a hunk, each line with its newline unless a marker removed it."""
    old: list[str] = []
    new: list[str] = []
    previous: tuple[list[str], ...] = ()
    for line in lines:
        if line.startswith("\\"):
            for side in previous:
                side[-1] = side[-1].removesuffix("\n")
            previous = ()
            continue
        if line[0] == " ":
            previous = (old, new)
        elif line[0] == "-":
            previous = (old,)
        else:
            previous = (new,)
        for side in previous:
            side.append(line[1:] + "\n")
    return old, new


def _split_lines(text: str) -> list[str]:
    # Only "\n" ends a line: str.splitlines would also split on \r, \f, \x1c and U+2028.
    lines = text.split("\n")
    last = lines.pop()
    return [line + "\n" for line in lines] + ([last] if last else [])


# -- application ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Original:
    """A file's bytes and permission bits before the patch, for patching and for rollback."""

    data: bytes
    mode: int


def apply_patch(patch: Patch, root: Path) -> list[str]:
    """Apply every file of `patch` under `root`, or none of them.

    Returns the relative paths written or deleted, sorted. A PatchError means
    nothing was written; a plain JouledError means writing failed part way and
    the tree was rolled back as far as the filesystem allowed.
    """
    if not root.is_dir():
        raise PreconditionError(f"patch target {root} is not a directory")
    removed = {
        f.old_path for f in patch.files if f.old_path is not None and f.old_path != f.new_path
    }
    writes: dict[str, tuple[bytes, int]] = {}
    originals: dict[str, _Original] = {}
    for file in patch.files:
        _plan(file, root, removed, writes, originals)
    _commit(root, writes, removed, originals)
    return sorted(writes.keys() | removed)


def _plan(
    file: FilePatch,
    root: Path,
    removed: set[str],
    writes: dict[str, tuple[bytes, int]],
    originals: dict[str, _Original],
) -> None:
    """Check one file against the tree and compute its new bytes, writing nothing."""
    if file.old_path is None:
        _require_absent(root, file.path, removed)
        text = "".join(_apply_hunks(file.path, [], file.hunks))
        executable = bool(file.new_mode and file.new_mode & 0o111)
        writes[file.path] = (text.encode("utf-8"), 0o755 if executable else 0o644)
        return
    original = _read_existing(root, file.old_path, deleting=file.is_delete)
    originals[file.old_path] = original
    data = original.data
    if file.hunks:
        lines = _split_lines(_decode(original.data, file.old_path))
        data = "".join(_apply_hunks(file.old_path, lines, file.hunks)).encode("utf-8")
    if file.new_path is None:
        if data:
            raise PatchError(
                "the patch deletes this file but leaves lines of it unaccounted for",
                path=file.old_path,
                hint="a deletion must remove every line; " + _REGENERATE,
            )
        return
    if file.is_rename:
        _require_absent(root, file.new_path, removed)
    writes[file.new_path] = (data, _mode_after(original.mode, file.new_mode))


def _mode_after(current: int, git_mode: int | None) -> int:
    if git_mode is None:
        return current
    if git_mode & 0o111:
        # Execute wherever read is allowed, as git does.
        return current | ((current & 0o444) >> 2)
    return current & ~0o111


def _decode(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PatchError(
            f"the file in the task tree is not UTF-8 text (byte {err.start})",
            path=path,
            hint="only UTF-8 text files can be patched",
        ) from None


def _inspect(
    root: Path, rel: str, removed: AbstractSet[str] = frozenset()
) -> os.stat_result | None:
    """lstat each component of `rel` under `root`; None when the file does not exist.

    Every component is checked because a symlinked directory anywhere on the way
    would let a write land outside the tree.
    """
    parts = rel.split("/")
    st: os.stat_result | None = None
    for depth in range(1, len(parts) + 1):
        sub = "/".join(parts[:depth])
        try:
            st = os.lstat(root / sub)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise JouledError(f"cannot inspect {sub} in the task tree: {err}") from err
        if stat.S_ISLNK(st.st_mode):
            raise PatchError(
                f"`{sub}` is a symlink in the task tree; patches may not touch paths through "
                "symlinks",
                path=rel,
                hint="change the file the link points to by its own path inside the tree",
            )
        if depth < len(parts) and not stat.S_ISDIR(st.st_mode):
            if sub in removed:
                return None  # the patch deletes that file and puts a directory in its place
            raise PatchError(
                f"`{sub}` is a file in the task tree, not a directory",
                path=rel,
                hint="check the path against the pristine task tree",
            )
    assert st is not None
    if stat.S_ISDIR(st.st_mode):
        raise PatchError(
            "is a directory in the task tree", path=rel, hint="patch the files inside it"
        )
    if not stat.S_ISREG(st.st_mode):
        raise PatchError(
            "is not a regular file in the task tree", path=rel, hint="patch only regular files"
        )
    return st


def _require_absent(root: Path, rel: str, removed: set[str]) -> None:
    if _inspect(root, rel, removed) is not None:
        raise PatchError(
            "the patch creates this file but it already exists in the task tree",
            path=rel,
            hint="modify the existing file instead; " + _REGENERATE,
        )


def _read_existing(root: Path, rel: str, *, deleting: bool) -> _Original:
    st = _inspect(root, rel)
    if st is None:
        verb = "deletes" if deleting else "modifies"
        raise PatchError(
            f"the patch {verb} this file but it does not exist in the task tree",
            path=rel,
            hint="check the path (relative to the repository root) or create the file with a "
            "`--- /dev/null` diff",
        )
    try:
        fd = os.open(root / rel, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read()
    except OSError as err:
        raise JouledError(f"cannot read {rel} in the task tree: {err}") from err
    return _Original(data=data, mode=stat.S_IMODE(st.st_mode))


def patched_text(file: FilePatch, old_text: str) -> tuple[str, list[int]]:
    """A file's text after `file` applies to `old_text` ("" for a new file), in memory.

    Also returns the 1-based line numbers, in the new text, of the lines the
    patch added. Raises PatchError where a hunk does not apply.
    """
    added: list[int] = []
    lines = _apply_hunks(file.path, _split_lines(old_text), file.hunks, added)
    return "".join(lines), added


def _apply_hunks(
    path: str, lines: list[str], hunks: Sequence[Hunk], added: list[int] | None = None
) -> list[str]:
    out: list[str] = []
    cursor = 0  # first line of the old file not yet copied to `out`
    drift = 0  # how far the previous hunk landed from its header; later hunks likely share it
    for number, hunk in enumerate(hunks, 1):
        old, new = _sides(hunk.lines)
        stated = hunk.old_start - 1 if hunk.old_len else hunk.old_start
        at = _locate(lines, old, stated + drift, cursor)
        if at is None:
            raise _mismatch(path, number, hunk, lines, old, max(stated + drift, 0), cursor)
        drift = at - stated
        out += lines[cursor:at]
        if added is not None:
            added += _added_lines(hunk, len(out))
        out += new
        cursor = at + len(old)
    out += lines[cursor:]
    if any(not line.endswith("\n") for line in out[:-1]):
        raise PatchError(
            "the patch would join two lines: it puts text after a line that has no newline",
            path=path,
            hint="the hunk touching the end of the file must include its last line; " + _REGENERATE,
        )
    return out


def _added_lines(hunk: Hunk, start: int) -> list[int]:
    """The new-side line numbers of a hunk's '+' lines, its first new line being start + 1."""
    numbers: list[int] = []
    at = start
    for line in hunk.lines:
        if line[0] in " +":
            at += 1
            if line[0] == "+":
                numbers.append(at)
    return numbers


def _locate(lines: list[str], block: list[str], expected: int, lo: int) -> int | None:
    """Where `block` matches exactly, nearest to `expected` and not before `lo`."""
    if not block:
        # A hunk without context lines has nothing to search by: only its stated place will do.
        return expected if lo <= expected <= len(lines) else None
    hi = len(lines) - len(block)
    for distance in range(max(expected - lo, hi - expected) + 1):
        for at in (expected - distance, expected + distance) if distance else (expected,):
            if lo <= at <= hi and lines[at] == block[0] and lines[at : at + len(block)] == block:
                return at
    return None


def _mismatch(
    path: str,
    number: int,
    hunk: Hunk,
    lines: list[str],
    block: list[str],
    at: int,
    cursor: int,
) -> PatchError:
    detail = "it overlaps the hunk before it; hunks must follow the file's order"
    for index, want in enumerate(block):
        lineno = at + index + 1
        if at + index >= len(lines):
            detail = f"the file has {len(lines)} lines but the hunk expects line {lineno}"
            break
        have = lines[at + index]
        if have != want:
            detail = f"line {lineno} is {_show(have)} where the hunk expects {_show(want)}"
            if have.rstrip("\r\n") == want.rstrip("\r\n"):
                detail += " (the lines differ only in their line ending)"
            break
    else:
        if at >= cursor and not block:
            detail = f"the file has {len(lines)} lines, fewer than the hunk's position"
    return PatchError(
        f"hunk {number} ({_hunk_header(hunk)}) does not apply: {detail}, and no other position "
        "matches its context exactly",
        path=path,
        hint="the file differs from what the patch expects (no fuzz is applied); " + _REGENERATE,
    )


def _show(line: str, width: int = 60) -> str:
    return repr(line if len(line) <= width else line[: width - 3] + "...")


def _commit(
    root: Path,
    writes: dict[str, tuple[bytes, int]],
    removed: set[str],
    originals: dict[str, _Original],
) -> None:
    """Write the planned tree; on an OS error, undo what was done and raise."""
    undo: list[Callable[[], None]] = []
    try:
        # Deletions first: a rename or a file-to-directory change may reuse the freed name.
        for rel in sorted(removed):
            os.unlink(root / rel)
            undo.append(partial(_restore, root, rel, originals[rel]))
            _prune_empty_dirs(root, rel)
        for rel, (data, mode) in sorted(writes.items()):
            created = _make_parents(root, rel)
            undo.append(partial(_remove_dirs, created))
            _write_file(root / rel, data, mode)
            previous = originals.get(rel)
            undo.append(
                partial(_unlink_quietly, root / rel)
                if previous is None
                else partial(_restore, root, rel, previous)
            )
    except OSError as err:
        failures = _rollback(undo)
        state = "rolled back" if not failures else f"rollback failed: {'; '.join(failures)}"
        raise JouledError(f"could not write the patched tree ({err}); {state}") from err


def _rollback(undo: list[Callable[[], None]]) -> list[str]:
    failures: list[str] = []
    for action in reversed(undo):
        try:
            action()
        except OSError as err:
            failures.append(str(err))
    return failures


def _restore(root: Path, rel: str, original: _Original) -> None:
    _make_parents(root, rel)
    _write_file(root / rel, original.data, original.mode)


def _unlink_quietly(path: Path) -> None:
    path.unlink(missing_ok=True)


def _remove_dirs(created: list[Path]) -> None:
    for directory in reversed(created):
        directory.rmdir()


def _make_parents(root: Path, rel: str) -> list[Path]:
    created: list[Path] = []
    for parent in reversed(PurePosixPath(rel).parents[:-1]):
        directory = root / parent
        try:
            os.mkdir(directory)
        except FileExistsError:
            continue
        created.append(directory)
    return created


def _prune_empty_dirs(root: Path, rel: str) -> None:
    # A directory the patch emptied goes too, as with `git apply`; the root always stays.
    for parent in PurePosixPath(rel).parents[:-1]:
        try:
            os.rmdir(root / parent)
        except OSError:
            return


def _write_file(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` atomically, so an interrupted write never leaves half a file."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.jouled-tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), mode)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


# -- producing diffs --------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    data: bytes  # file content, or a symlink's target
    executable: bool
    link: bool = False


# What `diff_trees` reads of a tree: its entries (paths and metadata only, never
# contents, until a file is known to differ).
DIFF_MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class _Stat:
    path: Path
    size: int
    executable: bool
    link: bool


def diff_trees(
    old_root: Path,
    new_root: Path,
    *,
    max_bytes: int | None = None,
    max_entries: int = DIFF_MAX_ENTRIES,
) -> bytes:
    """A git-style diff that turns `old_root` into `new_root`; b"" when they are the same.

    Files are compared by content and executable bit, in sorted path order.
    `.git` is skipped (no patch may touch it). Renames show as a deletion and
    an addition. Symlinks that differ, non-UTF-8 files and names no patch could
    carry raise PatchError, since the result could not be applied.

    Memory is bounded whatever the trees hold: each tree is listed (at most
    `max_entries` entries), files of equal size are compared in chunks, and
    only a file that differs is read whole. With `max_bytes`, a changed file
    larger than that, or a diff growing past it, raises PatchError at once.
    """
    old = _listing(old_root, max_entries)
    new = _listing(new_root, max_entries)
    out = bytearray()
    for rel in sorted(old.keys() | new.keys()):
        before, after = old.get(rel), new.get(rel)
        if before is not None and after is not None and _same_file(before, after):
            continue
        _clean_path(rel)
        if (before is not None and before.link) or (after is not None and after.link):
            raise PatchError(
                "is a symlink that differs between the trees; a patch cannot express it",
                path=rel,
                hint="replace the symlink with a regular file",
            )
        for side in (before, after):
            if max_bytes is not None and side is not None and side.size > max_bytes:
                raise _too_large(f"is {side.size} bytes long", rel, max_bytes)
        out += _diff_file(rel, _read_entry(before), _read_entry(after)).encode("utf-8")
        if max_bytes is not None and len(out) > max_bytes:
            raise _too_large(f"takes the diff to {len(out)} bytes", rel, max_bytes)
    return bytes(out)


def _too_large(what: str, rel: str, max_bytes: int) -> PatchError:
    return PatchError(
        f"changed, {what}; the diff of a tree is bounded to {max_bytes} bytes",
        path=rel,
        hint="change less: a patch carries source edits, not generated or large files",
    )


def _listing(root: Path, max_entries: int) -> dict[str, _Stat]:
    if not root.is_dir():
        raise PreconditionError(f"{root} is not a directory")
    entries: dict[str, _Stat] = {}
    seen = 0

    def fail(err: OSError) -> None:
        raise err

    for dirpath, dirnames, filenames in os.walk(root, onerror=fail):
        dirnames[:] = [name for name in dirnames if name != ".git"]
        base = Path(dirpath)
        for name in filenames + dirnames:
            if name == ".git":
                continue
            seen += 1
            if seen > max_entries:
                raise PatchError(
                    f"{root.name} holds more than {max_entries} files and directories; "
                    "a diff of it is refused",
                    hint="leave fewer files in the tree",
                )
            path = base / name
            rel = path.relative_to(root).as_posix()
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                entries[rel] = _Stat(path, st.st_size, False, True)
            elif stat.S_ISREG(st.st_mode):
                entries[rel] = _Stat(path, st.st_size, bool(st.st_mode & 0o100), False)
            elif not stat.S_ISDIR(st.st_mode):
                raise PatchError("is not a regular file", path=rel, hint="remove it from the tree")
    return entries


def _same_file(a: _Stat, b: _Stat) -> bool:
    """Equal content (or link target) and executable bit, read in chunks."""
    if a.link or b.link:
        return a.link and b.link and os.readlink(a.path) == os.readlink(b.path)
    if a.executable != b.executable or a.size != b.size:
        return False
    with a.path.open("rb") as fa, b.path.open("rb") as fb:
        while True:
            chunk = fa.read(1 << 16)
            if chunk != fb.read(1 << 16):
                return False
            if not chunk:
                return True


def _read_entry(entry: _Stat | None) -> _Entry | None:
    if entry is None:
        return None
    if entry.link:
        target = os.readlink(entry.path).encode("utf-8", errors="surrogateescape")
        return _Entry(target, executable=False, link=True)
    return _Entry(entry.path.read_bytes(), executable=entry.executable)


def _diff_file(rel: str, before: _Entry | None, after: _Entry | None) -> str:
    out = [f"diff --git a/{rel} b/{rel}\n"]
    if before is None and after is not None:
        out.append(f"new file mode {_git_mode_of(after)}\n")
    elif after is None and before is not None:
        out.append(f"deleted file mode {_git_mode_of(before)}\n")
    elif before is not None and after is not None and before.executable != after.executable:
        out.append(f"old mode {_git_mode_of(before)}\nnew mode {_git_mode_of(after)}\n")
    old_lines = _split_lines(_decode_entry(before, rel))
    new_lines = _split_lines(_decode_entry(after, rel))
    if old_lines == new_lines:
        return "".join(out)
    # git ends names containing spaces with a tab, so readers can tell the name's end.
    tab = "\t" if " " in rel else ""
    out.append(f"--- {'/dev/null' if before is None else f'a/{rel}{tab}'}\n")
    out.append(f"+++ {'/dev/null' if after is None else f'b/{rel}{tab}'}\n")
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        out.extend(_format_hunk(group, old_lines, new_lines))
    return "".join(out)


def _git_mode_of(entry: _Entry) -> str:
    return "100755" if entry.executable else "100644"


def _decode_entry(entry: _Entry | None, rel: str) -> str:
    if entry is None:
        return ""
    try:
        return entry.data.decode("utf-8")
    except UnicodeDecodeError:
        raise PatchError(
            "is not UTF-8 text; a text patch cannot express it",
            path=rel,
            hint="leave binary files out of the trees being compared",
        ) from None


def _format_hunk(
    group: Sequence[tuple[str, int, int, int, int]], old: list[str], new: list[str]
) -> list[str]:
    old_from, old_to = group[0][1], group[-1][2]
    new_from, new_to = group[0][3], group[-1][4]
    out = [f"@@ -{_range(old_from, old_to)} +{_range(new_from, new_to)} @@\n"]
    for tag, i1, i2, j1, j2 in group:
        if tag == "equal":
            out.extend(_body_lines(" ", old[i1:i2]))
            continue
        out.extend(_body_lines("-", old[i1:i2]))
        out.extend(_body_lines("+", new[j1:j2]))
    return out


def _range(start: int, stop: int) -> str:
    length = stop - start
    # An empty range names the line before it, so `-0,0` means "before the first line".
    first = start + 1 if length else start
    return f"{first}" if length == 1 else f"{first},{length}"


def _body_lines(prefix: str, lines: Sequence[str]) -> list[str]:
    out = []
    for line in lines:
        if line.endswith("\n"):
            out.append(prefix + line)
        else:
            out.append(f"{prefix}{line}\n{_NO_NEWLINE}\n")
    return out
