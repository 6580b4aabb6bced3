"""Unified-diff parsing, validation and all-or-nothing application, on real trees."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from jouled.errors import JouledError, PatchError
from jouled.patch import MAX_PATCH_BYTES, FilePatch, Hunk, parse_patch, patch_sha256
from jouled.patch_apply import apply_patch
from jouled.patch_diff import diff_trees

# -- helpers ----------------------------------------------------------------------------


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def read_tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    """Every regular file under root (outside .git): its bytes and whether it is executable."""
    tree: dict[str, tuple[bytes, bool]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if ".git" in rel.parts or not path.is_file() or path.is_symlink():
            continue
        tree[rel.as_posix()] = (path.read_bytes(), bool(path.stat().st_mode & 0o100))
    return tree


def apply_text(root: Path, text: str) -> list[str]:
    return apply_patch(parse_patch(text.encode()), root)


def reject(text: str | bytes, root: Path | None = None) -> PatchError:
    """The PatchError that parsing (and, given a root, applying) the patch raises."""
    raw = text.encode() if isinstance(text, str) else text
    with pytest.raises(PatchError) as caught:
        patch = parse_patch(raw)
        if root is not None:
            apply_patch(patch, root)
    return caught.value


def need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.skip(f"{tool} is not installed")
    return found


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "HOME": str(repo),
    }
    command = [need("git"), "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, check=True)
    return done.stdout.decode()


def git_diff(
    tmp_path: Path,
    before: dict[str, str | bytes],
    change: Callable[[Path], object],
    executable: tuple[str, ...] = (),
) -> tuple[bytes, Path, Path]:
    """The `git diff` of `change` made to a committed tree: (diff, pristine copy, changed tree)."""
    pristine = write_tree(tmp_path / "pristine", before)
    for name in executable:
        (pristine / name).chmod(0o755)
    repo = tmp_path / "repo"
    shutil.copytree(pristine, repo)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "before")
    change(repo)
    git(repo, "add", "-A")
    diff = git(repo, "diff", "--cached", "-M", "--no-color", "--no-ext-diff")
    return diff.encode(), pristine, repo


def diff_ruN(cwd: Path, old: str, new: str) -> bytes:
    done = subprocess.run([need("diff"), "-ruN", old, new], cwd=cwd, capture_output=True)
    assert done.returncode == 1, done.stderr  # 1: the trees differ
    return done.stdout


LINES = "".join(f"line {n}\n" for n in range(1, 21))


# -- accepted patches -------------------------------------------------------------------


def test_git_diff_output_applies_exactly(tmp_path: Path) -> None:
    def change(repo: Path) -> None:
        (repo / "mod.txt").write_text("one\nTWO\nthree\n")
        (repo / "gain_newline.txt").write_text("x\ny\n")
        (repo / "lose_newline.txt").write_text("p\nQ")
        (repo / "gone.txt").unlink()
        (repo / "pkg").mkdir()
        git(repo, "mv", "old_name.txt", "pkg/new_name.txt")
        (repo / "pkg/new_name.txt").write_text(LINES.replace("line 20", "line twenty"))
        (repo / "run.sh").write_text("#!/bin/sh\necho hi\n")
        (repo / "run.sh").chmod(0o755)
        (repo / "sub/é f.txt").write_text("héllo\nbye\n")
        (repo / "empty.txt").write_bytes(b"")

    before: dict[str, str | bytes] = {
        "mod.txt": "one\ntwo\nthree\n",
        "gain_newline.txt": "x\ny",
        "lose_newline.txt": "p\nq\n",
        "gone.txt": "bye\n",
        "old_name.txt": LINES,
        "sub/é f.txt": "héllo\n",
    }
    raw, pristine, repo = git_diff(tmp_path, before, change)
    assert b"rename from old_name.txt" in raw and b'"a/sub/\\303\\251 f.txt"' in raw

    written = apply_patch(parse_patch(raw), pristine)

    assert read_tree(pristine) == read_tree(repo)
    assert read_tree(pristine)["run.sh"][1] is True
    assert written == sorted(
        [
            "empty.txt",
            "gain_newline.txt",
            "gone.txt",
            "lose_newline.txt",
            "mod.txt",
            "old_name.txt",
            "pkg/new_name.txt",
            "run.sh",
            "sub/é f.txt",
        ]
    )


def test_git_pure_rename_moves_bytes_even_when_not_text(tmp_path: Path) -> None:
    blob = bytes(range(256))
    raw, pristine, repo = git_diff(
        tmp_path,
        {"data/blob.bin": blob, "keep.txt": "k\n"},
        lambda repo: git(repo, "mv", "data/blob.bin", "moved.bin"),
    )
    patch = parse_patch(raw)
    assert [(f.old_path, f.new_path, f.hunks) for f in patch.files] == [
        ("data/blob.bin", "moved.bin", ())
    ]
    assert patch.files[0].is_rename

    assert apply_patch(patch, pristine) == ["data/blob.bin", "moved.bin"]
    assert (pristine / "moved.bin").read_bytes() == blob
    assert not (pristine / "data").exists()  # the emptied directory goes too
    assert read_tree(pristine) == read_tree(repo)


def test_git_mode_change_sets_and_clears_the_executable_bit(tmp_path: Path) -> None:
    def change(repo: Path) -> None:
        (repo / "tool.py").chmod(0o755)
        (repo / "was_exec.sh").chmod(0o644)

    files: dict[str, str | bytes] = {"tool.py": "print()\n", "was_exec.sh": "true\n"}
    raw, pristine, repo = git_diff(tmp_path, files, change, executable=("was_exec.sh",))
    assert b"old mode 100644\nnew mode 100755" in raw
    assert b"old mode 100755\nnew mode 100644" in raw

    assert apply_patch(parse_patch(raw), pristine) == ["tool.py", "was_exec.sh"]
    assert os.stat(pristine / "tool.py").st_mode & 0o777 == 0o755
    assert os.stat(pristine / "was_exec.sh").st_mode & 0o777 == 0o644
    assert read_tree(pristine) == read_tree(repo)


def test_git_no_prefix_output_applies(tmp_path: Path) -> None:
    write_tree(tmp_path / "repo", {"src/x.py": "a = 1\n"})
    git(tmp_path / "repo", "init", "-q")
    git(tmp_path / "repo", "add", "-A")
    git(tmp_path / "repo", "commit", "-q", "-m", "x")
    (tmp_path / "repo/src/x.py").write_text("a = 2\n")
    raw = git(tmp_path / "repo", "diff", "--no-prefix", "--no-color").encode()
    assert raw.startswith(b"diff --git src/x.py src/x.py")
    tree = write_tree(tmp_path / "tree", {"src/x.py": "a = 1\n"})

    assert apply_patch(parse_patch(raw), tree) == ["src/x.py"]
    assert (tree / "src/x.py").read_text() == "a = 2\n"


def test_plain_diff_ruN_with_a_and_b_trees(tmp_path: Path) -> None:
    write_tree(tmp_path / "a", {"m.txt": "1\n2\n3\n", "gone.txt": "g\n", "d/k.txt": "k"})
    write_tree(tmp_path / "b", {"m.txt": "1\ntwo\n3\n", "new/n.txt": "n\n", "d/k.txt": "k\n"})
    raw = diff_ruN(tmp_path, "a", "b")
    assert b"--- a/m.txt\t" in raw and b"1970-01-01" in raw
    patch = parse_patch(raw)
    assert {f.path: (f.is_new, f.is_delete) for f in patch.files} == {
        "m.txt": (False, False),
        "gone.txt": (False, True),
        "new/n.txt": (True, False),
        "d/k.txt": (False, False),
    }
    target = tmp_path / "target"
    shutil.copytree(tmp_path / "a", target)

    apply_patch(patch, target)

    assert read_tree(target) == read_tree(tmp_path / "b")


def test_plain_diff_ruN_with_other_tree_names_strips_one_component(tmp_path: Path) -> None:
    write_tree(tmp_path / "before", {"pkg/m.py": "x = 1\n"})
    write_tree(tmp_path / "after", {"pkg/m.py": "x = 2\n"})
    raw = diff_ruN(tmp_path, "before", "after")
    target = shutil.copytree(tmp_path / "before", tmp_path / "target")

    assert apply_patch(parse_patch(raw), target) == ["pkg/m.py"]
    assert (target / "pkg/m.py").read_text() == "x = 2\n"


def test_plain_p0_paths_apply(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"src/x.py": "a\nb\n"})
    text = "--- src/x.py\n+++ src/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    assert apply_text(tree, text) == ["src/x.py"]
    assert (tree / "src/x.py").read_text() == "a\nc\n"


def test_dot_components_are_normalised(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"src/x.py": "a\n"})
    patch = parse_patch(b"--- ./src/./x.py\n+++ ./src/./x.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert patch.paths == ("src/x.py",)
    apply_patch(patch, tree)
    assert (tree / "src/x.py").read_text() == "b\n"


def test_new_file_modes(tmp_path: Path) -> None:
    text = (
        "diff --git a/bin/run b/bin/run\nnew file mode 100755\n--- /dev/null\n+++ b/bin/run\n"
        "@@ -0,0 +1,2 @@\n+#!/bin/sh\n+exit 0\n"
        "--- /dev/null\n+++ b/plain.txt\n@@ -0,0 +1 @@\n+p\n"
    )
    assert apply_text(tmp_path, text) == ["bin/run", "plain.txt"]
    assert (tmp_path / "bin/run").read_text() == "#!/bin/sh\nexit 0\n"
    assert os.stat(tmp_path / "bin/run").st_mode & 0o777 == 0o755
    assert os.stat(tmp_path / "plain.txt").st_mode & 0o777 == 0o644


def test_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"s.sh": "a\n"})
    (tree / "s.sh").chmod(0o750)
    apply_text(tree, "--- a/s.sh\n+++ b/s.sh\n@@ -1 +1 @@\n-a\n+b\n")
    assert os.stat(tree / "s.sh").st_mode & 0o777 == 0o750
    assert (tree / "s.sh").read_text() == "b\n"


def test_delete_removes_the_file_and_its_emptied_directory(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"d/e/f.txt": "1\n2\n", "keep.txt": "k\n"})
    text = "diff --git a/d/e/f.txt b/d/e/f.txt\ndeleted file mode 100644\n"
    text += "--- a/d/e/f.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-1\n-2\n"
    assert apply_text(tree, text) == ["d/e/f.txt"]
    assert not (tree / "d").exists()
    assert read_tree(tree) == {"keep.txt": (b"k\n", False)}


def test_file_can_become_a_directory(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"x": "old\n"})
    text = (
        "--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\n"
        "--- /dev/null\n+++ b/x/y\n@@ -0,0 +1 @@\n+new\n"
    )
    assert apply_text(tree, text) == ["x", "x/y"]
    assert (tree / "x/y").read_text() == "new\n"


def test_rename_with_and_without_content_change(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"a.txt": LINES, "b.txt": "same\n"})
    text = (
        "diff --git a/a.txt b/lib/a2.txt\nsimilarity index 90%\nrename from a.txt\n"
        "rename to lib/a2.txt\n--- a/a.txt\n+++ b/lib/a2.txt\n"
        "@@ -1,3 +1,3 @@\n-line 1\n+LINE 1\n line 2\n line 3\n"
        "diff --git a/b.txt b/c.txt\nsimilarity index 100%\nrename from b.txt\nrename to c.txt\n"
    )
    patch = parse_patch(text.encode())
    assert [f.is_rename for f in patch.files] == [True, True]
    assert patch.paths == ("a.txt", "b.txt", "c.txt", "lib/a2.txt")

    assert apply_patch(patch, tree) == ["a.txt", "b.txt", "c.txt", "lib/a2.txt"]
    assert read_tree(tree) == {
        "c.txt": (b"same\n", False),
        "lib/a2.txt": (LINES.replace("line 1\n", "LINE 1\n", 1).encode(), False),
    }


def test_newline_at_eof_added_and_removed(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"add.txt": "a\nb", "drop.txt": "a\nb\n"})
    text = (
        "--- a/add.txt\n+++ b/add.txt\n@@ -1,2 +1,2 @@\n"
        " a\n-b\n\\ No newline at end of file\n+b\n"
        "--- a/drop.txt\n+++ b/drop.txt\n@@ -1,2 +1,2 @@\n"
        " a\n-b\n+b\n\\ No newline at end of file\n"
    )
    apply_text(tree, text)
    assert (tree / "add.txt").read_bytes() == b"a\nb\n"
    assert (tree / "drop.txt").read_bytes() == b"a\nb"


def test_context_line_without_newline_on_both_sides(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"f": "a\nb\nc"})
    text = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n-a\n+A\n b\n c\n\\ No newline at end of file\n"
    apply_text(tree, text)
    assert (tree / "f").read_bytes() == b"A\nb\nc"


def test_hunks_apply_at_an_offset_without_fuzz(tmp_path: Path) -> None:
    # The patch was made against LINES; the tree has five more lines on top.
    shifted = "".join(f"extra {n}\n" for n in range(5)) + LINES
    tree = write_tree(tmp_path, {"f.txt": shifted, "g.txt": LINES[len("line 1\nline 2\n") :]})
    text = (
        "--- a/f.txt\n+++ b/f.txt\n"
        "@@ -3,3 +3,3 @@\n line 3\n-line 4\n+LINE 4\n line 5\n"
        "@@ -15,3 +15,4 @@\n line 15\n line 16\n+inserted\n line 17\n"
        # g.txt lost its first two lines, so this hunk sits two lines earlier than stated.
        "--- a/g.txt\n+++ b/g.txt\n@@ -9,3 +9,3 @@\n line 9\n-line 10\n+LINE 10\n line 11\n"
    )
    apply_text(tree, text)
    expected = shifted.replace("line 4\n", "LINE 4\n").replace("line 16\n", "line 16\ninserted\n")
    assert (tree / "f.txt").read_text() == expected
    assert "LINE 10\nline 11\n" in (tree / "g.txt").read_text()


def test_zero_context_insertion_applies_at_its_stated_line(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"f": "a\nb\nc\n"})
    apply_text(tree, "--- a/f\n+++ b/f\n@@ -2,0 +3 @@\n+new\n")
    assert (tree / "f").read_text() == "a\nb\nnew\nc\n"


def test_blank_context_line_without_its_space_is_accepted(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"f": "a\n\nb\n"})
    apply_text(tree, "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n")
    assert (tree / "f").read_text() == "a\n\nc\n"


def test_commentary_around_the_diff_is_ignored(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"f": "a\n"})
    text = (
        "From 1234 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] fix\n\nExplain the fix.\n---\n"
        " f | 2 +-\n\ndiff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n"
        "@@ -1 +1 @@\n-a\n+b\n-- \n2.39.5\n"
    )
    apply_text(tree, text)
    assert (tree / "f").read_text() == "b\n"


def test_crlf_files_and_crlf_patches(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"w.txt": "a\r\nb\r\n"})
    text = "--- a/w.txt\r\n+++ b/w.txt\r\n@@ -1,2 +1,2 @@\r\n a\r\n-b\r\n+c\r\n"
    apply_text(tree, text)
    assert (tree / "w.txt").read_bytes() == b"a\r\nc\r\n"


def test_only_newline_ends_a_line(tmp_path: Path) -> None:
    # Form feeds and U+2028 are ordinary characters in source files, not line breaks.
    tree = write_tree(tmp_path, {"f.py": "a\x0cb\nc\u2028d\ne\n"})
    apply_text(tree, "--- a/f.py\n+++ b/f.py\n@@ -1,3 +1,3 @@\n a\x0cb\n c\u2028d\n-e\n+E\n")
    assert (tree / "f.py").read_text() == "a\x0cb\nc\u2028d\nE\n"


def test_patch_metadata() -> None:
    raw = (
        b"--- a/m\n+++ b/m\n@@ -1 +1 @@\n-a\n+b\n"
        b"--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+n\n"
        b"--- a/d\n+++ /dev/null\n@@ -1 +0,0 @@\n-d\n"
    )
    patch = parse_patch(raw)
    assert patch.sha256 == hashlib.sha256(raw).hexdigest() == patch_sha256(raw)
    assert patch.paths == ("d", "m", "n")
    modified, created, deleted = patch.files
    assert (modified.is_new, modified.is_delete, modified.is_rename) == (False, False, False)
    assert created == FilePatch(None, "n", (Hunk(0, 0, 1, 1, ("+n",)),))
    assert created.is_new and created.path == "n"
    assert deleted.is_delete and deleted.path == "d" and not deleted.is_new


# -- rejected patches -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("/etc/passwd", "absolute"),
        ("../outside.txt", ".."),
        ("src/../../outside.txt", ".."),
        ("src\\win.py", "backslash"),
        ("src//x.py", "empty component"),
        (".git/hooks/pre-commit", ".git"),
        ("bell\x07.py", "control characters"),
        ("esc\x1b[31m.py", "control characters"),
    ],
)
def test_unsafe_paths_are_rejected(tmp_path: Path, name: str, reason: str) -> None:
    text = f"--- /dev/null\n+++ {name}\n@@ -0,0 +1 @@\n+x\n"
    error = reject(text, tmp_path)
    assert reason in error.message and error.hint
    assert not any(tmp_path.iterdir())


def test_nul_and_non_utf8_names_are_rejected() -> None:
    nul = reject(b"--- /dev/null\n+++ b/x\x00y\n@@ -0,0 +1 @@\n+x\n")
    assert "NUL" in nul.message and "\\x00" in nul.path
    bad = reject(b"--- /dev/null\n+++ b/caf\xe9\n@@ -0,0 +1 @@\n+x\n")
    assert "not UTF-8" in bad.message


def test_a_prefix_does_not_hide_an_absolute_path() -> None:
    error = reject("--- a//etc/passwd\n+++ b//etc/passwd\n@@ -1 +1 @@\n-a\n+b\n")
    assert error.path == "/etc/passwd" and "absolute" in error.message


@pytest.mark.parametrize("raw", [b"", b"\n\n  \n"])
def test_empty_patch_is_rejected(raw: bytes) -> None:
    assert "empty" in reject(raw).message


def test_patch_without_file_changes_is_rejected() -> None:
    error = reject("I fixed the bug by thinking hard.\n--- \n")
    assert "no file changes" in error.message and "unified diff" in error.hint


def test_size_bound(tmp_path: Path) -> None:
    text = "--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+x\n"
    raw = text.encode()
    assert parse_patch(raw, max_bytes=len(raw)).paths == ("f",)
    error = reject_sized(raw, len(raw) - 1)
    assert f"{len(raw)} bytes" in error.message and f"{len(raw) - 1} bytes" in error.message
    assert MAX_PATCH_BYTES == 1 << 20
    big = ("--- /dev/null\n+++ b/big\n@@ -0,0 +1 @@\n+" + "x" * MAX_PATCH_BYTES + "\n").encode()
    assert str(MAX_PATCH_BYTES) in reject(big).message


def reject_sized(raw: bytes, bound: int) -> PatchError:
    with pytest.raises(PatchError) as caught:
        parse_patch(raw, max_bytes=bound)
    return caught.value


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        # The header promises three old lines; the body has two and the patch ends.
        ("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+c\n", "body has 2 and 2"),
        # The body runs on past what the header counts.
        ("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n d\n", "body has 3 and 3"),
        # The next hunk's header arrives early.
        ("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n@@ -9 +9 @@\n-x\n+y\n", "body has 1 and 1"),
    ],
)
def test_hunk_counts_must_match_their_bodies(text: str, counts: str) -> None:
    error = reject(text)
    assert error.path == "f" and "hunk 1" in error.message and "malformed" in error.message
    assert counts in error.message


def test_malformed_hunk_header() -> None:
    error = reject("--- a/f\n+++ b/f\n@@ -x +1 @@\n-a\n+b\n")
    assert "malformed header" in error.message and "@@ -12,7 +12,8 @@" in error.hint


def test_no_newline_marker_in_the_middle_is_malformed() -> None:
    error = reject(
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n\\ No newline at end of file\n-b\n+c\n+d\n"
    )
    assert "middle" in error.message


def test_hunk_without_a_file_header() -> None:
    assert "no file header" in reject("@@ -1 +1 @@\n-a\n+b\n").message


@pytest.mark.parametrize(
    "text",
    [
        "diff --git a/img.png b/img.png\nindex 1..2 100644\nGIT binary patch\nliteral 5\nabc\n",
        "diff --git a/img.png b/img.png\nindex 1..2 100644\n"
        "Binary files a/img.png and b/img.png differ\n",
        "diff -ruN a/img.png b/img.png\nBinary files a/img.png and b/img.png differ\n",
    ],
)
def test_binary_patches_are_rejected(text: str) -> None:
    error = reject(text)
    assert "binary" in error.message and "text" in error.hint


def test_diff_r_without_N_is_rejected() -> None:
    error = reject("Only in b: new.txt\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    assert "one side only" in error.message and "-N" in error.hint


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("new file mode 120000", "symlinks"),
        ("new file mode 160000", "submodules"),
        ("copy from a\ncopy to b", "copies"),
    ],
)
def test_non_file_changes_are_rejected(header: str, reason: str) -> None:
    text = f"diff --git a/b b/b\n{header}\n--- /dev/null\n+++ b/b\n@@ -0,0 +1 @@\n+target\n"
    assert reason in reject(text).message


def test_a_file_may_appear_only_once() -> None:
    hunk = "@@ -1 +1 @@\n-a\n+b\n"
    error = reject(f"--- a/f\n+++ b/f\n{hunk}--- a/f\n+++ b/f\n{hunk}")
    assert error.path == "f" and "more than once" in error.message
    nested = reject(
        "--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+a\n--- /dev/null\n+++ b/x/y\n@@ -0,0 +1 @@\n+b\n"
    )
    assert nested.path == "x/y" and "file" in nested.message


def test_plain_diff_naming_two_files_is_rejected() -> None:
    error = reject("--- x.py.orig\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert "two different files" in error.message and "git diff" in error.hint
    both = reject("diff --git a/f b/f\n--- /dev/null\n+++ /dev/null\n@@ -0,0 +0,0 @@\n")
    assert "both sides" in both.message and both.path == "f"


def test_non_utf8_patch_content_names_its_file() -> None:
    error = reject(
        b"--- a/ok\n+++ b/ok\n@@ -1 +1 @@\n-a\n+b\n--- a/bad\n+++ b/bad\n@@ -1 +1 @@\n-a\n+\xff\n"
    )
    assert error.path == "bad" and "not UTF-8" in error.message


def test_non_utf8_file_in_the_tree_is_rejected(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"latin1.txt": "caf\xe9\n".encode("latin-1")})
    error = reject("--- a/latin1.txt\n+++ b/latin1.txt\n@@ -1 +1 @@\n-café\n+cafe\n", tree)
    assert error.path == "latin1.txt" and "not UTF-8" in error.message


def test_context_mismatch_names_the_file_hunk_and_line(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"f.txt": LINES.replace("line 12\n", "line twelve\n")})
    text = (
        "--- a/f.txt\n+++ b/f.txt\n@@ -2,3 +2,3 @@\n line 2\n-line 3\n+LINE 3\n line 4\n"
        "@@ -11,3 +11,3 @@\n line 11\n-line 12\n+LINE 12\n line 13\n"
    )
    error = reject(text, tree)
    assert error.path == "f.txt"
    assert "hunk 2 (@@ -11,3 +11,3 @@)" in error.message
    assert "line 12 is 'line twelve\\n' where the hunk expects 'line 12\\n'" in error.message
    assert "no fuzz" in error.hint
    assert (tree / "f.txt").read_text() == LINES.replace("line 12\n", "line twelve\n")


def test_missing_newline_must_match(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"f": "a\nb\n"})
    error = reject(
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n", tree
    )
    assert "line 2" in error.message and "line ending" in error.message


def test_crlf_mismatch_says_it_is_the_line_ending(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"f": "a\r\nb\r\n"})
    error = reject("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n", tree)
    assert "line ending" in error.message


def test_text_after_a_last_line_without_newline_is_rejected(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"f": "a\nb"})
    error = reject("--- a/f\n+++ b/f\n@@ -2,0 +3 @@\n+c\n", tree)
    assert "join two lines" in error.message
    assert (tree / "f").read_bytes() == b"a\nb"


def test_hunks_out_of_order_are_rejected(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"f": LINES})
    text = (
        "--- a/f\n+++ b/f\n@@ -10,1 +10,1 @@\n-line 10\n+LINE 10\n"
        "@@ -2,1 +2,1 @@\n-line 2\n+LINE 2\n"
    )
    error = reject(text, tree)
    assert "hunk 2" in error.message and "overlaps" in error.message


def test_existence_is_checked(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"here.txt": "h\n", "dir/x": "x\n"})
    create = reject("--- /dev/null\n+++ b/here.txt\n@@ -0,0 +1 @@\n+h\n", tree)
    assert create.path == "here.txt" and "already exists" in create.message
    modify = reject("--- a/nope.txt\n+++ b/nope.txt\n@@ -1 +1 @@\n-a\n+b\n", tree)
    assert (
        modify.path == "nope.txt" and "modifies this file but it does not exist" in modify.message
    )
    delete = reject("--- a/nope.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n", tree)
    assert "deletes this file but it does not exist" in delete.message
    rename = reject(
        "diff --git a/dir/x b/here.txt\nsimilarity index 100%\n"
        "rename from dir/x\nrename to here.txt\n",
        tree,
    )
    assert rename.path == "here.txt" and "already exists" in rename.message
    directory = reject("--- a/dir\n+++ b/dir\n@@ -1 +1 @@\n-a\n+b\n", tree)
    assert "directory" in directory.message
    through_file = reject("--- /dev/null\n+++ b/here.txt/sub\n@@ -0,0 +1 @@\n+a\n", tree)
    assert "`here.txt` is a file" in through_file.message
    assert read_tree(tree) == {"here.txt": (b"h\n", False), "dir/x": (b"x\n", False)}


def test_a_deletion_must_cover_the_whole_file(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"f": "a\nb\n"})
    error = reject(
        "diff --git a/f b/f\ndeleted file mode 100644\n--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n",
        tree,
    )
    assert "unaccounted" in error.message
    assert (tree / "f").read_text() == "a\nb\n"


@pytest.mark.parametrize(
    "text",
    [
        "--- /dev/null\n+++ b/link/evil.txt\n@@ -0,0 +1 @@\n+pwned\n",
        "--- a/link/victim.txt\n+++ b/link/victim.txt\n@@ -1 +1 @@\n-safe\n+pwned\n",
        "--- a/filelink\n+++ b/filelink\n@@ -1 +1 @@\n-safe\n+pwned\n",
        "diff --git a/in.txt b/link/in.txt\nsimilarity index 100%\n"
        "rename from in.txt\nrename to link/in.txt\n",
    ],
)
def test_symlinks_inside_the_tree_are_never_written_through(tmp_path: Path, text: str) -> None:
    outside = write_tree(tmp_path / "outside", {"victim.txt": "safe\n"})
    tree = write_tree(tmp_path / "tree", {"in.txt": "i\n"})
    (tree / "link").symlink_to(outside, target_is_directory=True)
    (tree / "filelink").symlink_to(outside / "victim.txt")

    error = reject(text, tree)

    assert "symlink" in error.message
    assert read_tree(outside) == {"victim.txt": (b"safe\n", False)}
    assert read_tree(tree) == {"in.txt": (b"i\n", False)}


def test_all_or_nothing_when_a_later_file_fails(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, {"a.txt": "a\n", "b.txt": "b\n"})
    text = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n"
        "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+n\n"
        "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-not b\n+B\n"
    )
    error = reject(text, tree)
    assert error.path == "b.txt"
    assert read_tree(tree) == {"a.txt": (b"a\n", False), "b.txt": (b"b\n", False)}


def test_a_write_failure_rolls_everything_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = write_tree(tmp_path, {"a.txt": "a\n", "gone.txt": "g\n", "z.txt": "z\n"})
    before = read_tree(tree)
    text = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+A\n"
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-g\n"
        "--- /dev/null\n+++ b/new/n.txt\n@@ -0,0 +1 @@\n+n\n"
        "--- a/z.txt\n+++ b/z.txt\n@@ -1 +1 @@\n-z\n+Z\n"
    )
    patch = parse_patch(text.encode())
    real_replace = os.replace
    failed: list[str] = []

    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        # The last file's write fails once, after the others have been written.
        if os.fspath(dst).endswith("z.txt") and not failed:
            failed.append(os.fspath(dst))
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(JouledError) as caught:
        apply_patch(patch, tree)
    monkeypatch.undo()

    assert failed
    assert not isinstance(caught.value, PatchError)
    assert "rolled back" in caught.value.message
    assert read_tree(tree) == before
    assert sorted(p.name for p in tree.iterdir()) == ["a.txt", "gone.txt", "z.txt"]


# -- diff_trees -------------------------------------------------------------------------


def round_trip(old: Path, new: Path, scratch: Path) -> bytes:
    raw = diff_trees(old, new)
    target = shutil.copytree(old, scratch)
    if raw:
        apply_patch(parse_patch(raw), target)
    assert read_tree(target) == read_tree(new)
    return raw


def test_diff_trees_round_trips_handmade_cases(tmp_path: Path) -> None:
    old = write_tree(
        tmp_path / "old",
        {
            "same.txt": "s\n",
            "mod.py": LINES,
            "gain.txt": "a\nb",
            "lose.txt": "a\nb\n",
            "gone/x.txt": "x\n",
            "empty_gone.txt": "",
            "crlf.txt": "a\r\nb\r\n",
            "mode.sh": "true\n",
            "with space.txt": "1\n",
        },
    )
    new = write_tree(
        tmp_path / "new",
        {
            "same.txt": "s\n",
            "mod.py": LINES.replace("line 3\n", "").replace("line 18\n", "18\nmore\n"),
            "gain.txt": "a\nb\n",
            "lose.txt": "a\nb",
            "added/y.txt": "y",
            "empty_new.txt": "",
            "crlf.txt": "a\r\nB\r\n",
            "mode.sh": "true\n",
            "with space.txt": "2\n",
        },
    )
    (new / "mode.sh").chmod(0o755)

    raw = round_trip(old, new, tmp_path / "target")

    text = raw.decode()
    assert "same.txt" not in text
    assert text.count("\\ No newline at end of file") == 3
    assert "new file mode 100644\ndiff --git" in text  # an empty new file has no hunks
    assert "old mode 100644\nnew mode 100755\n" in text
    assert "--- a/with space.txt\t\n" in text
    assert diff_trees(old, new) == raw  # deterministic
    files = [line.split(" b/")[-1] for line in text.splitlines() if line.startswith("diff --git")]
    assert files == sorted(files)


def test_diff_trees_of_identical_trees_is_empty(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {"a": "1\n", "d/b": "2"}
    assert diff_trees(write_tree(tmp_path / "x", files), write_tree(tmp_path / "y", files)) == b""


def test_diff_trees_skips_git_metadata_and_rejects_binary(tmp_path: Path) -> None:
    old = write_tree(tmp_path / "old", {".git/HEAD": "ref: a\n", "f": "1\n"})
    new = write_tree(tmp_path / "new", {".git/HEAD": "ref: b\n", "f": "2\n"})
    assert b".git" not in diff_trees(old, new)
    (new / "blob.bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(PatchError) as caught:
        diff_trees(old, new)
    assert caught.value.path == "blob.bin" and "not UTF-8" in caught.value.message


def test_diff_trees_output_is_accepted_by_git_apply(tmp_path: Path) -> None:
    old = write_tree(tmp_path / "old", {"m.txt": LINES, "gone.txt": "g", "eof.txt": "e"})
    new = write_tree(
        tmp_path / "new",
        {"m.txt": LINES.replace("line 9", "nine"), "n.txt": "n\n", "eof.txt": "e\n"},
    )
    raw = diff_trees(old, new)
    work = shutil.copytree(old, tmp_path / "work")
    git(work, "init", "-q")
    (tmp_path / "p.diff").write_bytes(raw)
    git(work, "apply", str(tmp_path / "p.diff"))
    assert read_tree(work) == read_tree(new)


def test_diff_trees_round_trips_random_trees(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    names = ["a.txt", "d/b.txt", "d/e/c.py", "x y.txt", "é.md"]
    pieces = [
        "alpha",
        "beta",
        "",
        "gamma\r",
        "  delta",
        "ünï",
        "\tepsilon",
        "feed\x0cform",
        "\u2028",
    ]

    def content() -> str:
        lines = [rng.choice(pieces) for _ in range(rng.randrange(0, 12))]
        return "\n".join(lines) + rng.choice(["", "\n"])

    def mutate(text: str) -> str:
        lines = text.split("\n")
        for _ in range(rng.randrange(1, 4)):
            spot = rng.randrange(0, len(lines) + 1)
            action = rng.choice(["insert", "delete", "replace"])
            if action == "insert":
                lines.insert(spot, rng.choice(pieces))
            elif lines and spot < len(lines):
                if action == "delete":
                    del lines[spot]
                else:
                    lines[spot] = rng.choice(pieces)
        return "\n".join(lines)

    for case in range(60):
        old_files = {n: content() for n in names if rng.random() < 0.7}
        new_files = {n: mutate(t) for n, t in old_files.items() if rng.random() < 0.8}
        new_files.update({n: content() for n in names if n not in old_files and rng.random() < 0.5})
        old = write_tree(tmp_path / f"{case}/old", dict(old_files))
        new = write_tree(tmp_path / f"{case}/new", dict(new_files))
        for name in new_files:
            if rng.random() < 0.2:
                (new / name).chmod(0o755)
        round_trip(old, new, tmp_path / f"{case}/target")
