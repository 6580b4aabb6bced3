import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from jouled.errors import SandboxError
from jouled.pipeline import sandbox
from jouled.pipeline.sandbox import Limits, RunResult, run, sandbox_level, scrubbed_env
from jouled.pipeline.testreport import FAILED, PASSED, parse_junit, pytest_argv

LEVEL = sandbox_level()
needs_netns = pytest.mark.skipif("netns" not in LEVEL, reason="no private network namespace here")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

QUICK = Limits(timeout_s=30)


@pytest.fixture
def uid_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a host whose interpreter the unprivileged uid can run.

    The commands these tests run are system binaries, so they work as that uid
    even where the daemon's own interpreter sits in a private home.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root")
    host = sandbox._host_plan()
    monkeypatch.setattr(sandbox, "_host", sandbox._Plan(host.netns, (65534, 65534)))


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Outside pytest's own 0700 temp root, so an unprivileged uid can reach it.
    path = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sh(script: str, cwd: Path, limits: Limits = QUICK, writable: Sequence[Path] = ()) -> RunResult:
    return run(["sh", "-c", script], cwd, limits=limits, writable=writable)


def alive(pid: int) -> bool:
    """Whether `pid` still runs; a zombie waiting for its parent does not count."""
    for _ in range(100):  # SIGKILL is delivered asynchronously: allow it to land
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)
    return True


# -- basics -------------------------------------------------------------------------------


def test_sandbox_level_is_probed_once_and_well_formed() -> None:
    assert LEVEL in {"process", "process+netns", "process+uid", "process+netns+uid"}
    assert sandbox_level() == LEVEL


def test_nonzero_exit_is_a_result_not_an_error(workdir: Path) -> None:
    result = run(["sh", "-c", "echo out; echo err >&2; exit 3"], workdir, limits=QUICK)
    assert result.exit_code == 3
    assert result.signal is None
    assert not result.timed_out
    assert "out\n" in result.output and "err\n" in result.output
    assert result.argv == ("sh", "-c", "echo out; echo err >&2; exit 3")
    assert result.level.startswith("process")


def test_missing_executable_raises(workdir: Path) -> None:
    with pytest.raises(SandboxError, match="not found"):
        run(["no-such-program-anywhere"], workdir, limits=QUICK)
    with pytest.raises(SandboxError):
        run(["./missing.sh"], workdir, limits=QUICK)


def test_unexecutable_file_raises(workdir: Path) -> None:
    script = workdir / "garbage"
    script.write_bytes(b"\x00\x01not a program")
    script.chmod(0o755)
    with pytest.raises(SandboxError, match="exec"):
        run(["./garbage"], workdir, limits=QUICK)


def test_missing_working_directory_raises(workdir: Path) -> None:
    with pytest.raises(SandboxError, match="does not exist"):
        run(["true"], workdir / "gone", limits=QUICK)


def test_limits_reject_a_non_positive_timeout() -> None:
    with pytest.raises(ValueError):
        Limits(timeout_s=0)


def test_output_is_decoded_with_replacement(workdir: Path) -> None:
    result = sh(r"printf 'a\377b'", workdir)
    assert result.output == "a\ufffdb"


# -- environment --------------------------------------------------------------------------


def test_environment_is_scrubbed(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "PYTHONPATH",
        "PYTEST_ADDOPTS",
        "PYTEST_PLUGINS",
        "PYTHONSTARTUP",
        "HTTPS_PROXY",
        "http_proxy",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
    ):
        monkeypatch.setenv(name, "leaked")
    result = run(["env"], workdir, limits=QUICK, env={"EXTRA": "1"})
    seen = dict(line.split("=", 1) for line in result.output.splitlines())
    assert set(seen) == {
        "PATH",
        "LANG",
        "HOME",
        "TMPDIR",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "EXTRA",
    }
    assert seen["LANG"] == "C.UTF-8"
    assert seen["PYTHONDONTWRITEBYTECODE"] == "1"
    assert seen["PYTHONHASHSEED"] == "0"
    assert "leaked" not in result.output


def test_scrubbed_env_puts_the_daemon_interpreter_first() -> None:
    env = scrubbed_env({"X": "y"})
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert env["X"] == "y"


def test_home_and_tmpdir_are_private_writable_and_removed(workdir: Path) -> None:
    result = sh('touch "$HOME/h" "$TMPDIR/t" && echo "$HOME"', workdir)
    home = Path(result.output.strip())
    assert result.exit_code == 0, result.output
    assert home != Path.home()
    assert not home.exists()


def test_stdin_is_dev_null(workdir: Path) -> None:
    result = run(["cat"], workdir, limits=Limits(timeout_s=20))
    assert not result.timed_out
    assert result.exit_code == 0
    assert result.output == ""


# -- timeouts and leftovers ---------------------------------------------------------------


def test_timeout_kills_the_grandchild_in_the_group(workdir: Path) -> None:
    result = sh("sleep 60 & echo $!; wait", workdir, Limits(timeout_s=1))
    assert result.timed_out
    assert result.exit_code is None
    assert result.signal == signal.SIGKILL
    grandchild = int(result.output.split()[0])
    assert not alive(grandchild)


@needs_netns
def test_timeout_kills_a_grandchild_that_left_the_session(workdir: Path) -> None:
    result = sh("setsid sleep 60 & echo $!; sleep 60", workdir, Limits(timeout_s=1))
    assert result.timed_out
    escaped = int(result.output.split()[0])
    assert not alive(escaped)


def test_leftovers_are_killed_when_the_command_exits(workdir: Path) -> None:
    # The background sleep keeps the output pipe open: without the cleanup the
    # run would wait for it (and here, time out).
    result = sh("sleep 60 & echo $!", workdir, Limits(timeout_s=20))
    assert not result.timed_out
    assert result.exit_code == 0
    assert not alive(int(result.output.split()[0]))


def test_a_chatty_command_never_blocks_and_keeps_the_tail(workdir: Path) -> None:
    limits = Limits(timeout_s=60, output_bytes=4096)
    result = sh("head -c 5000000 /dev/zero | tr '\\0' x; echo; echo END", workdir, limits)
    assert not result.timed_out
    assert result.exit_code == 0
    assert len(result.output) == 4096
    assert result.output.endswith("x\nEND\n")
    assert result.output_dropped == 5000000 + 5 - 4096


def test_exit_is_noticed_without_pidfds(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pidfds(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfds)
    done = sh("echo fine", workdir)
    assert (done.exit_code, done.output, done.timed_out) == (0, "fine\n", False)
    stuck = sh("sleep 60 & echo $!; wait", workdir, Limits(timeout_s=1))
    assert stuck.timed_out
    assert not alive(int(stuck.output.split()[0]))


def test_the_command_dies_with_the_daemon(workdir: Path) -> None:
    pidfile = workdir / "pid"
    daemon = textwrap.dedent(
        f"""
        import os, threading, time
        from pathlib import Path
        from jouled.pipeline.sandbox import Limits, run
        script = "echo $$ > {pidfile}; exec sleep 60"
        work = lambda: run(["sh", "-c", script], Path({str(workdir)!r}), limits=Limits(120))
        threading.Thread(target=work, daemon=True).start()
        while not Path({str(pidfile)!r}).exists() or not Path({str(pidfile)!r}).read_text():
            time.sleep(0.02)
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", daemon], check=True, timeout=60)
    assert not alive(int(pidfile.read_text()))


# -- limits and accounting ----------------------------------------------------------------


def test_rlimits_apply(workdir: Path) -> None:
    limits = Limits(timeout_s=30, open_files=100, memory_bytes=512 << 20, file_bytes=1 << 20)
    result = sh("ulimit -n; ulimit -v; ulimit -c", workdir, limits)
    assert result.output.split() == ["100", str(512 << 10), "0"]


def test_file_size_limit_stops_a_writer(workdir: Path) -> None:
    limits = Limits(timeout_s=30, file_bytes=1 << 20)
    result = sh("exec head -c 2000000 /dev/zero > big", workdir, limits, writable=[workdir])
    assert result.signal == signal.SIGXFSZ
    assert (workdir / "big").stat().st_size == 1 << 20


def test_cpu_limit_stops_a_spinner(workdir: Path) -> None:
    result = sh("while :; do :; done", workdir, Limits(timeout_s=60, cpu_s=1))
    assert not result.timed_out
    assert result.signal in (signal.SIGXCPU, signal.SIGKILL)


def test_memory_limit_stops_an_allocation(workdir: Path) -> None:
    code = "b = bytearray(1 << 30)"
    result = run([sys.executable, "-c", code], workdir, limits=Limits(60, memory_bytes=256 << 20))
    assert result.exit_code == 1
    assert "MemoryError" in result.output


def test_cpu_time_includes_reaped_descendants(workdir: Path) -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass"
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"
    result = run([sys.executable, "-c", code], workdir, limits=QUICK)
    assert result.exit_code == 0, result.output
    assert result.cpu_ns >= 300_000_000


# -- network namespace --------------------------------------------------------------------

NET_CHECK = textwrap.dedent(
    """
    import os, socket
    print(os.readlink("/proc/self/ns/net"))
    with socket.create_server(("127.0.0.1", 0)) as server:
        socket.create_connection(server.getsockname(), timeout=5).close()
        print("loopback ok")
    try:
        socket.create_connection(("192.0.2.1", 9), timeout=5).close()
        print("outside reachable")
    except OSError as err:
        print("outside unreachable", err.errno)
    """
)


@needs_netns
def test_private_network_namespace_with_loopback(workdir: Path) -> None:
    result = run([sys.executable, "-c", NET_CHECK], workdir, limits=QUICK)
    lines = result.output.splitlines()
    assert "netns" in result.level
    assert lines[0] != os.readlink("/proc/self/ns/net")
    assert lines[1] == "loopback ok"
    assert lines[2].startswith("outside unreachable")


# -- unprivileged uid ---------------------------------------------------------------------


@pytest.mark.usefixtures("uid_allowed")
def test_runs_as_nobody_and_owns_only_the_writable_paths(workdir: Path) -> None:
    tree, locked = workdir / "tree", workdir / "locked"
    tree.mkdir()
    locked.mkdir()
    (tree / "existing.txt").write_text("x")
    script = "id -u; touch made && echo made; touch ../locked/x 2>/dev/null || echo denied"
    result = sh(script, tree, writable=[tree])
    assert result.level.endswith("+uid")
    assert result.output.split() == ["65534", "made", "denied"]
    assert (tree / "made").stat().st_uid == 65534
    assert (tree / "existing.txt").stat().st_uid == 65534
    assert locked.stat().st_uid == 0


@pytest.mark.usefixtures("uid_allowed")
def test_no_uid_drop_when_the_uid_cannot_reach_the_tree(workdir: Path) -> None:
    hidden = workdir / "hidden"
    hidden.mkdir(mode=0o700)
    tree = hidden / "tree"
    tree.mkdir()
    result = run(["id", "-u"], tree, limits=QUICK, writable=[tree])
    assert result.output.strip() == "0"
    assert "uid" not in result.level
    assert tree.stat().st_uid == 0  # nothing was chowned


@pytest.mark.usefixtures("uid_allowed")
def test_chown_follows_neither_symlinks_nor_hard_links(workdir: Path) -> None:
    tree = workdir / "tree"
    tree.mkdir()
    outside = workdir / "outside.txt"
    outside.write_text("pristine")
    (tree / "link").symlink_to(outside)
    os.link(outside, tree / "hard")
    result = run(["true"], tree, limits=QUICK, writable=[tree])
    assert result.level.endswith("+uid")
    assert outside.stat().st_uid == 0
    assert (tree / "link").lstat().st_uid == 65534


@needs_root
def test_the_host_probe_checks_what_the_uid_can_run_as_that_uid(workdir: Path) -> None:
    hidden = workdir / "hidden"
    hidden.mkdir(mode=0o700)
    (hidden / "python").touch(mode=0o755)
    check = [str(hidden / "python"), "/bin/sh"]
    probed = sandbox._probe(sandbox._Plan(netns=False, ids=(65534, 65534)), check)
    assert probed is not None
    assert probed.applied == ("uid",)
    assert probed.denied == (str(hidden / "python"),)


@needs_root
def test_uid_is_used_only_where_the_daemon_interpreter_is_reachable() -> None:
    reachable = all(
        all(os.stat(p).st_mode & 0o001 for p in [Path(path), *Path(path).parents])
        for path in sandbox._interpreter_paths()
    )
    assert ("uid" in LEVEL) is reachable


def _system_python() -> str | None:
    """A Python 3.11+ outside any 0700 home, runnable by an unprivileged user."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        real = os.path.realpath(candidate)
        if not os.path.exists(real) or any(
            not os.stat(p).st_mode & 0o001 for p in Path(real).parents
        ):
            continue
        version = subprocess.run(
            [real, "-c", "import sys; print(sys.version_info >= (3, 11))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if version.stdout.strip() == "True":
            return real
    return None


@needs_root
def test_without_privileges_the_sandbox_falls_back_silently(workdir: Path) -> None:
    python = _system_python()
    if python is None:
        pytest.skip("no world-readable Python 3.11+ to run as nobody")
    repo = Path(__file__).resolve().parents[2]
    code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(repo)!r})
        from jouled.pipeline.sandbox import Limits, run, sandbox_level
        result = run(["id", "-u"], Path({str(workdir)!r}), limits=Limits(30), writable=[])
        print(sandbox_level(), result.level, result.output.strip())
        """
    )
    os.chown(workdir, 65534, 65534)
    done = subprocess.run(
        [python, "-c", code],
        cwd=workdir,
        user=65534,
        group=65534,
        extra_groups=[],
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["process", "process", "65534"]


# -- the pipeline's shape -----------------------------------------------------------------


def test_pytest_with_a_junit_report_outside_the_workdir(workdir: Path) -> None:
    tree, report_dir = workdir / "tree", workdir / "report"
    (tree / "tests").mkdir(parents=True)
    report_dir.mkdir()
    (tree / "pytest.ini").write_text("[pytest]\n")
    (tree / "tests" / "test_a.py").write_text(
        "def test_ok():\n    pass\n\ndef test_bad():\n    assert 0\n"
    )
    report = report_dir / "junit.xml"
    argv = pytest_argv(["python", "-m", "pytest", "tests"], report)
    result = run(argv, tree, limits=Limits(timeout_s=120), writable=[tree, report_dir])
    assert result.exit_code == 1, result.output
    assert parse_junit(report.read_bytes()) == {
        "tests/test_a.py::test_ok": PASSED,
        "tests/test_a.py::test_bad": FAILED,
    }
