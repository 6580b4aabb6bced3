"""Producing a git-style diff from two trees, within bounds on what is read of them."""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jouled.errors import PatchError, PreconditionError
from jouled.patch import NO_NEWLINE, clean_path, split_lines

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
        clean_path(rel)
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
    old_lines = split_lines(_decode_entry(before, rel))
    new_lines = split_lines(_decode_entry(after, rel))
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
            out.append(f"{prefix}{line}\n{NO_NEWLINE}\n")
    return out
