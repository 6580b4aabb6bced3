"""The monitor's snapshot on every interpreter found here: a namespace is compared only
once its version tag moved, so the tag must move on every write, for module
namespaces and for classes (read through their `__dict__` proxy) alike.

The monitor's files are run as the graded process runs them (one namespace, in
their order), in a plain interpreter with no audit hook: the writes below are made
the ways the hook does not see (a class's dict reached past its proxy is what the
snapshot is the backstop for), so only the snapshot can find them.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from jouled.pipeline import runners
from tests.pipeline.test_unittest_run import interpreters, version_of

PROBE = """
import json, sys, types
ns = {"__name__": "jouled_probe"}
for path in sys.argv[1:]:
    with open(path) as fh:
        exec(compile(fh.read(), path, "exec"), ns)
tag = ns["version_tags"]()
out = {"tags": tag is not None}
origins = ns["Origins"]("/nonexistent-tree", frozenset(), {})
sentinel = object()

def findings(use_tags, make):
    snapshot = ns["Snapshot"](origins, tag if use_tags else None)
    module = types.ModuleType("watched")
    module.helper = sentinel
    cls = type("Watched", (), {"helper": sentinel, "method": lambda self: None})
    snapshot.add("watched", ns["_MODULE_DICT"](module), put_back=True)
    snapshot.add("Watched", ns["_TYPE_DICT"](cls), strict=True)
    problems = []
    snapshot.check(problems, scan=False)
    assert problems == [], problems
    make(module, cls)
    snapshot.check(problems, scan=False)
    return problems

def class_dict(cls):
    # The dict behind the proxy, as `gc` would hand it out: written with no audit event.
    import gc
    return [r for r in gc.get_referents(ns["_TYPE_DICT"](cls)) if type(r) is dict][0]

def replace_in_class(module, cls):
    class_dict(cls)["helper"] = object()

def swap_back_in_class(module, cls):
    class_dict(cls)["helper"] = object()
    class_dict(cls)["helper"] = sentinel

def swap_back_in_module(module, cls):
    module.helper = object()
    module.helper = sentinel

for use_tags in ([True, False] if tag is not None else [False]):
    key = "tagged" if use_tags else "untagged"
    out[key] = {
        "nothing": findings(use_tags, lambda module, cls: None),
        "class replaced": findings(use_tags, replace_in_class),
        "class put back": findings(use_tags, swap_back_in_class),
        "module put back": findings(use_tags, swap_back_in_module),
    }
print(json.dumps(out))
"""


@pytest.mark.parametrize("python", interpreters())
def test_every_write_to_a_watched_namespace_is_seen_with_or_without_version_tags(
    python: str,
) -> None:
    version = version_of(python)
    upto = [path.name for path in runners.MONITOR].index("jouled_snapshot.py") + 1
    done = subprocess.run(
        [python, "-c", PROBE, *(str(path) for path in runners.MONITOR[:upto])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    # Tags are read on 3.8-3.13 (3.6 and 3.7 move them on every store).
    assert found["tags"] is ((3, 8) <= version <= (3, 13)), (version, found)
    for key in ("tagged", "untagged") if found["tags"] else ("untagged",):
        seen = found[key]
        assert seen["nothing"] == [], (key, seen)
        assert seen["class replaced"] == ["Watched.helper was replaced"], (key, seen)
        # A class is compared, not watched for put-backs: a value back in place is fine.
        assert seen["class put back"] == [], (key, seen)
    if found["tags"]:
        assert found["tagged"]["module put back"] == [
            "watched was written and put back since the last check"
        ]
    assert found["untagged"]["module put back"] == []
