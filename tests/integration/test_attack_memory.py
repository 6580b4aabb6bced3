"""Forgers that write the test process's memory: no report touched, no attribute set.

Each route keeps the bug, appends a payload to the library the tests import, and, when
a test first builds one of the library's classes, rewrites the bytecode of the visible
test functions in place so that they return at once (`attacks.FORGE_MEMORY`); the test
function itself then reports a clean return. The doors to the memory differ: ctypes
(imported, or loaded by a thread the patch starts on the import system itself, with none
of its frames on the loading stack), bytecode of the patch's own making (CPython does not
verify it: a constant read past the constants is any object), the process's own
`/proc/self/mem` under another name, and another process of the run. The payload proves
it ran (`ran`) and says whether its write took (`forge`: `OK`, or `denied:<why>`), and
the denial must be the defence's, not the payload failing on its own. Unshut, each door
was signed `resolved`. Now every write must be refused and the run come out `tampered`
or `unresolved`, on a task without hidden tests and on one with them; the real fixes
still resolve beside them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest

from . import attacks as A
from .test_attack_forgery import Case, Run, serve_cases

TASKS = {"visible": A.LRUCACHE, "hidden": A.SEMVER}
DOORS = {
    "ctypes": A.POKE_CTYPES,
    "ctypes-thread": A.POKE_CTYPES_THREAD,
    "bytecode": A.POKE_BYTECODE,
    "proc-self-mem": A.POKE_PROC_SELF,
    "child-process": A.POKE_CHILD,
}
# How each door is shut: the monitor's refusal, the withheld module's absence, the kernel.
DENIED = {
    "ctypes": "denied:Refused",
    "ctypes-thread": "denied:ImportError",
    "bytecode": "denied:Refused",
    "proc-self-mem": "denied:PermissionError",
    "child-process": "denied:PermissionError",
}
CASES: dict[str, Case] = {
    f"{door}-{kind}": Case(poke + A.FORGE_MEMORY, task)
    for door, poke in DOORS.items()
    for kind, task in TASKS.items()
}


@pytest.fixture(scope="module")
def forgeries(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Run]:
    with serve_cases(tmp_path_factory, request, "attack-memory", CASES, TASKS) as run:
        yield run


@pytest.mark.parametrize("name", list(CASES))
def test_a_write_to_the_test_process_memory_is_not_resolved(forgeries: Run, name: str) -> None:
    out = forgeries.futures[name].result(timeout=600)
    assert out.receipt is not None, out.why()
    found = out.found
    assert "ran" in found, f"the payload did not run (no marker)\n{out.why()}"
    assert "crash" not in found, f"the payload crashed: {found['crash']}\n{out.why()}"
    forge = found.get("forge", "")
    # The write was tried and refused: by the monitor (ctypes is never loaded) or by the
    # kernel (no process of the run opens a /proc/<pid>/mem, by any name).
    assert forge.startswith("denied:"), f"the memory was written: {forge}\n{out.why()}"
    # ... and by the defence, not by the payload failing on its own
    door = name.rsplit("-", 1)[0]
    assert forge.startswith(DENIED[door]), f"{door} was not shut as it should be: {forge}"
    assert out.status in ("tampered", "unresolved"), f"the forgery is {out.status}\n{out.why()}"
    body = json.loads(base64.b64decode(out.receipt["entry"]["payload"]))["body"]
    assert body["isolation"]["memory"] == "sealed", body["isolation"]
    assert body["integrity"]["level"] == "monitor", body["integrity"]
    if name.startswith("ctypes-thread"):  # nothing of the patch's asked: withheld
        assert body["isolation"]["withheld"], body["isolation"]
    elif name.startswith("ctypes"):
        assert "which hands Python code the process's memory" in body["integrity"]["forged"]


@pytest.mark.parametrize("name", [f"fix-{kind}" for kind in TASKS])
def test_the_real_fix_still_resolves_beside_them(forgeries: Run, name: str) -> None:
    out = forgeries.futures[name].result(timeout=600)
    assert out.status == "resolved", out.why()
