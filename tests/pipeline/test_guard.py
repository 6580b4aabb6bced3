"""What a patch may not add: modules shadowing the start-up, bytecode, native code, .pth."""

from __future__ import annotations

from pathlib import Path

import pytest

from jouled.errors import PatchError
from jouled.patch import parse_patch
from jouled.patch_apply import apply_patch
from jouled.patch_diff import diff_trees
from jouled.pipeline.guard import check_patch


def patched(tmp_path: Path, before: dict[str, str], after: dict[str, str]) -> None:
    """Build the patch from `before` to `after`, apply it to a copy of `before`, check it."""
    old, new, tree = tmp_path / "old", tmp_path / "new", tmp_path / "tree"
    for root, files in ((old, before), (new, after), (tree, before)):
        root.mkdir()
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    patch = parse_patch(diff_trees(old, new))
    apply_patch(patch, tree)
    check_patch(patch, tree)


BASE = {"pkg/__init__.py": "", "pkg/core.py": "x = 1\n", "scripts/types.py": "T = 1\n"}


@pytest.mark.parametrize(
    ("added", "says"),
    [
        ({"unittest.py": "import sys\n"}, "named 'unittest'"),
        ({"pytest/__init__.py": ""}, "named 'pytest'"),
        ({"sitecustomize.py": ""}, "named 'sitecustomize'"),
        ({"scripts/json.py": ""}, "named 'json'"),  # a directory pytest may put on sys.path
        ({"pkg/__pycache__/core.cpython-311.pyc": "x"}, "__pycache__"),
        ({"evil.pth": "import os\n"}, ".pth"),
    ],
)
def test_a_patch_adding_a_start_up_hazard_is_refused(
    tmp_path: Path, added: dict[str, str], says: str
) -> None:
    with pytest.raises(PatchError) as caught:
        patched(tmp_path, BASE, {**BASE, **added})
    assert says in caught.value.message


@pytest.mark.parametrize(
    "after",
    [
        {**BASE, "pkg/json.py": "x = 2\n"},  # a submodule of a package: not a top-level name
        {**BASE, "scripts/types.py": "T = 2\n"},  # the task's own file, edited
        {**BASE, "pkg/core.py": "x = 2\n", "pkg/extra.py": "y = 1\n"},
    ],
)
def test_ordinary_patches_pass(tmp_path: Path, after: dict[str, str]) -> None:
    patched(tmp_path, BASE, after)
