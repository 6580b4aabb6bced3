import shutil
from pathlib import Path

import pytest

from jouled.contracts import TaskRegistry
from jouled.contracts.contract import glob_match
from jouled.contracts.task import discover, load_task
from jouled.errors import TaskError, UnknownTaskError, UsageError

REPO = Path(__file__).resolve().parents[1]
LRU = REPO / "tasks" / "smoke" / "lrucache"


@pytest.mark.parametrize(
    ("path", "pattern", "expected"),
    [
        ("tests/test_a.py", "tests/**", True),
        ("tests/sub/test_b.py", "tests/**", True),
        ("tests", "tests/**", False),
        ("src/tests/x.py", "tests/**", False),
        ("pkg/tests/test_c.py", "**/tests/**", True),
        ("tests/test_a.py", "tests", True),
        ("test_a.py", "test_*.py", True),
        ("sub/test_a.py", "test_*.py", False),
    ],
)
def test_glob_match(path: str, pattern: str, expected: bool) -> None:
    assert glob_match(path, pattern) is expected


def test_loads_a_task_with_a_reference_patch() -> None:
    c = load_task(LRU)
    assert c.task_id == "smoke/lrucache"
    assert c.test_cmd == ("python", "-m", "pytest", "tests")
    assert c.reference_patch is not None and b"lrucache/cache.py" in c.reference_patch
    assert c.is_protected("tests/test_cache.py")
    assert c.is_protected("lrucache/conftest.py")
    assert c.is_protected("pytest.ini") and c.is_protected("pyproject.toml")
    assert not c.is_protected("lrucache/cache.py")


def test_digest_changes_with_any_byte_of_the_task(tmp_path: Path) -> None:
    copy = tmp_path / "smoke" / "lrucache"
    shutil.copytree(LRU, copy)
    first = load_task(copy).digest
    assert load_task(copy).digest == first
    (copy / "reference" / "lrucache" / "cache.py").write_text("# changed\n")
    assert load_task(copy).digest != first


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('name = "t"\nprompt = "p"\n', "missing test_cmd"),
        ('name = "other"\nprompt = "p"\ntest_cmd = ["x"]\n', "differs from its directory"),
        ('name = "t"\nprompt = "p"\ntest_cmd = []\n', "non-empty argv"),
        ('name = "t"\nprompt = "p"\ntest_cmd = ["x"]\ntimeout_s = 0\n', "timeout_s"),
        ('name = "t"\nprompt = "p"\ntest_cmd = ["x"]\nfail_to_pass = ["a"]\n', "or neither"),
        ("name = ", "not valid TOML"),
    ],
)
def test_malformed_tasks_are_refused(tmp_path: Path, toml: str, message: str) -> None:
    task = tmp_path / "s" / "t"
    (task / "before").mkdir(parents=True)
    (task / "task.toml").write_text(toml)
    with pytest.raises(TaskError, match=message):
        load_task(task)


def test_registry_lists_suites_and_rejects_unknown_ids() -> None:
    registry = TaskRegistry.from_dirs([REPO / "tasks"])
    assert "smoke" in registry.suites()
    assert len(registry.list("smoke")) >= 6
    with pytest.raises(UnknownTaskError, match="unknown task 'smoke/nope'"):
        registry.get("smoke/nope")
    with pytest.raises(UsageError, match="SUITE/NAME"):
        registry.get("lrucache")


def test_discover_accepts_a_suite_or_a_single_task() -> None:
    assert [c.name for c in discover(LRU)] == ["lrucache"]
    assert len(discover(LRU.parent)) == len(discover(REPO / "tasks" / "smoke"))
