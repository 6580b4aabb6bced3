"""A task as the API and `jb-client tasks --json` return it, from its `jouled.v1.Task`."""

from __future__ import annotations

from typing import Any


def task_doc(t: Any) -> dict[str, Any]:
    return {
        "task_id": t.task_id,
        "suite": t.suite,
        "name": t.name,
        "kind": t.kind,
        "prompt": t.prompt,
        "digest": t.digest,
        "test_cmd": list(t.test_cmd),
        "test_files": list(t.test_files),
        "timeout_s": t.timeout_s,
        "fail_to_pass": list(t.fail_to_pass),
        "pass_to_pass": list(t.pass_to_pass),
        "source": t.source,
        "license": t.license,
        "hidden_files": t.hidden_files,
    }
