"""A task as `Client.tasks()` and `task()` return it, and `jb-client tasks --json` prints it.

Kept apart from `jb_client.documents` (and the document machinery under it) so that
listing tasks loads neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class TaskInfo:
    """A task the daemon serves (docs/protocol.md, ListTasks)."""

    task_id: str
    suite: str
    name: str
    kind: str  # "local" or "swebench"
    prompt: str
    digest: str  # the content hash results are graded against
    test_cmd: list[str]
    test_files: list[str]  # the protected paths
    timeout_s: int
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    source: str
    license: str
    hidden_files: int  # how many hidden test files grade it; never their names

    @classmethod
    def of(cls, t: Any) -> TaskInfo:
        """From a `jouled.v1.Task` message."""
        return cls(
            task_id=t.task_id,
            suite=t.suite,
            name=t.name,
            kind=t.kind,
            prompt=t.prompt,
            digest=t.digest,
            test_cmd=list(t.test_cmd),
            test_files=list(t.test_files),
            timeout_s=t.timeout_s,
            fail_to_pass=list(t.fail_to_pass),
            pass_to_pass=list(t.pass_to_pass),
            source=t.source,
            license=t.license,
            hidden_files=t.hidden_files,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object `jb-client tasks --json` prints for the task."""
        return {
            "task_id": self.task_id,
            "suite": self.suite,
            "name": self.name,
            "kind": self.kind,
            "prompt": self.prompt,
            "digest": self.digest,
            "test_cmd": list(self.test_cmd),
            "test_files": list(self.test_files),
            "timeout_s": self.timeout_s,
            "fail_to_pass": list(self.fail_to_pass),
            "pass_to_pass": list(self.pass_to_pass),
            "source": self.source,
            "license": self.license,
            "hidden_files": self.hidden_files,
        }

    # The raw form by key, as `jb_client.documents.Answer` reads it.
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.to_dict()

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)
