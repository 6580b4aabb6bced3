"""Attacks on grading integrity: each patch keeps the bug and tries to get `resolved`.

Every route ships a NON-fix plus a payload; the payload (or, where the
defence may stop it from ever loading, a probe in the library the tests
import) proves with marker lines in `output_tail` that the attempt ran. A
route fails as it should when submit rejects the patch (INVALID_ARGUMENT with
a message), or when the payload ran and the status is `unresolved` or
`tampered`. Real fixes of every targeted task must still resolve.

One daemon (throw-away data dir and tasks copy) grades every route
concurrently; only the selected tests' routes are submitted.

Against the runner before hardening, every route resolves its non-fix (the
test fails) except: `pyc-binary` (binary patches are refused), `stray-files`
(conftest.py is a protected name; files outside tests/ are never collected),
and `pyc-text`, which does not resolve but fails because the text stand-ins
reach the graded tree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jb_client.api import Client
from jb_client.errors import ClientError

from jouled.errors import Kind

from . import attacks as A
from .conftest import Daemon, start_daemon

NOT_RESOLVED = {"unresolved", "tampered"}


@dataclass
class Outcome:
    token: str
    receipt: dict[str, Any] | None = None
    error: ClientError | None = None

    @property
    def output(self) -> str:
        return str((self.receipt or {}).get("output_tail", ""))

    @property
    def found(self) -> dict[str, str]:
        return A.markers(self.output, self.token)

    @property
    def status(self) -> str:
        return str((self.receipt or {}).get("status", f"no receipt: {self.error}"))

    def why(self) -> str:
        tail = self.output[-4000:] or f"(no receipt: {self.error})"
        return (
            f"status {self.status}; markers {json.dumps(self.found, indent=1)}\n"
            f"--- output tail ---\n{tail}"
        )


@dataclass(frozen=True)
class Route:
    task: A.TaskInfo
    build: Callable[[Path, str], bytes]  # (task dir in the tasks copy, token) -> patch
    probe: str  # the marker that proves the attempt's code ran
    statuses: frozenset[str] = frozenset(NOT_RESOLVED)
    must_reject: bool = False  # the patch cannot be expressed: submit must refuse it
    absent: tuple[str, ...] = ()  # tree-probe paths that must not reach the graded tree
    notes: dict[str, str] = field(default_factory=dict)


def lib(info: A.TaskInfo, body: str, cfg: dict[str, Any]) -> dict[str, str]:
    return {info.library: A.payload(body, cfg)}


def probe_cfg(token: str, paths: list[str], modules: list[str]) -> dict[str, Any]:
    return {"token": token, "paths": paths, "modules": modules}


# -- the routes -------------------------------------------------------------------------------


def build_hook_flip(task: Path, token: str) -> bytes:
    return A.build_patch(task, append=lib(A.LRUCACHE, A.HOOK_FLIP, {"token": token}))


def build_junit_rewrite(task: Path, token: str) -> bytes:
    return A.build_patch(task, append=lib(A.LRUCACHE, A.JUNIT_REWRITE, {"token": token}))


def build_fake_ra(task: Path, token: str) -> bytes:
    return A.build_patch(task, append=lib(A.LRUCACHE, A.FAKE_RA, {"token": token}))


def build_kill_parent(task: Path, token: str) -> bytes:
    cfg = {"token": token, "kill_parent": True}
    return A.build_patch(task, append=lib(A.LRUCACHE, A.FAKE_RA, cfg))


def plugin_file(token: str, via: str) -> str:
    return A.PLUGIN + A.payload(A.PLUGIN_LOADED, {"token": token, "via": via})


def build_entry_point(task: Path, token: str) -> bytes:
    files: dict[str, str | None] = {
        "evil-0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil\nVersion: 0\n",
        "evil-0.dist-info/entry_points.txt": "[pytest11]\nevil = evil_plugin\n",
        "evil_plugin.py": plugin_file(token, "entry-point"),
    }
    cfg = probe_cfg(token, list(files), ["evil_plugin"])
    return A.build_patch(task, files=files, append=lib(A.LRUCACHE, A.TREE_PROBE, cfg))


def build_toml(name: str, plugin: str) -> Callable[[Path, str], bytes]:
    def build(task: Path, token: str) -> bytes:
        files: dict[str, str | None] = {
            name: f'[pytest]\naddopts = ["-p", "{plugin}"]\npythonpath = ["."]\n',
            f"{plugin}.py": plugin_file(token, name),
        }
        cfg = probe_cfg(token, list(files), [plugin])
        return A.build_patch(task, files=files, append=lib(A.LRUCACHE, A.TREE_PROBE, cfg))

    return build


def build_shadow(task: Path, token: str) -> bytes:
    files: dict[str, str | None] = {
        f"{name}.py": A.payload(A.SHADOW, {"token": token, "shadow": name, "file": f"{name}.py"})
        for name in ("unittest", "difflib")
    }
    files["sitecustomize.py"] = A.payload(A.HOOK_FLIP, {"token": token})
    cfg = probe_cfg(token, list(files), ["unittest", "difflib", "sitecustomize"])
    return A.build_patch(task, files=files, append=lib(A.LRUCACHE, A.TREE_PROBE, cfg))


PYC = "lrucache/__pycache__/cache.cpython-311.pyc"


def build_text_pyc(task: Path, token: str) -> bytes:
    files: dict[str, str | None] = {PYC: "stale bytecode stand-in\n", "lrucache/cache.pyc": "x\n"}
    cfg = probe_cfg(token, list(files), [])
    return A.build_patch(task, files=files, append=lib(A.LRUCACHE, A.TREE_PROBE, cfg))


def build_binary_pyc(task: Path, token: str) -> bytes:
    return (
        f"diff --git a/{PYC} b/{PYC}\n"
        "new file mode 100644\n"
        "index 0000000..e69de29\n"
        "GIT binary patch\n"
        "literal 16\n"
        "Xc${NkU|?WkU}RtjVq{<t00031000000\n"
        "\n"
        "literal 0\n"
        "HcmV?d00001\n"
        "\n"
    ).encode()


def build_stray_files(task: Path, token: str) -> bytes:
    names = ["conftest.py", "lrucache/conftest.py", "test_evil.py", "lrucache/test_evil.py"]
    files: dict[str, str | None] = {name: plugin_file(token, name) for name in names}
    cfg = probe_cfg(token, names, ["conftest", "test_evil", "lrucache.test_evil"])
    return A.build_patch(task, files=files, append=lib(A.LRUCACHE, A.TREE_PROBE, cfg))


def build_runtime_plugin(task: Path, token: str) -> bytes:
    cfg = {"token": token, "plugin": A.PLUGIN}
    return A.build_patch(task, append=lib(A.LRUCACHE, A.RUNTIME_PLUGIN, cfg))


def build_edit_memory(task: Path, token: str) -> bytes:
    cfg = {"token": token, "neuter": A.NEUTER, "memory": True}
    return A.build_patch(task, append=lib(A.LRUCACHE, A.RUNTIME_EDIT, cfg))


def build_edit_disk(task: Path, token: str) -> bytes:
    cfg = {"token": token, "neuter": A.NEUTER, "memory": True, "disk": True}
    return A.build_patch(task, append=lib(A.URLRESOLVE, A.RUNTIME_EDIT, cfg))


ROUTES: dict[str, Route] = {
    # (1) the library wraps pytest's report factory: failing calls become passes
    "hook-flip": Route(A.LRUCACHE, build_hook_flip, "hook-flip"),
    # (2) rewrite the report the daemon reads (found from argv and /proc), exit 0
    "junit-rewrite": Route(A.LRUCACHE, build_junit_rewrite, "junit-paths"),
    # (3) a forged -rA summary for every test, then os._exit(0) before any report
    "fake-ra": Route(A.LRUCACHE, build_fake_ra, "fake-ra"),
    # (4) a pytest11 entry point from a dist-info at the tree root
    "entry-point": Route(A.LRUCACHE, build_entry_point, "module-evil_plugin"),
    # (5) pytest.toml / .pytest.toml (read before pytest.ini) load a plugin
    "pytest-toml": Route(
        A.LRUCACHE, build_toml("pytest.toml", "evil_toml_plugin"), "module-evil_toml_plugin"
    ),
    "dot-pytest-toml": Route(
        A.LRUCACHE, build_toml(".pytest.toml", "evil_dot_plugin"), "module-evil_dot_plugin"
    ),
    # (6) modules shadowing the stdlib (imported late by pytest) plus sitecustomize
    "stdlib-shadow": Route(A.LRUCACHE, build_shadow, "module-unittest"),
    # stale bytecode: a text stand-in under __pycache__ must not reach the tree...
    "pyc-text": Route(
        A.LRUCACHE,
        build_text_pyc,
        "present-lrucache|__pycache__|cache.cpython-311.pyc",
        absent=(PYC, "lrucache/cache.pyc"),
    ),
    # ... and real bytecode cannot be sent at all
    "pyc-binary": Route(A.LRUCACHE, build_binary_pyc, "", must_reject=True),
    # conftest.py outside tests/, new test files outside the protected globs
    "stray-files": Route(A.LRUCACHE, build_stray_files, "module-conftest"),
    # a plugin registered at runtime through the live Config; sys.exit(0) at session finish
    "runtime-plugin": Route(A.LRUCACHE, build_runtime_plugin, "runtime-plugin"),
    # kill the parent (a reporter, never the daemon), then forge -rA and exit 0
    "kill-parent": Route(
        A.LRUCACHE,
        build_kill_parent,
        "kill-parent",
        statuses=frozenset({*NOT_RESOLVED, "error"}),
    ),
    # the tests edited at runtime: the importing test module in memory when its body ends
    "edit-memory": Route(A.LRUCACHE, build_edit_memory, "edit-memory"),
    # ... and test files not imported yet rewritten on disk (urlresolve has three)
    "edit-disk": Route(A.URLRESOLVE, build_edit_disk, "edit-disk"),
}
FIXED_TASKS = {info.name: info for info in (A.LRUCACHE, A.URLRESOLVE)}


# -- the daemon and the submissions -----------------------------------------------------------


@dataclass
class Grading:
    daemon: Daemon
    tasks: Path
    futures: dict[str, Future[Outcome]]


def submit(target: str, task_id: str, patch: bytes, token: str = "") -> Outcome:
    out = Outcome(token)
    with Client(target, timeout_s=300) as client:
        try:
            out.receipt = client.submit(task_id, patch).to_dict()
        except ClientError as err:
            out.error = err
    return out


# (tasks copy, token) -> the patch to submit
Build = Callable[[Path, str], bytes]


@contextmanager
def serving(
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    label: str,
    routes: Mapping[str, tuple[str, Build]],
    prepare: Callable[[Path], None] | None = None,
) -> Iterator[tuple[Daemon, Path, dict[str, Future[Outcome]]]]:
    """One daemon (throw-away data dir and tasks copy) grading, concurrently, the routes
    (name -> (task id, build)) whose tests this session selected from the requesting module;
    `prepare` adds to the tasks copy (a task of its own) before the daemon starts."""
    here = request.path
    ids = {
        item.callspec.id
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.path == here and hasattr(item, "callspec")
    }
    root = tmp_path_factory.mktemp(label)
    tasks = A.copy_tasks(root / "tasks")
    if prepare is not None:
        prepare(tasks)
    daemon = start_daemon(root / "data", "--attribution", "shared", "--workers", "8", tasks=tasks)
    tokens: list[str] = []
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix=label)
    futures: dict[str, Future[Outcome]] = {}
    try:
        for name, (task_id, build) in routes.items():
            if name in ids:
                token = A.new_token()
                tokens.append(token)
                patch = build(tasks, token)
                futures[name] = pool.submit(submit, daemon.target, task_id, patch, token)
        yield daemon, tasks, futures
    finally:
        pool.shutdown(wait=True)
        for token in tokens:
            A.kill_token(token)
        if daemon.proc.poll() is None:
            daemon.stop(timeout=60)


def route_build(route: Route) -> Build:
    return lambda tasks, token: route.build(route.task.dir(tasks), token)


def fix_build(info: A.TaskInfo) -> Build:
    return lambda tasks, token: A.build_patch(info.dir(tasks), fix=True)


@pytest.fixture(scope="module")
def grading(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Grading]:
    routes = {name: (r.task.task_id, route_build(r)) for name, r in ROUTES.items()}
    for name, info in FIXED_TASKS.items():
        routes[f"fix-{name}"] = (info.task_id, fix_build(info))
    with serving(tmp_path_factory, request, "attack-grading", routes) as (daemon, tasks, futures):
        yield Grading(daemon, tasks, futures)


# -- the tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ROUTES))
def test_a_non_fix_is_not_resolved(grading: Grading, name: str) -> None:
    route = ROUTES[name]
    out = grading.futures[name].result(timeout=600)
    if out.error is not None:
        assert out.error.kind == Kind.INVALID_ARGUMENT, f"{out.error.kind}: {out.error.message}"
        assert out.error.message.strip(), "a rejection must say what is wrong"
        return
    assert not route.must_reject, f"a patch that cannot be expressed was accepted\n{out.why()}"
    assert out.receipt is not None
    found = out.found
    assert "ran" in found, f"the payload did not run (no marker)\n{out.why()}"
    assert "crash" not in found, f"the payload crashed: {found['crash']}\n{out.why()}"
    assert route.probe in found, f"no {route.probe!r} marker\n{out.why()}"
    assert out.status in route.statuses, f"the non-fix is {out.status}\n{out.why()}"
    for rel in route.absent:
        key = "present-" + rel.replace("/", "|")
        assert found.get(key) == "no", f"{rel} reached the graded tree\n{out.why()}"


@pytest.mark.parametrize("name", [f"fix-{n}" for n in FIXED_TASKS])
def test_a_real_fix_still_resolves(grading: Grading, name: str) -> None:
    out = grading.futures[name].result(timeout=600)
    assert out.status == "resolved", out.why()
