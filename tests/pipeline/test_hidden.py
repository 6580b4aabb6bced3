"""Hidden test files: declared in task.toml, protected, never seeded, copied in to grade."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from jouled.config import Config
from jouled.contracts.contract import iter_tree
from jouled.contracts.task import load_task
from jouled.daemon import Daemon
from jouled.errors import PatchError, TaskError
from jouled.patch import parse_patch
from jouled.patch_apply import apply_patch
from jouled.pipeline.graded_tree import prepare_tree, secret_tests, seed
from jouled.pipeline.jouled_sealed import _outline
from jouled.pipeline.taskcheck import check_tasks

REPO = Path(__file__).resolve().parents[2]
SEMVER = REPO / "tasks" / "smoke" / "semver"
HIDDEN = "tests/test_hidden_precedence.py"

TOML = """name = "t"
prompt = "p"
test_cmd = ["python", "-m", "pytest", "-p", "no:cacheprovider", "tests", "secret"]
test_files = ["tests/test_visible.py"]
{hidden}
"""


def make_task(root: Path, hidden: str = 'hidden_files = ["secret/**"]') -> Path:
    task = root / "s" / "t"
    files = {
        "task.toml": TOML.format(hidden=hidden),
        "before/pytest.ini": "[pytest]\npythonpath = .\n",
        "before/calc.py": "def double(x):\n    return x + x + 1\n",
        "before/tests/test_visible.py": "from calc import double\n\n\n"
        "def test_zero():\n    assert double(0) == 0\n",
        "before/secret/test_hidden.py": "from calc import double\n\n\n"
        "def test_three():\n    assert double(3) == 6\n\n\n"
        "def test_is_int():\n    assert isinstance(double(1), int)\n",
        "reference/calc.py": "def double(x):\n    return x + x\n",
    }
    for rel, text in files.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    return task


def new_file(path: str, text: str) -> bytes:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    ).encode()


# -- task.toml -------------------------------------------------------------------------


def test_bundled_tasks_declare_hidden_tests() -> None:
    c = load_task(SEMVER)
    assert c.hidden == ("tests/test_hidden_*.py",)
    assert c.hidden_count == 1
    assert c.is_hidden(HIDDEN) and c.is_protected(HIDDEN)
    assert not c.is_hidden("tests/test_version.py")
    slidingwindow = load_task(REPO / "tasks" / "smoke" / "slidingwindow")
    assert slidingwindow.hidden_count == 1
    assert load_task(REPO / "tasks" / "smoke" / "lrucache").hidden == ()


def test_hidden_files_are_protected_even_outside_test_files(tmp_path: Path) -> None:
    c = load_task(make_task(tmp_path))
    assert c.hidden_count == 1
    assert c.is_protected("secret/test_hidden.py")
    assert c.is_protected("secret/test_new.py")  # a file the patch would add there too
    assert not c.is_protected("calc.py")


def test_hidden_files_are_part_of_the_digest(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    first = load_task(task).digest
    (task / "before" / "secret" / "test_hidden.py").write_text("def test_x():\n    pass\n")
    assert load_task(task).digest != first


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('hidden_files = ["nowhere/*.py"]', "matches no file of before/"),
        ('hidden_files = ["../outside/*.py"]', "not inside the tree"),
        ('hidden_files = ["/secret/**"]', "not inside the tree"),
        ('hidden_files = "secret/**"', "must be a list of strings"),
    ],
)
def test_bad_hidden_files_are_refused(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        load_task(make_task(tmp_path, line))


# -- seeding, restoring ------------------------------------------------------------------


def test_seeding_leaves_hidden_files_out_and_grading_copies_them_in(tmp_path: Path) -> None:
    c = load_task(make_task(tmp_path))
    tree = seed(c, tmp_path / "work")
    seeded = [rel for rel, _ in iter_tree(tree)]
    assert "secret/test_hidden.py" not in seeded
    assert "tests/test_visible.py" in seeded and "calc.py" in seeded
    restored = prepare_tree(c, tree, None)
    assert restored == []  # arriving to grade is not undoing a change
    assert (tree / "secret/test_hidden.py").read_bytes() == (
        c.pristine / "secret/test_hidden.py"
    ).read_bytes()


def test_a_file_planted_at_a_hidden_path_is_overwritten(tmp_path: Path) -> None:
    c = load_task(make_task(tmp_path))
    tree = seed(c, tmp_path / "work")
    forged = "def test_three():\n    assert True\n"
    planted = parse_patch(
        new_file("secret/test_hidden.py", forged) + new_file("secret/test_more.py", forged)
    )
    restored = prepare_tree(c, tree, planted)
    assert restored == ["secret/test_hidden.py", "secret/test_more.py"]
    assert (tree / "secret/test_hidden.py").read_bytes() == (
        c.pristine / "secret/test_hidden.py"
    ).read_bytes()
    assert not (tree / "secret/test_more.py").exists()


def test_a_patch_cannot_modify_a_hidden_file_it_was_never_given(tmp_path: Path) -> None:
    c = load_task(make_task(tmp_path))
    tree = seed(c, tmp_path / "work")
    edit = (
        b"--- a/secret/test_hidden.py\n+++ b/secret/test_hidden.py\n@@ -1 +1 @@\n"
        b"-from calc import double\n+from calc import double as d\n"
    )
    with pytest.raises(PatchError, match="does not exist"):
        apply_patch(parse_patch(edit), tree)


def test_baseline_and_reference_runs_include_hidden_tests(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    config = Config.from_env({}, data_dir=tmp_path / "data", task_dirs=(task,))
    (report,) = check_tasks(config, progress=lambda _: None)
    assert report["ok"], report
    assert "secret/test_hidden.py::test_three" in report["fail_to_pass"]
    assert "secret/test_hidden.py::test_is_int" in report["pass_to_pass"]


# -- what agents are given ---------------------------------------------------------------


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    tasks = tmp_path / "tasks"
    shutil.copytree(SEMVER, tasks / "smoke" / "semver")
    d = Daemon(
        Config.from_env(
            {},
            data_dir=tmp_path / "data",
            energy="estimator",
            calibrate_seconds=0,
            task_dirs=(tasks,),
        )
    )
    yield d
    d.close()


def test_fetched_files_leave_hidden_tests_out(daemon: Daemon) -> None:
    fetched = {rel for rel, _, _ in daemon.task_files("smoke/semver")}
    pristine = {rel for rel, _ in iter_tree(daemon.task("smoke/semver").pristine)}
    assert fetched == pristine - {HIDDEN}
    assert "tests/test_version.py" in fetched


def test_the_hidden_test_modules_are_the_ones_a_run_keeps_sealed(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    (task / "before" / "secret" / "helpers.py").write_text("VALUE = 1\n")
    (task / "before" / "secret" / "other_test.py").write_text("def test_a():\n    pass\n")
    c = load_task(task)
    protected = [rel for rel, _ in iter_tree(c.pristine) if c.is_protected(rel)]
    # Test modules of hidden files only: not the visible tests, nor a hidden helper.
    assert sorted(secret_tests(c, protected)) == ["secret/other_test.py", "secret/test_hidden.py"]
    # Where the expected ids name their files, only the files of expected tests.
    expected = ["secret/test_hidden.py::test_three", "tests/test_visible.py::test_zero"]
    assert secret_tests(c, protected, expected) == ["secret/test_hidden.py"]
    assert len(secret_tests(c, protected, ["tests.test_visible.T.test_zero"])) == 2


def test_a_sealed_files_outline_keeps_where_each_test_starts_and_no_value() -> None:
    source = (
        b"# -*- coding: latin-1 -*-\n"
        b"import pytest\n"
        b"EXPECTED = {'answer': 42}\n"
        b"\n"
        b"@pytest.mark.parametrize('x, want', [(21, 42)])\n"
        b"def test_double(x,\n"
        b"                want=42):\n"
        b"    assert double(x) == want\n"
        b"class TestMore:\n"
        b"    async def test_later(self):\n"
        b'        assert "forty-two" == name()\n'
    )
    outline = _outline(source)
    assert outline.split(b"\n") == [
        b"",
        b"",
        b"",
        b"",
        b"@_",
        b"def test_double():",
        b"",
        b"",
        b"class TestMore:",
        b"    async def test_later():",
        b"",
        b"",
    ]
    assert b"42" not in outline and b"forty" not in outline
