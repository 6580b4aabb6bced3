"""Generate jouled/contracts/swebench_specs.json from the official swebench package.

    make swebench-fixtures && .venv/bin/python tools/swebench_specs.py

The table holds, for every Python repository of SWE-bench, the per-version
specification the official harness builds its environments from and runs its
tests with (interpreter version, install steps, test command), the log parser
each repository is read with, where its requirement files are and which
extensions never name a test module. `tests/test_swebench_official.py` checks
the file against the package, so a stale table fails the suite.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import swebench_oracle

OUT = Path(__file__).resolve().parent.parent / "jouled" / "contracts" / "swebench_specs.json"
KEYS = ("python", "packages", "pip_packages", "pre_install", "install", "eval_commands", "test_cmd")
# Not SWE-bench repositories proper: a sequence-to-sequence stand-in with no tests of its own.
LEFT_OUT = ("swe-bench/humaneval",)


def table() -> dict[str, Any]:
    oracle = swebench_oracle.load()
    py = oracle.python_constants
    parsers = oracle.log_parsers.MAP_REPO_TO_PARSER
    repos: dict[str, Any] = {}
    for repo, versions in sorted(py.MAP_REPO_VERSION_TO_SPECS_PY.items()):
        if repo in LEFT_OUT:
            continue
        parser = parsers.get(repo)
        repos[repo] = {
            "parser": parser.__name__.removeprefix("parse_log_") if parser else None,
            "requirements": list(py.MAP_REPO_TO_REQS_PATHS.get(repo, [])),
            "versions": {
                version: {k: spec[k] for k in KEYS if k in spec}
                for version, spec in sorted(versions.items())
            },
        }
    return {
        "source": f"swebench {swebench_oracle.ORACLE_VERSION}",
        "non_test_exts": list(oracle.constants.NON_TEST_EXTS),
        "repos": repos,
    }


def render() -> str:
    return json.dumps(table(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")
