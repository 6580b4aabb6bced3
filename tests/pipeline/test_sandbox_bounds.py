"""The sandbox's per-daemon instances, nested user namespaces and bounded writable space.

Run for real (bwrap, mount, flock); the kernel's cgroup files are faked where a
test names groups, as in test_sandbox.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jouled.errors import PatchError
from jouled.patch_diff import diff_trees
from jouled.pipeline import cgroup, instance, scratch, seccomp
from jouled.pipeline.limits import Limits
from jouled.pipeline.sandbox import BWRAP, Sandbox, sandbox_level

LEVEL = sandbox_level()
needs_bwrap = pytest.mark.skipif(LEVEL != BWRAP, reason=f"this host gives only {LEVEL}")
QUICK = Limits(timeout_s=60)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sandbox-bounds-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# -- instances ---------------------------------------------------------------------------------


def test_an_instance_is_named_by_its_data_dir(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert instance.name_of(a) != instance.name_of(b)
    assert instance.name_of(a) == instance.name_of(tmp_path / "x" / ".." / "a")
    one = instance.for_data_dir(a, root=False)
    assert one.cgroup_name(3) == f"jouled-{one.name}-run-3"
    low, high = one.uid_range
    assert high - low == instance.UID_POOL - 1 and high < 2**32 - 1


def test_a_held_uid_block_sends_the_next_daemon_to_another(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    data = tmp_path / "data"
    start = int(instance.name_of(data), 16) % instance.UID_BLOCKS
    # Another daemon holds the block this data dir hashes to.
    held = os.open(locks / f"uids-{start}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        got = instance.for_data_dir(data, root=True, lock_dir=locks)
    finally:
        os.close(held)
    assert got.uid_base == instance.UID_BASE + ((start + 1) % instance.UID_BLOCKS) * 4096
    assert got.uid_lock.endswith(f"uids-{(start + 1) % instance.UID_BLOCKS}.lock")
    assert str(data) in Path(got.uid_lock).read_text()


RUN_IN_SANDBOX = """
import json, sys, tempfile
from pathlib import Path
from jouled.pipeline.limits import Limits
from jouled.pipeline.sandbox import Sandbox
work = Path(tempfile.mkdtemp())
work.chmod(0o755)
box = Sandbox()
result = box.run(["cat", "/proc/self/cgroup"], work, limits=Limits(timeout_s=60))
print(json.dumps({"iso": result.isolation, "output": result.output}))
"""


@needs_bwrap
def test_two_processes_without_a_daemon_share_no_cgroup_and_no_uid() -> None:
    """`jouled tasks check` twice on one host (or two test workers): each process is an
    instance of its own, so one's limits are never written over the other's group and
    one's runs can never signal the other's."""
    seen = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", RUN_IN_SANDBOX], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        seen.append(json.loads(done.stdout))
    a, b = (found["iso"] for found in seen)
    assert a["instance"] and a["instance"] != b["instance"], (a, b)
    assert a["cgroup_name"] != b["cgroup_name"], (a, b)
    if a["uid"] == "pooled":  # as root: blocks claimed with a lock, one per live process
        assert a["uids"] != b["uids"], (a, b)
    if a.get("cgroup") in ("v1", "v2"):  # the run was really in its process's group
        assert a["cgroup_name"] in seen[0]["output"], seen[0]["output"]
        assert b["cgroup_name"] in seen[1]["output"], seen[1]["output"]


def test_each_instance_gets_its_own_cgroups_in_a_fake_hierarchy(tmp_path: Path) -> None:
    for controller in ("memory", "pids"):
        (tmp_path / controller / "svc").mkdir(parents=True)
    groups = cgroup.Groups(tmp_path, proc_cgroup="5:memory:/svc\n4:pids:/svc\n0::/\n")
    a = instance.Instance("aaaa", instance.UID_BASE)
    b = instance.Instance("bbbb", instance.UID_BASE + instance.UID_POOL)
    with groups.slot(0, a.cgroup_name(0)) as ga, groups.slot(0, b.cgroup_name(0)) as gb:
        assert ga is not None and gb is not None
        assert ga.dirs != gb.dirs
    assert (tmp_path / "pids" / "svc" / "jouled-aaaa-run-0").is_dir()
    groups.remove([a.cgroup_name(0)])
    assert not (tmp_path / "memory" / "svc" / "jouled-aaaa-run-0").exists()
    assert (tmp_path / "memory" / "svc" / "jouled-bbbb-run-0").is_dir()


# -- nested user namespaces -------------------------------------------------------------------


def test_the_seccomp_program_is_well_formed() -> None:
    for machine in ("x86_64", "aarch64"):
        program = seccomp.no_new_userns(machine)
        assert program is not None and len(program) % 8 == 0
        ops = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
        assert ops[-1][0] == 0x06, "the program ends with a return"
        jumps = [(i, jt, jf) for i, (code, jt, jf, _) in enumerate(ops) if code & 0x07 == 0x05]
        assert jumps and all(i + 1 + max(jt, jf) < len(ops) for i, jt, jf in jumps)
    assert seccomp.no_new_userns("s390x") is None


@needs_bwrap
def test_a_run_cannot_make_a_user_namespace(workdir: Path) -> None:
    result = Sandbox().run(
        ["sh", "-c", "unshare --user true; echo unshare=$?"], workdir, limits=QUICK
    )
    assert "unshare=0" not in result.output, result.output
    assert "unshare=" in result.output, result.output
    assert result.isolation["nested_userns"] in ("seccomp", "disable-userns")


# -- the writable space ------------------------------------------------------------------------


def test_without_mount_rights_the_space_is_held_to_the_floor(tmp_path: Path) -> None:
    with scratch.attempt_space(tmp_path, "a-", size=0, floor=1 << 20) as space:
        found = scratch.space_of(space / "tree" / "x")
        assert found is not None and found.kind == scratch.FLOOR
        assert found.describe() == {"bound": "free-space floor", "bytes": 1 << 20}
        assert not found.exhausted()
    assert scratch.space_of(space) is None and not space.exists()


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the attempt's tmpfs needs root")
def test_a_run_that_fills_its_tmpfs_is_signed_resource_disk(tmp_path: Path) -> None:
    with scratch.attempt_space(tmp_path, "a-", size=4 << 20, floor=0) as space:
        if scratch.space_of(space).kind != scratch.TMPFS:  # type: ignore[union-attr]
            pytest.skip("this host refused the daemon a tmpfs mount")
        tree = space / "tree"
        tree.mkdir()
        # The space stays full until the run ends, where it is read once more: a fill
        # removed at once could fall between two of the readings made while it runs.
        script = "head -c 8388608 /dev/zero > fill; echo rc=$?"
        result = Sandbox().run(["sh", "-c", script], tree, limits=QUICK)
        assert "rc=1" in result.output, result.output
        assert result.isolation["disk"] == {"bound": "tmpfs", "bytes": 4 << 20}
        assert result.isolation["resource"] == "disk"
        (tree / "fill").unlink()
        quiet = Sandbox().run(["true"], tree, limits=QUICK)
        assert "resource" not in quiet.isolation
    assert not space.exists()


# -- a solver's work, read back within a bound -------------------------------------------------


def test_a_diff_past_its_bound_is_refused_without_reading_the_file(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    (old / "a.py").write_text("x = 1\n")
    shutil.copytree(old, new)
    (new / "a.py").write_text("x = 2\n")
    assert b"+x = 2" in diff_trees(old, new, max_bytes=1 << 10)
    with (new / "big.txt").open("w") as fh:
        fh.truncate(64 << 20)  # sparse: reading it would cost 64 MiB, listing it nothing
    with pytest.raises(PatchError) as err:
        diff_trees(old, new, max_bytes=1 << 20)
    assert err.value.path == "big.txt" and "bounded to 1048576 bytes" in err.value.message
    (new / "big.txt").unlink()
    for i in range(40):
        (new / f"n{i}.py").write_text("y = 1\n" * 10)
    with pytest.raises(PatchError, match="takes the diff to"):
        diff_trees(old, new, max_bytes=1 << 10)
    with pytest.raises(PatchError, match="more than 10 files"):
        diff_trees(old, new, max_entries=10)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the attempt's tmpfs needs root")
def test_a_crashed_daemons_spaces_are_reclaimed_at_start(tmp_path: Path) -> None:
    work = tmp_path / "work"
    left = work / "attempt-crashed"
    left.mkdir(parents=True)
    if not scratch._mount_tmpfs(str(left), 1 << 20):
        pytest.skip("this host refused a tmpfs mount")
    (left / "tree").mkdir()
    (work / "baseline-crashed").mkdir()
    assert os.path.ismount(left)
    assert scratch.reclaim(work) == ["attempt-crashed", "baseline-crashed"]
    assert not os.path.ismount(left) and not list(work.iterdir())
    assert scratch.reclaim(tmp_path / "missing") == []
