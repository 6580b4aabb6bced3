"""Unified diffs: parse and validate them (applied by `jouled.patch_apply`, produced from
two trees by `jouled.patch_diff`).

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

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from jouled.errors import PatchError

MAX_PATCH_BYTES = 1 << 20

REGENERATE = "regenerate the patch with `git diff` against the pristine task tree"
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
NO_NEWLINE = "\\ No newline at end of file"


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
            hint=REGENERATE,
        )
    if "new file mode" in fields:
        old = None
    if "deleted file mode" in fields:
        new = None
    if old is None and new is None:
        raise PatchError("both sides of the diff are /dev/null", path=label, hint=REGENERATE)
    if old is not None and new is not None and old != new and "rename from" not in fields:
        raise PatchError(
            f"the diff names two files, {old} and {new}, without `rename from`/`rename to`",
            path=label,
            hint=REGENERATE,
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
        raise PatchError(f"malformed file mode {text!r}", path=label, hint=REGENERATE) from None
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
        raise PatchError("both sides of the diff are /dev/null", path=label, hint=REGENERATE)
    return old, new


def _all_empty(hunks: Sequence[Hunk], *, old_side: bool) -> bool:
    return bool(hunks) and all(
        (h.old_start, h.old_len) == (0, 0) if old_side else (h.new_start, h.new_len) == (0, 0)
        for h in hunks
    )


def _clean_paths(old: str | None, new: str | None) -> tuple[str | None, str | None]:
    return (None if old is None else clean_path(old)), (None if new is None else clean_path(new))


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
            raise PatchError(f"malformed quoted file name {quoted}", hint=REGENERATE)
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
            hint=REGENERATE,
        )
    return name[len(prefix) :]


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def clean_path(path: str) -> str:
    """The normalised relative path, or a PatchError saying why it cannot be trusted."""
    shown = path if path.isprintable() else ascii(path)

    def reject(reason: str, hint: str) -> PatchError:
        return PatchError(reason, path=shown, hint=hint)

    if not _is_text(path):
        raise reject("file name is not UTF-8", "rename the file to a UTF-8 name")
    if "\x00" in path:
        raise reject("file name contains a NUL byte", REGENERATE)
    if "\\" in path:
        raise reject(
            "file name contains a backslash",
            "separate directories with `/`; Windows-style paths are not accepted",
        )
    if not path.isprintable():
        raise reject("file name contains control characters", REGENERATE)
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
        raise reject("file name has an empty component (`//` or a trailing `/`)", REGENERATE)
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
            f"hunk {number} ({hunk_header(hunk)}) is malformed: its header counts {old_len} "
            f"old and {new_len} new lines but its body has {old_seen + extra_old} and "
            f"{new_seen + extra_new}",
            path=label,
            hint="do not edit diffs by hand; " + REGENERATE,
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
    old, new = hunk_sides(hunk.lines)
    if any(not line.endswith("\n") for line in old[:-1] + new[:-1]):
        raise PatchError(
            f"hunk {number} ({hunk_header(hunk)}) marks a line in its middle as the file's "
            "last (`\\ No newline at end of file`)",
            path=label,
            hint="do not edit diffs by hand; " + REGENERATE,
        )


def hunk_header(hunk: Hunk) -> str:
    return f"@@ -{hunk.old_start},{hunk.old_len} +{hunk.new_start},{hunk.new_len} @@"


def hunk_sides(lines: Sequence[str]) -> tuple[list[str], list[str]]:
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


def split_lines(text: str) -> list[str]:
    # Only "\n" ends a line: str.splitlines would also split on \r, \f, \x1c and U+2028.
    lines = text.split("\n")
    last = lines.pop()
    return [line + "\n" for line in lines] + ([last] if last else [])
