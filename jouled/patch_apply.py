"""Applying a parsed patch to a tree: all of its files, or none.

Every file's new content is computed in memory before anything is written, so
a patch that fails on its last file leaves the tree untouched; a write that
fails part way is rolled back as far as the filesystem allows.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath

from jouled.errors import JouledError, PatchError, PreconditionError
from jouled.patch import REGENERATE, FilePatch, Hunk, Patch, hunk_header, hunk_sides, split_lines

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
        lines = split_lines(_decode(original.data, file.old_path))
        data = "".join(_apply_hunks(file.old_path, lines, file.hunks)).encode("utf-8")
    if file.new_path is None:
        if data:
            raise PatchError(
                "the patch deletes this file but leaves lines of it unaccounted for",
                path=file.old_path,
                hint="a deletion must remove every line; " + REGENERATE,
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
            hint="modify the existing file instead; " + REGENERATE,
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
    lines = _apply_hunks(file.path, split_lines(old_text), file.hunks, added)
    return "".join(lines), added


def _apply_hunks(
    path: str, lines: list[str], hunks: Sequence[Hunk], added: list[int] | None = None
) -> list[str]:
    out: list[str] = []
    cursor = 0  # first line of the old file not yet copied to `out`
    drift = 0  # how far the previous hunk landed from its header; later hunks likely share it
    for number, hunk in enumerate(hunks, 1):
        old, new = hunk_sides(hunk.lines)
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
            hint="the hunk touching the end of the file must include its last line; " + REGENERATE,
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
        f"hunk {number} ({hunk_header(hunk)}) does not apply: {detail}, and no other position "
        "matches its context exactly",
        path=path,
        hint="the file differs from what the patch expects (no fuzz is applied); " + REGENERATE,
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
