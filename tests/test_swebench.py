"""The SWE-bench Verified adapter, on a fake instance built here as a real git repository.

Nothing here touches the network, Docker or the dataset: the "repository" is a
small package with a bug, committed in tmp_path; its gold patch and test patch
are `git diff` output, as in the dataset.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from jouled.contracts import swebench, swebench_checkout
from jouled.contracts.contract import Contract
from jouled.contracts.swebench import (
    contract_digest,
    modules_to_run,
    to_contract,
    unsupported_reason,
)
from jouled.contracts.swebench_checkout import read_head
from jouled.contracts.swebench_ids import dataset_id_forms, match_dataset_ids
from jouled.contracts.swebench_records import (
    Prediction,
    SweBenchRecord,
    load_predictions,
    load_records,
)
from jouled.errors import PatchError, TaskError
from jouled.meter.estimator import EstimatorMeter
from jouled.meter.metering import Metering
from jouled.patch import parse_patch
from jouled.pipeline.evaluate import Attempt, Evaluator
from jouled.pipeline.verdicts import Expected

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")

INSTANCE = "acme__calc-1"
REPO = "acme/calc"

OPS = textwrap.dedent(
    """\
    def add(a, b):
        return a - b


    def mul(a, b):
        return a * b
    """
)
TESTS = textwrap.dedent(
    """\
    from calc.ops import mul


    def test_mul():
        assert mul(3, 4) == 12
    """
)
# Fails before and after the fix, and is in neither list: the kind of test many
# real instances' test modules hold (it needs something the environment lacks).
ENV_FAILURE = textwrap.dedent(
    """\


    def test_needs_the_network():
        raise OSError("no network in the sandbox")
    """
)
# Passes in an environment that has a system tool, as some real PASS_TO_PASS tests
# need graphviz or a locale: where the host lacks it, it fails before any patch.
HOST_TOOL = textwrap.dedent(
    """\


    def test_renders_with_the_host_tool():
        import shutil

        assert shutil.which("jb-render-tool"), "jb-render-tool is not installed"
    """
)
HOST_TOOL_ID = "tests/test_ops.py::test_renders_with_the_host_tool"
F2P = ["tests/test_ops.py::test_add", "tests/test_add_more.py::test_add_negative"]
SPACED_TEST = textwrap.dedent(
    """\


    import pytest


    @pytest.mark.parametrize(("a", "b"), [(1, 2)], ids=["small numbers"])
    def test_add_many(a, b):
        assert add(a, b) == 3
    """
)
# The official log parser keeps the first word of "PASSED <node id>".
SPACED_ID_AS_RECORDED = "tests/test_ops.py::test_add_many[small"
P2P = ["tests/test_ops.py::test_mul"]


def git(repo: Path, *args: str) -> str:
    assert GIT is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    config = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    done = subprocess.run(
        [GIT, *config, "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def staged_diff(repo: Path, files: dict[str, str]) -> str:
    """The diff that `files` make to the committed tree, as `git diff` writes it; tree reset."""
    write(repo, files)
    git(repo, "add", "-A")
    diff = git(repo, "diff", "--cached")
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-fdq")
    return diff


def make_instance(
    checkout_root: Path, instance_id: str = INSTANCE, *, variant: str = ""
) -> dict[str, Any]:
    """A checkout at checkout_root/instance_id and the dataset row describing it.

    `variant` adds what real instances have: "env_failure", a test in the graded
    module that fails before and after the fix; "spaced_id", a new test whose
    node id has a space, which the dataset records cut at that space;
    "host_tool", a PASS_TO_PASS test that needs a system tool the host lacks,
    graded by the official pytest rules (the record's own test_cmd and parser).
    """
    repo = checkout_root / instance_id
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    tests = TESTS + {"env_failure": ENV_FAILURE, "host_tool": HOST_TOOL}.get(variant, "")
    p2p = [*P2P, HOST_TOOL_ID] if variant == "host_tool" else P2P
    f2p = [*F2P, SPACED_ID_AS_RECORDED] if variant == "spaced_id" else F2P
    write(
        repo,
        {
            # What a small repository would have: the package importable from the rootdir.
            "pytest.ini": "[pytest]\npythonpath = .\n",
            "calc/__init__.py": "",
            "calc/ops.py": OPS,
            "tests/test_ops.py": tests,
        },
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "calc")
    base = git(repo, "rev-parse", "HEAD").strip()
    gold = staged_diff(repo, {"calc/ops.py": OPS.replace("a - b", "a + b")})
    test_patch = staged_diff(
        repo,
        {
            "tests/test_ops.py": tests.replace("import mul", "import add, mul")
            + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"
            + (SPACED_TEST if variant == "spaced_id" else ""),
            "tests/test_add_more.py": "from calc.ops import add\n\n\n"
            "def test_add_negative():\n    assert add(-2, -3) == -5\n",
        },
    )
    official = {"test_cmd": "pytest -rA", "log_parser": "parse_log_pytest"}
    return (official if variant == "host_tool" else {}) | {
        "repo": REPO,
        "instance_id": instance_id,
        "base_commit": base,
        "patch": gold,
        "test_patch": test_patch,
        "problem_statement": "add() subtracts its arguments\n",
        "hints_text": "",
        "created_at": "2024-01-02T03:04:05Z",
        "version": "0.1",
        # As in the dataset: JSON-encoded strings, not lists.
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p),
        "environment_setup_commit": base,
        "difficulty": "<15 min fix",
    }


@pytest.fixture
def checkout_root(tmp_path: Path) -> Path:
    if GIT is None:
        pytest.skip("git is not installed")
    return tmp_path / "checkouts"


@pytest.fixture
def row(checkout_root: Path) -> dict[str, Any]:
    return make_instance(checkout_root)


@pytest.fixture
def record(row: dict[str, Any]) -> SweBenchRecord:
    return SweBenchRecord.from_dict(row, "test")


# -- loading records -----------------------------------------------------------------

SMALL_PATCH = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
BASE = "0123456789abcdef0123456789abcdef01234567"


def static_row(instance_id: str = "o__r-1", **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "instance_id": instance_id,
        "repo": "o/r",
        "base_commit": BASE,
        "problem_statement": "it breaks",
        "patch": SMALL_PATCH,
        "test_patch": SMALL_PATCH.replace("x.py", "tests/test_x.py"),
        "FAIL_TO_PASS": json.dumps(["tests/test_x.py::test_a"]),
        "PASS_TO_PASS": "[]",
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not ...}


def test_loads_a_json_array_a_single_object_and_jsonl(tmp_path: Path) -> None:
    rows = [static_row("o__r-1"), static_row("o__r-2", FAIL_TO_PASS=["tests/test_x.py::test_a"])]
    array = tmp_path / "verified.json"
    array.write_text(json.dumps(rows, indent=2))
    single = tmp_path / "one.json"
    single.write_text(json.dumps(rows[0], indent=2))
    jsonl = tmp_path / "verified.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")

    from_array = load_records(array)
    assert [r.instance_id for r in from_array] == ["o__r-1", "o__r-2"]
    # A JSON-encoded string and a plain list give the same ids.
    assert from_array[0].FAIL_TO_PASS == from_array[1].FAIL_TO_PASS == ("tests/test_x.py::test_a",)
    assert from_array[0].PASS_TO_PASS == ()
    assert load_records(jsonl) == from_array
    assert load_records(single) == from_array[:1]
    first = from_array[0]
    assert (first.version, first.environment_setup_commit, first.created_at, first.hints_text) == (
        None,
        None,
        None,
        None,
    )


def test_optional_fields_and_extra_columns(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(
        json.dumps(
            static_row(
                version=3.1,
                hints_text="look at x",
                created_at="2023-01-01T00:00:00Z",
                environment_setup_commit=BASE.upper(),
                difficulty="15 min - 1 hour",
                base_commit=BASE.upper(),
            )
        )
    )
    (rec,) = load_records(path)
    assert rec.version == "3.1" and rec.hints_text == "look at x"
    assert rec.created_at == "2023-01-01T00:00:00Z"
    assert rec.base_commit == BASE  # compared against HEAD, which git prints in lower case


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("empty.json", "  \n", ["empty.json", "empty"]),
        ("bad.json", '[{"instance_id": ', ["bad.json:1:", "not valid JSON"]),
        (
            "bad.jsonl",
            json.dumps(static_row("o__r-1")) + "\n\n" + '{"instance_id": "o__r-2",\n',
            ["bad.jsonl:3", "not valid JSON"],
        ),
        ("nums.json", "[1, 2]", ["nums.json: record 0", "must be a JSON object, not a number"]),
        ("arr.json", "[]", ["arr.json", "empty"]),
        (
            "missing.json",
            json.dumps([static_row("o__r-1"), static_row("o__r-2", base_commit=...)]),
            ["missing.json: record 1 (o__r-2)", "missing field base_commit"],
        ),
        (
            "missing.jsonl",
            json.dumps(static_row()) + "\n" + json.dumps(static_row("o__r-2", test_patch=...)),
            ["missing.jsonl:2 (o__r-2)", "missing field test_patch"],
        ),
        (
            "f2p.json",
            json.dumps(static_row(FAIL_TO_PASS='["tests/test_x.py::a"')),
            ["f2p.json (o__r-1)", "FAIL_TO_PASS", "not a JSON-encoded list"],
        ),
        (
            "f2p_obj.json",
            json.dumps(static_row(FAIL_TO_PASS='{"a": 1}')),
            ["FAIL_TO_PASS must be a list of test ids, not an object"],
        ),
        (
            "p2p_item.json",
            json.dumps(static_row(PASS_TO_PASS=["ok::t", 3])),
            ["PASS_TO_PASS[1]", "not a number"],
        ),
        (
            "p2p_null.json",
            json.dumps(static_row(PASS_TO_PASS=None)),
            ["missing field PASS_TO_PASS"],
        ),
        (
            "type.json",
            json.dumps(static_row(problem_statement=["x"])),
            ["field problem_statement must be a string, not an array"],
        ),
        ("blank.json", json.dumps(static_row(patch="  ")), ["field patch is empty"]),
        ("sha.json", json.dumps(static_row(base_commit="abc123")), ["base_commit 'abc123'"]),
        (
            "env.json",
            json.dumps(static_row(environment_setup_commit="main")),
            ["environment_setup_commit 'main'"],
        ),
        ("id.json", json.dumps(static_row("../etc")), ["instance_id '../etc'"]),
        ("repo.json", json.dumps(static_row(repo="https://x/y")), ["repo 'https://x/y'"]),
        ("ver.json", json.dumps(static_row(version=[3])), ["field version must be a string"]),
        (
            "dup.jsonl",
            json.dumps(static_row()) + "\n" + json.dumps(static_row()),
            ["dup.jsonl:2", "o__r-1 appears twice", "first at", "dup.jsonl:1"],
        ),
    ],
)
def test_malformed_records_are_refused_with_the_place_and_field(
    tmp_path: Path, name: str, content: str, expected: list[str]
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(TaskError) as caught:
        load_records(path)
    for part in expected:
        assert part in caught.value.message


def test_an_absent_or_undecodable_dataset_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="does not exist"):
        load_records(tmp_path / "nope.jsonl")
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"x": "\xe9"}')
    with pytest.raises(TaskError, match="not UTF-8"):
        load_records(latin)


# -- predictions -----------------------------------------------------------------------


def prediction(instance_id: str, patch: str | None = SMALL_PATCH) -> dict[str, Any]:
    return {"instance_id": instance_id, "model_name_or_path": "m", "model_patch": patch}


def test_loads_predictions_as_a_list_jsonl_or_keyed_object(tmp_path: Path) -> None:
    preds = [prediction("o__r-1"), prediction("o__r-2", None)]
    as_list = tmp_path / "preds.json"
    as_list.write_text(json.dumps(preds))
    as_jsonl = tmp_path / "preds.jsonl"
    as_jsonl.write_text("".join(json.dumps(p) + "\n" for p in preds))
    keyed = tmp_path / "keyed.json"
    # The keyed form may leave instance_id out of its values.
    keyed.write_text(
        json.dumps(
            {
                "o__r-1": preds[0],
                "o__r-2": {k: v for k, v in preds[1].items() if k != "instance_id"},
            }
        )
    )
    expected = {
        "o__r-1": Prediction("o__r-1", "m", SMALL_PATCH),
        "o__r-2": Prediction("o__r-2", "m", None),
    }
    assert load_predictions(as_list) == expected
    assert load_predictions(as_jsonl) == expected
    assert load_predictions(keyed) == expected
    single = tmp_path / "single.json"
    single.write_text(json.dumps(preds[0]))
    assert load_predictions(single) == {"o__r-1": expected["o__r-1"]}


def test_a_prediction_parses_to_a_patch_or_none() -> None:
    assert Prediction("a", "m", None).to_patch() is None
    assert Prediction("a", "m", "  \n").to_patch() is None
    patch = Prediction("a", "m", SMALL_PATCH).to_patch()
    assert patch is not None and patch.paths == ("x.py",)
    with pytest.raises(PatchError):
        Prediction("a", "m", "not a diff\n").to_patch()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            json.dumps([prediction("o__r-1"), prediction("o__r-1")]),
            ["record 1", "o__r-1 is predicted twice", "record 0"],
        ),
        (json.dumps({"o__r-1": prediction("o__r-2")}), ["key 'o__r-1'", "'o__r-2'"]),
        (
            json.dumps([{"instance_id": "o__r-1", "model_name_or_path": "m"}]),
            ["record 0", "missing field model_patch"],
        ),
        (json.dumps([prediction("o__r-1", 5)]), ["model_patch must be a string or null"]),  # type: ignore[arg-type]
        (
            json.dumps([{**prediction("o__r-1"), "model_name_or_path": None}]),
            ["model_name_or_path must be a string"],
        ),
        (json.dumps(["x"]), ["record 0", "must be a JSON object, not a string"]),
        (json.dumps([prediction("a/b")]), ["instance_id 'a/b'"]),
    ],
)
def test_malformed_predictions_are_refused(
    tmp_path: Path, content: str, expected: list[str]
) -> None:
    path = tmp_path / "preds.json"
    path.write_text(content)
    with pytest.raises(TaskError) as caught:
        load_predictions(path)
    for part in expected:
        assert part in caught.value.message


def test_malformed_predictions_can_be_collected_and_the_rest_loaded(tmp_path: Path) -> None:
    path = tmp_path / "preds.jsonl"
    lines = [
        json.dumps(prediction("o__r-1")),
        "{not json",
        json.dumps(prediction("o__r-2", 5)),  # type: ignore[arg-type]
        json.dumps(prediction("o__r-1")),
        json.dumps(prediction("o__r-3", None)),
    ]
    path.write_text("\n".join(lines) + "\n")
    malformed: list[TaskError] = []
    loaded = load_predictions(path, malformed)
    assert sorted(loaded) == ["o__r-1", "o__r-3"]
    messages = [m.message for m in malformed]
    assert len(messages) == 3
    assert messages[0].startswith(f"{path}:2: not valid JSON")
    assert "model_patch must be a string or null" in messages[1]
    assert "o__r-1 is predicted twice" in messages[2]
    with pytest.raises(TaskError):
        load_predictions(path)  # without a list to collect into, the first one refuses


# -- contracts -------------------------------------------------------------------------


def test_a_record_compiles_to_a_contract(record: SweBenchRecord, checkout_root: Path) -> None:
    c = to_contract(record, checkout_root)
    assert c.task_id == f"swebench-verified/{INSTANCE}"
    assert (c.suite, c.name, c.kind) == ("swebench-verified", INSTANCE, "swebench")
    assert c.pristine == checkout_root / INSTANCE
    assert c.prompt == record.problem_statement
    assert c.test_files == ("tests/test_add_more.py", "tests/test_ops.py")
    assert c.test_cmd == ("python", "-m", "pytest", "tests/test_add_more.py", "tests/test_ops.py")
    assert c.fail_to_pass == tuple(F2P) and c.pass_to_pass == tuple(P2P)
    assert c.reference_patch == record.patch.encode()
    assert c.test_patch == record.test_patch.encode()
    assert c.timeout_s == 1800
    assert c.source == f"SWE-bench Verified {INSTANCE}"
    assert c.license == "MIT (dataset); repository license applies to code"
    assert c.is_protected("tests/test_ops.py") and c.is_protected("tests/test_add_more.py")
    assert not c.is_protected("calc/ops.py")
    other = to_contract(record, checkout_root, suite="verified-mini", timeout_s=60)
    assert other.task_id == f"verified-mini/{INSTANCE}" and other.timeout_s == 60
    assert other.digest == c.digest  # the digest is the record's, not where it is filed


def test_the_digest_follows_its_documented_framing(record: SweBenchRecord) -> None:
    h = hashlib.sha256(b"jouled-swebench-v2\n")
    for name, value in [
        ("instance_id", record.instance_id.encode()),
        ("base_commit", record.base_commit.encode()),
        ("test_patch", record.test_patch.encode()),
        ("patch", record.patch.encode()),
        ("FAIL_TO_PASS", json.dumps(F2P, separators=(",", ":")).encode()),
        ("PASS_TO_PASS", json.dumps(P2P, separators=(",", ":")).encode()),
        ("tree", b"ab" * 32),
        ("test_cmd", b'["python","-m","pytest"]'),
        ("rules", b"strict"),
        ("runtime", b"daemon"),
    ]:
        h.update(f"{len(name)}:{name}{len(value)}:".encode() + value)
    digest = contract_digest(
        record,
        tree="ab" * 32,
        test_cmd=("python", "-m", "pytest"),
        rules="strict",
        runtime="daemon",
    )
    assert digest == h.hexdigest()


@pytest.mark.parametrize(
    "change",
    [
        {"instance_id": "acme__calc-2"},
        {"base_commit": BASE},
        {"test_patch": SMALL_PATCH},
        {"patch": SMALL_PATCH},
        {"FAIL_TO_PASS": (*F2P, "tests/test_ops.py::test_x")},
        {"PASS_TO_PASS": ()},
        # Moving an id across the boundary between the two lists changes the framing.
        {"FAIL_TO_PASS": tuple(F2P[:1]), "PASS_TO_PASS": (F2P[1], *P2P)},
    ],
)
def test_the_digest_covers_what_is_graded(record: SweBenchRecord, change: dict[str, Any]) -> None:
    assert contract_digest(dataclasses.replace(record, **change)) != contract_digest(record)


@pytest.mark.parametrize(
    "how", [{"tree": "1" * 64}, {"test_cmd": ("pytest",)}, {"rules": "x"}, {"runtime": "env"}]
)
def test_the_digest_covers_how_it_is_graded(record: SweBenchRecord, how: dict[str, Any]) -> None:
    assert contract_digest(record, **how) != contract_digest(record)


def test_the_digest_ignores_provenance(record: SweBenchRecord) -> None:
    changed = dataclasses.replace(
        record, problem_statement="other words", hints_text="a hint", version="9", created_at=None
    )
    assert contract_digest(changed) == contract_digest(record)


def test_a_dirty_checkout_is_digested_as_it_is(record: SweBenchRecord, checkout_root: Path) -> None:
    """The tree every attempt is seeded from is part of the digest, not only its commit."""
    clean = to_contract(record, checkout_root)
    tree = checkout_root / INSTANCE
    (tree / "calc" / "ops.py").write_text(OPS.replace("a - b", "a + b"))  # fixed, uncommitted
    dirty = to_contract(record, checkout_root)
    assert dirty.digest != clean.digest
    (tree / "calc" / "ops.py").write_text(OPS)
    assert to_contract(record, checkout_root).digest == clean.digest
    (tree / "calc" / "helper.py").write_text("")  # an untracked file counts too
    assert to_contract(record, checkout_root).digest != clean.digest
    (tree / "calc" / "helper.py").unlink()
    (tree / "calc" / "__pycache__").mkdir(exist_ok=True)  # caches never count
    (tree / "calc" / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"x")
    assert to_contract(record, checkout_root).digest == clean.digest


def test_a_missing_checkout_says_which_directory_and_how_to_make_it(
    record: SweBenchRecord, tmp_path: Path
) -> None:
    root = tmp_path / "elsewhere"
    expected_dir = root / INSTANCE
    with pytest.raises(TaskError) as caught:
        to_contract(record, root)
    message = caught.value.message
    assert str(expected_dir) in message and "does not exist" in message
    assert (
        f"git clone https://github.com/{REPO} {expected_dir} && "
        f"git -C {expected_dir} checkout {record.base_commit}"
    ) in message
    root.mkdir()
    expected_dir.write_text("not a checkout")
    with pytest.raises(TaskError, match="is not a directory"):
        to_contract(record, root)


def checkout_with_second_commit(repo: Path) -> str:
    """Commit something on top of the base; returns the new commit."""
    write(repo, {"README": "later\n"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "later")
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.mark.parametrize("layout", ["detached", "branch", "packed", "worktree"])
def test_head_is_checked_against_base_commit_without_running_git(
    record: SweBenchRecord, checkout_root: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = checkout_root / INSTANCE
    base = record.base_commit
    later = checkout_with_second_commit(repo)
    tree = repo

    def check_out(commit: str) -> None:
        if layout == "detached":
            git(repo, "checkout", "-q", "--detach", commit)
        else:
            git(tree, "checkout", "-q", "-B", "work", commit)
            if layout == "packed":
                git(tree, "pack-refs", "--all", "--prune")

    if layout == "worktree":
        # The checkout is a linked worktree: `.git` is a file, refs live in the main repository.
        main = checkout_root.parent / "main-clone"
        repo.rename(main)
        git(main, "worktree", "add", "-q", "-b", "work", str(repo), base)
        tree = repo
        assert (tree / ".git").is_file()
    else:
        check_out(base)
    if layout == "packed":
        assert not (repo / ".git" / "refs" / "heads" / "work").exists()

    def no_git(*args: object, **kwargs: object) -> None:
        raise AssertionError("git was run")

    monkeypatch.setattr(swebench_checkout.subprocess, "run", no_git)
    assert read_head(tree) == base
    assert to_contract(record, checkout_root).pristine == tree
    monkeypatch.undo()

    check_out(later)
    with pytest.raises(TaskError) as caught:
        to_contract(record, checkout_root)
    assert f"checked out at {later}, not at base_commit {base}" in caught.value.message
    assert caught.value.hint == f"git -C {tree} checkout {base}"


def test_head_falls_back_to_git_when_the_files_are_not_conclusive(
    record: SweBenchRecord, checkout_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(swebench_checkout, "_head_from_files", lambda tree: None)
    assert read_head(checkout_root / INSTANCE) == record.base_commit
    # An unborn branch: nothing names a commit, and git says so.
    monkeypatch.undo()
    git(checkout_root / INSTANCE, "symbolic-ref", "HEAD", "refs/heads/unborn")
    with pytest.raises(TaskError, match="cannot tell which commit"):
        read_head(checkout_root / INSTANCE)


def test_a_tree_without_git_metadata_is_taken_as_prepared(
    record: SweBenchRecord, checkout_root: Path, tmp_path: Path
) -> None:
    exported = tmp_path / "exported"
    shutil.copytree(
        checkout_root / INSTANCE, exported / INSTANCE, ignore=shutil.ignore_patterns(".git")
    )
    assert read_head(exported / INSTANCE) is None
    assert to_contract(record, exported).pristine == exported / INSTANCE


def test_instances_graded_by_other_runners_are_refused(
    record: SweBenchRecord, checkout_root: Path
) -> None:
    """Without an official specification, only pytest node ids can be graded."""
    django = dataclasses.replace(
        record, FAIL_TO_PASS=("test_add (calc.tests.OpsTests)",), PASS_TO_PASS=()
    )
    reason = unsupported_reason(django)
    assert reason is not None and "not a pytest node id" in reason
    with pytest.raises(swebench.Unsupported) as caught:
        to_contract(django, checkout_root)
    assert caught.value.code == swebench.UNSUPPORTED_RUNNER
    sympy = dataclasses.replace(record, PASS_TO_PASS=("test_add",))
    assert unsupported_reason(sympy) is not None
    assert unsupported_reason(record) is None


def test_a_runner_other_than_pytest_needs_an_environment(
    record: SweBenchRecord, checkout_root: Path, tmp_path: Path
) -> None:
    """Django's runtests.py runs only in an environment with Django installed at /testbed."""
    django = dataclasses.replace(
        record,
        repo="django/django",
        version="5.0",
        FAIL_TO_PASS=("test_add (calc.tests.OpsTests.test_add)",),
    )
    for envs in (None, tmp_path / "envs"):
        with pytest.raises(swebench.Unsupported) as caught:
            to_contract(django, checkout_root, environments=envs)
        assert caught.value.code == swebench.NO_ENVIRONMENT
        assert "runtests.py" in caught.value.message
        assert "django__django__5.0" in caught.value.message
        assert "jouled swebench prepare" in caught.value.hint


def test_records_that_cannot_be_graded_here_are_refused(
    record: SweBenchRecord, checkout_root: Path
) -> None:
    with pytest.raises(TaskError, match="FAIL_TO_PASS is empty"):
        to_contract(dataclasses.replace(record, FAIL_TO_PASS=()), checkout_root)
    binary = (
        "diff --git a/tests/data.bin b/tests/data.bin\nnew file mode 100644\n"
        "index 0000000..1111111\nBinary files /dev/null and b/tests/data.bin differ\n"
    )
    with pytest.raises(TaskError) as caught:
        to_contract(dataclasses.replace(record, test_patch=binary), checkout_root)
    assert "test_patch cannot be applied by jouled" in caught.value.message
    assert "binary" in caught.value.message
    data_only = SMALL_PATCH.replace("x.py", "tests/data.txt")
    with pytest.raises(swebench.Unsupported, match="touches no Python test module"):
        to_contract(dataclasses.replace(record, test_patch=data_only), checkout_root)
    with pytest.raises(TaskError, match="suite"):
        to_contract(record, checkout_root, suite="a/b")


def test_only_test_modules_left_in_the_tree_are_run() -> None:
    def new(path: str) -> str:
        return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x = 1\n"

    gone = "--- a/tests/test_old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n"
    raw = "".join(
        new(p)
        for p in ("tests/conftest.py", "tests/__init__.py", "tests/data.json", "tests/test_b.py")
    )
    patch = parse_patch((raw + gone + new("tests/test_a.py")).encode())
    assert modules_to_run(patch) == ("tests/test_a.py", "tests/test_b.py")
    assert "tests/test_old.py" in patch.paths and "tests/conftest.py" in patch.paths


# -- dataset spellings of test ids --------------------------------------------------------


def test_dataset_id_forms() -> None:
    assert dataset_id_forms("t.py::test_x") == ("t.py::test_x",)
    assert dataset_id_forms("t.py::test_x[a b]") == ("t.py::test_x[a b]", "t.py::test_x[a")
    assert "t.py::f[/y.txt]" in dataset_id_forms("t.py::f[/tmp/x/y.txt]")
    assert "t.py::f[1-x]" in dataset_id_forms("t.py::f[MouseButton.LEFT-x]")


def test_expected_ids_in_dataset_spelling_find_their_tests() -> None:
    outcomes = {
        "t.py::f[a b]": "passed",
        "t.py::g[a b]": "passed",
        "t.py::g[a c]": "failed",
        "t.py::h[/tmp/run/data.txt]": "passed",
        "t.py::k": "passed",
    }
    expected = ["t.py::f[a", "t.py::g[a", "t.py::h[/data.txt]", "t.py::k", "t.py::gone"]
    matched = match_dataset_ids(outcomes, expected)
    assert matched["t.py::f[a"] == "passed"
    assert matched["t.py::g[a"] == "failed"  # two tests collapse onto one id: the worse counts
    assert matched["t.py::h[/data.txt]"] == "passed"
    assert "t.py::gone" not in matched
    assert {k: matched[k] for k in outcomes} == outcomes
    # An id that ran under its own name is never overridden by another's spelling.
    assert match_dataset_ids({"t.py::f[a": "failed", "t.py::f[a b]": "passed"}, ["t.py::f[a"]) == {
        "t.py::f[a": "failed",
        "t.py::f[a b]": "passed",
    }


# -- grading through the pipeline ---------------------------------------------------------


class MemoryBaselines:
    """A BaselineStore that keeps what it is told in a list."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def load_baseline(self, contract: Contract) -> Expected | None:
        return None

    def record_baseline(self, contract: Contract, body: dict[str, Any]) -> int:
        self.bodies.append(body)
        return len(self.bodies) - 1


def evaluator(tmp_path: Path) -> tuple[Evaluator, MemoryBaselines]:
    store = MemoryBaselines()
    metering = Metering(EstimatorMeter(), None, "exclusive")
    return Evaluator(metering, store, tmp_path / "work"), store


def test_the_gold_patch_resolves(
    record: SweBenchRecord, checkout_root: Path, tmp_path: Path
) -> None:
    contract = to_contract(record, checkout_root, timeout_s=120)
    ev, store = evaluator(tmp_path)
    body = ev.evaluate(Attempt(contract, parse_patch(record.patch.encode()), "gold"))
    # The baseline ran with the test patch applied: its new tests exist and fail.
    assert len(store.bodies) == 1
    assert store.bodies[0]["valid"] is True, store.bodies[0]
    assert body["status"] == "resolved", body
    assert body["tests"] == {"expected": 3, "passed": 3, "failed": 0, "missing": 0}
    # The daemon-hosted reference solver applies the same gold patch.
    assert ev.evaluate(Attempt(contract, None, "reference"))["status"] == "resolved"
    assert len(store.bodies) == 1  # the baseline is run once per digest
    assert git(checkout_root / INSTANCE, "status", "--porcelain") == ""


def test_no_patch_is_unresolved(
    record: SweBenchRecord, checkout_root: Path, tmp_path: Path
) -> None:
    contract = to_contract(record, checkout_root, timeout_s=120)
    ev, _ = evaluator(tmp_path)
    body = ev.evaluate(Attempt(contract, None, "noop"))
    assert body["status"] == "unresolved", body
    assert sorted(body["tests_failed"]) == sorted(F2P)
    assert body["tests"]["passed"] == 1


def test_a_prediction_that_edits_the_tests_does_not_resolve(
    record: SweBenchRecord, checkout_root: Path, tmp_path: Path
) -> None:
    repo = checkout_root / INSTANCE
    cheat = staged_diff(
        repo,
        {
            "tests/test_ops.py": "def test_mul():\n    pass\n\n\ndef test_add():\n    pass\n",
            "tests/test_add_more.py": "def test_add_negative():\n    pass\n",
            "conftest.py": "import pytest\n\n\n@pytest.fixture(autouse=True)\ndef fake():\n"
            "    pass\n",
        },
    )
    prediction = Prediction(INSTANCE, "cheater", cheat)
    patch = prediction.to_patch()
    assert patch is not None
    contract = to_contract(record, checkout_root, timeout_s=120)
    ev, _ = evaluator(tmp_path)
    attempt = Attempt(contract, patch, "cheater")
    with ev.prepared(attempt) as tree:  # it applies cleanly: it is graded, not rejected
        body = ev.evaluate(attempt, tree=tree)
    assert body["status"] == "unresolved", body
    assert body["restored"] == ["conftest.py", "tests/test_add_more.py", "tests/test_ops.py"]
    assert sorted(body["tests_failed"]) == sorted(F2P)


@pytest.mark.parametrize("variant", ["env_failure", "spaced_id"])
def test_gold_resolves_where_the_official_harness_resolves_it(
    checkout_root: Path, tmp_path: Path, variant: str
) -> None:
    """Only the listed ids decide, spelled as the dataset spells them.

    env_failure needs the pipeline to stop requiring exit status 0 for SWE-bench
    contracts; spaced_id needs it to match observed ids through match_dataset_ids.
    """
    rec = SweBenchRecord.from_dict(make_instance(checkout_root, variant=variant), "test")
    contract = to_contract(rec, checkout_root, timeout_s=120)
    ev, store = evaluator(tmp_path)
    gold = ev.evaluate(Attempt(contract, parse_patch(rec.patch.encode()), "gold"))
    assert store.bodies[0]["valid"] is True, store.bodies[0]
    assert gold["status"] == "resolved", gold
    assert ev.evaluate(Attempt(contract, None, "noop"))["status"] == "unresolved"


def test_checkout_digests_are_remembered_until_a_file_changes(
    record: SweBenchRecord, checkout_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = checkout_root / INSTANCE
    store = tmp_path / "trees.json"
    trees = swebench.TreeDigests(store)
    hashed: list[Path] = []
    real = swebench.tree_digest

    def counted(t: Path) -> str:
        hashed.append(t)
        return real(t)

    monkeypatch.setattr(swebench, "tree_digest", counted)
    first = to_contract(record, checkout_root, trees=trees).digest
    assert to_contract(record, checkout_root, trees=trees).digest == first
    assert to_contract(record, checkout_root, trees=swebench.TreeDigests(store)).digest == first
    assert len(hashed) == 1  # once: then by the files' metadata, across a restart too
    ops = tree / "calc" / "ops.py"
    before = ops.stat()
    ops.write_text(OPS.replace("a - b", "a + b"))
    os.utime(ops, ns=(before.st_atime_ns, before.st_mtime_ns))  # its mtime put back
    changed = to_contract(record, checkout_root, trees=trees).digest
    assert changed != first and len(hashed) == 2
    assert changed == to_contract(record, checkout_root).digest  # what a fresh hash says


def test_the_official_command_carries_the_environment_its_specification_sets() -> None:
    from jouled.contracts import swebench_harness as harness

    sympy = harness.spec_for("sympy/sympy", "1.12")
    assert sympy is not None and sympy.parser == "sympy"
    patch = "diff --git a/sympy/core/tests/test_basic.py b/sympy/core/tests/test_basic.py\n"
    argv, env = harness.test_command(sympy, patch)
    assert argv == ("bin/test", "-C", "--verbose", "sympy/core/tests/test_basic.py")
    assert env == {"PYTHONWARNINGS": "ignore::UserWarning,ignore::SyntaxWarning"}
    django = harness.spec_for("django/django", "3.0")
    assert django is not None
    argv, env = harness.test_command(django, "diff --git a/tests/a/tests.py b/tests/a/tests.py\n")
    assert argv[0] == "./tests/runtests.py" and argv[-1] == "a.tests"
    assert env["LANG"] == "en_US.UTF-8" and env["LC_ALL"] == "en_US.UTF-8"
    assert harness.spec_for("django/django", "0.1") is None
    assert harness.spec_for("acme/calc", "1.0") is None


def test_a_pytest_instance_falls_back_to_the_daemons_interpreter_only_without_environments(
    record: SweBenchRecord, checkout_root: Path, tmp_path: Path
) -> None:
    """With --swebench-envs configured, an instance without its environment is not graded
    under an interpreter it was never prepared for; without it, pytest ones run as before."""
    flask = dataclasses.replace(record, repo="pallets/flask", version="2.3")
    plain = to_contract(flask, checkout_root)
    assert plain.runtime is None and plain.test_cmd[:2] == ("pytest", "-rA")
    assert plain.grading.verdict is not None and not plain.grading.plain
    with pytest.raises(swebench.Unsupported) as caught:
        to_contract(flask, checkout_root, environments=tmp_path / "envs")
    assert caught.value.code == swebench.NO_ENVIRONMENT
    assert "pallets__flask__2.3" in caught.value.message
    # pytest's own suite never runs in-process: its runner is the code under test.
    pytest_dev = dataclasses.replace(record, repo="pytest-dev/pytest", version="8.0")
    with pytest.raises(swebench.Unsupported):
        to_contract(pytest_dev, checkout_root)


def test_a_record_carrying_its_own_command_and_parser_is_run_and_read_by_them(
    record: SweBenchRecord, checkout_root: Path
) -> None:
    own = dataclasses.replace(record, test_cmd="pytest -rA -x", log_parser="parse_log_pytest")
    contract = to_contract(own, checkout_root)
    assert contract.test_cmd == (
        "pytest",
        "-rA",
        "-x",
        "tests/test_add_more.py",
        "tests/test_ops.py",
    )
    assert contract.grading.verdict is not None
    # A command without a parser (or a parser jouled lacks) is no specification at all.
    halves: tuple[dict[str, Any], ...] = (
        {"test_cmd": "pytest -rA"},
        {"log_parser": "parse_log_jest"},
    )
    for half in halves:
        strict = to_contract(dataclasses.replace(record, **half), checkout_root)
        assert strict.grading.verdict is None
        assert strict.test_cmd[:3] == ("python", "-m", "pytest")


def test_django_and_sympy_commands_go_through_the_daemons_runners(
    record: SweBenchRecord,
) -> None:
    from jouled.contracts import swebench_harness as harness
    from jouled.contracts.swebench import _official_policy

    policies = {}
    for repo, version in (
        ("django/django", "3.0"),
        ("sympy/sympy", "1.12"),
        ("pytest-dev/pytest", "8.0"),
    ):
        spec = harness.spec_for(repo, version)
        assert spec is not None
        policy = _official_policy(spec, dataclasses.replace(record, repo=repo, version=version))
        assert policy.verdict is not None
        policies[repo] = policy
    assert policies["django/django"].plain and policies["django/django"].runner == "unittest"
    assert policies["sympy/sympy"].plain and policies["sympy/sympy"].runner == "sympy"
    # pytest's own suite goes through the daemon's pytest runner, its source the framework's.
    own = policies["pytest-dev/pytest"]
    assert not own.plain and own.runner == "" and "src/_pytest/" in own.framework
