"""Declaring agent CLIs as solvers: the solvers file, secrets, usage reports, patchable trees."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jouled.errors import ConfigError, UsageError
from jouled.pipeline.solve import PROMPT_FILE, keep_patchable
from jouled.solvers import BUILTIN, CommandSolver, Solvers, load_secrets, load_solvers
from jouled.solvers.command import claimed_usage

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "solvers.example.toml"


def write(tmp_path: Path, text: str, name: str = "solvers.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_shipped_examples_load(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text("ANTHROPIC_API_KEY=sk-ant-x\n")
    secrets.chmod(0o600)
    copy = write(tmp_path, EXAMPLE.read_text())
    solvers = load_solvers(copy)
    assert set(solvers.commands) == {"claude", "gemini", "codex"}
    claude = solvers.commands["claude"]
    assert claude.env == ("ANTHROPIC_API_KEY",) and claude.network == "open"
    assert claude.usage["usd"] == "total_cost_usd"
    assert solvers.names[:2] == BUILTIN and solvers.is_hosted("gemini")
    argv = claude.render("Fix it", "/testbed/PROMPT.md", "/testbed", "")
    assert argv[:3] == ["claude", "-p", "Fix it"] and "claude-sonnet-4-5" in argv


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[solvers.x]\nargv = []\n", "argv must be a non-empty list"),
        ('[solvers.x]\nargv = ["a", "{secret}"]\n', "unknown placeholder {secret}"),
        ('[solvers.reference]\nargv = ["a"]\n', "built-in solver"),
        ('[solvers.x]\nargv = ["a"]\nnetwork = "some"\n', "network must be one of"),
        ('[solvers.x]\nargv = ["a"]\nenv = ["NOT-A-NAME"]\n', "env must be a list"),
        ('[solvers.x]\nargv = ["a"]\ntimeout_s = 0\n', "timeout_s must be"),
        ('[solvers.x]\nargv = ["a"]\npaths = ["relative"]\n', "absolute paths"),
        ('[solvers.x]\nargv = ["a"]\nusage = {joules = "x"}\n', "usage maps"),
        ('[solvers.x]\nargv = ["a"]\ncolour = "blue"\n', "unknown keys ['colour']"),
        ("[solvers.x\n", "not valid TOML"),
        ('[solvers."bad name!"]\nargv = ["a"]\n', "solver 'bad name!'"),
    ],
)
def test_a_bad_solvers_file_says_what_is_wrong(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_solvers(write(tmp_path, text))
    assert says in caught.value.diagnostics()


def test_a_secrets_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secrets.env"
    path.write_text("KEY=value\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        load_secrets(path)
    path.chmod(0o600)
    assert load_secrets(path) == {"KEY": "value"}


def test_a_malformed_secrets_line_is_reported_without_its_content(tmp_path: Path) -> None:
    path = tmp_path / "secrets.env"
    path.write_text("# keys\nexport GOOD='a'\nsk-live-do-not-print\n")
    path.chmod(0o600)
    with pytest.raises(ConfigError) as caught:
        load_secrets(path)
    assert ":3: expected KEY=VALUE" in caught.value.message
    assert "sk-live" not in caught.value.diagnostics()


def test_environment_comes_from_the_daemon_then_the_secrets_and_never_echoes() -> None:
    solver = CommandSolver("a", ("a",), env=("ONE", "TWO"))
    solvers = Solvers({"a": solver}, {"TWO": "from-file", "ONE": "file-one"})
    assert solvers.environment(solver, {"ONE": "from-env"}) == {
        "ONE": "from-env",
        "TWO": "from-file",
    }
    missing = CommandSolver("b", ("b",), env=("THREE",))
    with pytest.raises(UsageError) as caught:
        Solvers({"b": missing}, {"TWO": "s3cr3t"}).environment(missing, {})
    assert "THREE" in caught.value.message and "s3cr3t" not in caught.value.diagnostics()


# -- usage reports ------------------------------------------------------------------------

CLAUDE = {
    "result": "done",
    "total_cost_usd": 0.0421,
    "usage": {"input_tokens": 1200, "output_tokens": 340},
}
GEMINI = {
    "response": "ok",
    "stats": {
        "models": {
            "gemini-2.5-pro": {"tokens": {"prompt": 900, "candidates": 30}},
            "gemini-2.5-flash": {"tokens": {"prompt": 100, "candidates": 5}},
        }
    },
}


def test_claimed_usage_reads_the_last_json_object() -> None:
    output = "thinking...\n" + json.dumps({"total_cost_usd": 9}) + "\n" + json.dumps(CLAUDE)
    usage = {
        "usd": "total_cost_usd",
        "tokens_in": "usage.input_tokens",
        "tokens_out": "usage.output_tokens",
    }
    assert claimed_usage(output, usage) == {
        "usd_micros": 42100,
        "tokens_in": 1200,
        "tokens_out": 340,
    }


def test_claimed_usage_sums_over_a_wildcard() -> None:
    usage = {
        "tokens_in": "stats.models.*.tokens.prompt",
        "tokens_out": "stats.models.*.tokens.candidates",
    }
    assert claimed_usage(json.dumps(GEMINI, indent=2), usage) == {
        "tokens_in": 1000,
        "tokens_out": 35,
    }


@pytest.mark.parametrize(
    "output",
    [
        "no json at all",
        '{"total_cost_usd": -1}',
        '{"total_cost_usd": "0.5"}',
        '{"total_cost_usd": 1e300}',
        '{"total_cost_usd": true}',
    ],
)
def test_claimed_usage_never_invents_a_figure(output: str) -> None:
    assert claimed_usage(output, {"usd": "total_cost_usd"}) == {}


# -- what becomes the patch ---------------------------------------------------------------


def test_keep_patchable_restores_tests_and_drops_what_no_patch_carries(tmp_path: Path) -> None:
    base, work = tmp_path / "base", tmp_path / "work"
    for root in (base, work):
        (root / "tests").mkdir(parents=True)
        (root / "pkg.py").write_text("x = 1\n")
        (root / "tests" / "test_a.py").write_text("def test_a():\n    assert 0\n")
    (work / "pkg.py").write_text("x = 2\n")
    (work / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    (work / "tests" / "test_new.py").write_text("")
    (work / PROMPT_FILE).write_text("the prompt")
    (work / "blob.bin").write_bytes(b"\0\1\2")
    os.symlink("pkg.py", work / "link.py")
    dropped: list[str] = []
    keep_patchable(work, base, lambda rel: rel.startswith("tests/"), dropped)
    assert sorted(dropped) == ["blob.bin", "link.py"]
    assert (work / "pkg.py").read_text() == "x = 2\n"
    assert (work / "tests" / "test_a.py").read_text() == (base / "tests" / "test_a.py").read_text()
    assert not (work / "tests" / "test_new.py").exists() and not (work / PROMPT_FILE).exists()
