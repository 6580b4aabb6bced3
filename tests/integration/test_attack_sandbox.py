"""Attacks on the sandbox: a hostile patch's code runs in the graded pytest process.

Every payload proves it ran with marker lines in the receipt's `output_tail`
(see attacks.py); each test asserts the marker is there, that the attack step
failed, and that nothing happened on the host. All daemons here run on a
throw-away data dir and a throw-away copy of tasks/; everything a payload
could leave on the host is named with a per-test uuid and removed afterwards.

The submissions run concurrently (a thread pool over one shared daemon; one
dedicated TCP daemon for the network and kill attacks) and each test waits
for its own scenario. Only the scenarios of the selected tests run. The
resource attacks (fork bomb, memory) run after the others, one at a time, and
a correct fix is graded last of all.

Against the pre-bubblewrap sandbox (root, netns only) every attack here
succeeds, so every test fails except the correct-fix control: that is
expected until the new sandbox lands. The kill attack then kills the daemon
before a receipt exists, so its marker cannot be seen today.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sysconfig
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jb_client.api import Client
from jb_client.errors import ClientError

from jouled.auth import add_token

from . import attacks as A
from .conftest import Daemon, free_port, start_daemon

TERMINAL = {"resolved", "unresolved", "timeout", "error", "invalid", "tampered"}
GRACE_S = 20.0  # how long leftovers get to disappear after an attempt returned


@dataclass
class Outcome:
    token: str
    receipt: dict[str, Any] | None = None
    error: ClientError | None = None
    notes: dict[str, Any] = field(default_factory=dict)  # host-side observations

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
        return f"markers {json.dumps(self.found, indent=1)}\n--- output tail ---\n{tail}"


# Credentials of the TCP daemons (loopback plaintext with --insecure, bearer tokens).
TCP_TOKENS: dict[str, str] = {}


def connect(target: str, timeout_s: float) -> Client:
    token = TCP_TOKENS.get(target)
    if token is None:
        return Client(target, timeout_s=timeout_s)
    return Client(target, timeout_s=timeout_s, token=token, insecure=True)


def submit(target: str, task_id: str, patch: bytes, token: str = "") -> Outcome:
    out = Outcome(token)
    with connect(target, 300) as client:
        try:
            out.receipt = client.submit(task_id, patch).to_dict()
        except ClientError as err:
            out.error = err
    return out


def serving(target: str) -> bool:
    try:
        with connect(target, 10) as client:
            client.checkpoint()
    except ClientError:
        return False
    return True


def calibrations(target: str) -> int:
    with connect(target, 60) as client:
        return sum(
            1
            for kind, value in client.export_stream()
            if kind == "entry" and json.loads(value).get("kind") == "calibration"
        )


# -- the arena: daemons, scenarios, clean-up ------------------------------------------------

Scenario = Callable[["Arena"], Any]
SCENARIOS: dict[str, Scenario] = {}
HEAVY = ("forkbomb", "memory")  # run after the others, one at a time
USES: dict[str, tuple[str, ...]] = {}  # test name -> scenarios it needs


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__.removeprefix("scenario_")] = fn
    return fn


def uses(*names: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def mark(test: Callable[..., None]) -> Callable[..., None]:
        USES[test.__name__] = names
        return test

    return mark


class Arena:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.tasks = A.copy_tasks(root / "tasks")
        self.daemon = start_daemon(
            root / "data", "--attribution", "shared", "--workers", "8", tasks=self.tasks
        )
        self.pubkey = root / "jouled.pub.pinned"  # the data dir is under attack: pin a copy
        shutil.copyfile(self.daemon.pubkey, self.pubkey)
        self.key_sha = A.sha256_file(self.daemon.data_dir / "jouled.key")
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="attack")
        self.futures: dict[str, Future[Any]] = {}
        self.tokens: list[str] = []
        self.paths: list[Path] = []  # host paths a payload might create: removed at the end
        self.extra: list[Daemon] = []
        self._lock = threading.Lock()

    @property
    def target(self) -> str:
        return self.daemon.target

    def token(self) -> str:
        token = A.new_token()
        with self._lock:
            self.tokens.append(token)
        return token

    def task(self, info: A.TaskInfo) -> Path:
        return info.dir(self.tasks)

    def start(self, names: set[str]) -> None:
        light = [n for n in SCENARIOS if n in names and n not in HEAVY]
        for name in light:
            self.futures[name] = self.pool.submit(SCENARIOS[name], self)
        heavy = [n for n in HEAVY if n in names]
        first = list(self.futures.values())
        later: dict[str, Future[Any]] = {n: Future() for n in heavy}

        def run_heavy() -> None:
            for f in first:
                with contextlib.suppress(Exception):
                    f.result()
            for name, fut in later.items():
                try:
                    fut.set_result(SCENARIOS[name](self))
                except BaseException as err:
                    fut.set_exception(err)

        if heavy:
            self.pool.submit(run_heavy)
        self.futures.update(later)

    def result(self, name: str) -> Any:
        return self.futures[name].result(timeout=600)

    def wait_all(self) -> None:
        for f in list(self.futures.values()):
            with contextlib.suppress(Exception):
                f.result(timeout=600)

    def close(self) -> None:
        self.wait_all()
        self.pool.shutdown(wait=True)
        for token in self.tokens:
            A.kill_token(token)
            A.remove_quietly(A.host_files_named(token, [Path("/tmp")], depth=3))
        A.remove_quietly(self.paths)
        for d in [*self.extra, self.daemon]:
            if d.proc.poll() is None:
                try:
                    d.stop(timeout=60)
                except Exception:
                    d.stop(signal.SIGKILL)


@pytest.fixture(scope="module")
def arena(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Arena]:
    selected = {
        item.originalname
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.path == request.path
    }
    names = {s for test in selected for s in USES.get(test, ())}
    a = Arena(tmp_path_factory.mktemp("attack-sandbox"))
    try:
        a.start(names)
        yield a
    finally:
        a.close()


# -- scenarios ------------------------------------------------------------------------------


@scenario
def scenario_recon(a: Arena) -> Outcome:
    """Identity, the signing key (directly and as found from /proc), planting it, host writes."""
    token = a.token()
    data = a.daemon.data_dir
    purelib = Path(sysconfig.get_paths()["purelib"])
    task = a.task(A.LRUCACHE)
    writes = {
        "etc": f"/etc/jbattack-{token}",
        "root": f"/root/jbattack-{token}",
        "home": f"/home/jbattack-{token}",
        "tasks-copy": str(a.tasks / f"jbattack-{token}"),
        "data-dir": str(data / f"jbattack-{token}"),
        "site-packages": str(purelib / f"jbattack-{token}.pth"),  # a comment line only
    }
    plant = task / "before" / f"jbattack-{token}.txt"
    a.paths += [Path(p) for p in writes.values()] + [plant]
    cfg = {
        "token": token,
        "key": str(data / "jouled.key"),
        "plant": str(plant),
        "writes": writes,
        "ledger": str(data / "ledger.duckdb"),
        "megabytes": 50,
    }
    body = A.IDENTITY + A.READ_KEY + A.COPY_KEY + A.WRITES + A.TMP_LEFTOVERS
    patch = A.build_patch(task, append={A.LRUCACHE.library: A.payload(body, cfg)})
    out = submit(a.target, A.LRUCACHE.task_id, patch, token)
    try:
        out.notes["written"] = [p for p in writes.values() if os.path.lexists(p)]
        out.notes["planted"] = plant.exists()
        fetched = a.root / f"fetch-{token}"
        with Client(a.target, timeout_s=60) as client:
            names = client.fetch(A.LRUCACHE.task_id, fetched)
        key = (data / "jouled.key").read_bytes()
        out.notes["fetched_key"] = [n for n in names if key in (fetched / n).read_bytes()]
        out.notes["fetched_token"] = [n for n in names if token in n]
        out.notes["tmp_leftovers"] = [str(p) for p in A.host_files_named(token, [Path("/tmp")], 3)]
        out.notes["key_sha"] = A.sha256_file(data / "jouled.key")
    finally:
        A.remove_quietly([Path(p) for p in writes.values()] + [plant])
        A.remove_quietly(A.host_files_named(token, [Path("/tmp")], depth=3))
    return out


@scenario
def scenario_rewrite(a: Arena) -> tuple[Outcome, Outcome, bool]:
    """Rewrite the pristine tests in the tasks copy, then grade a non-fix."""
    token = a.token()
    task = a.task(A.SEMVER)
    pristine = task / "before" / "tests" / "test_version.py"
    original = pristine.read_bytes()
    cfg = {"token": token, "pristine_test": str(pristine), "neuter": A.NEUTER}
    attack = A.build_patch(
        task, append={A.SEMVER.library: A.payload(A.REWRITE_PRISTINE, cfg)}, scratch=a.root / token
    )
    out = submit(a.target, A.SEMVER.task_id, attack, token)
    unchanged = pristine.read_bytes() == original
    nonfix = A.build_patch(task, append={A.SEMVER.library: "# an honest-looking non-fix\n"})
    later = submit(a.target, A.SEMVER.task_id, nonfix)
    if not unchanged:
        pristine.write_bytes(original)  # our copy; put it back for the other tests
    return out, later, unchanged


@scenario
def scenario_network(a: Arena) -> tuple[Outcome, Outcome, dict[str, Any]]:
    """From the sandbox: the daemon's TCP port, its socket, the outside, Calibrate; then kill it."""
    port = free_port()
    tokens = a.root / "tokens.toml"
    operator = add_token(tokens, "attack-operator", ["operator"], None)
    tcp = start_daemon(
        a.root / "data-tcp",
        "--attribution",
        "shared",
        "--insecure",
        "--tokens",
        str(tokens),
        tasks=a.tasks,
        listen=f"127.0.0.1:{port}",
        client_env={"JB_INSECURE": "1", "JB_TOKEN": operator},
    )
    TCP_TOKENS[tcp.target] = operator
    a.extra.append(tcp)
    host: dict[str, Any] = {
        "calibrations_before": (calibrations(tcp.target), calibrations(a.target)),
    }
    token = a.token()
    cfg = {
        "token": token,
        "port": port,
        "outside": "1.1.1.1",
        "socket": str(a.daemon.data_dir / "jouled.sock"),
    }
    task = a.task(A.LRUCACHE)
    patch = A.build_patch(
        task, append={A.LRUCACHE.library: A.payload(A.NETWORK, cfg)}, scratch=a.root / token
    )
    net = submit(tcp.target, A.LRUCACHE.task_id, patch, token)
    host["calibrations_after"] = (
        calibrations(tcp.target) if serving(tcp.target) else -1,
        calibrations(a.target),
    )
    token = a.token()
    cfg = {"token": token, "daemon_data_dir": str(tcp.data_dir)}
    patch = A.build_patch(
        task, append={A.LRUCACHE.library: A.payload(A.KILL_DAEMON, cfg)}, scratch=a.root / token
    )
    kill = submit(tcp.target, A.LRUCACHE.task_id, patch, token)
    host["tcp_alive"] = tcp.proc.poll() is None and serving(tcp.target)
    host["shared_alive"] = serving(a.target)
    return net, kill, host


@scenario
def scenario_persist(a: Arena) -> tuple[Outcome, Outcome]:
    """A process left behind that reverts later fixes; then a correct fix of the same task."""
    token = a.token()
    task = a.task(A.INTERVAL)
    cfg = {
        "token": token,
        "glob": str(a.daemon.data_dir / "work" / "*" / "tree" / A.INTERVAL.module),
        "buggy": (task / "before" / A.INTERVAL.module).read_text(),
        "seconds": 120,
    }
    patch = A.build_patch(
        task, append={A.INTERVAL.library: A.payload(A.PERSIST, cfg)}, scratch=a.root / token
    )
    try:
        out = submit(a.target, A.INTERVAL.task_id, patch, token)
        gone = A.wait_until(lambda: not A.procs_with(token), GRACE_S)
        out.notes["survivors"] = [] if gone else A.procs_with(token)
        fix = A.build_patch(task, fix=True, scratch=a.root / (token + "-fix"))
        later = submit(a.target, A.INTERVAL.task_id, fix)
    finally:
        A.kill_token(token)
    return out, later


@scenario
def scenario_peek(a: Arena) -> tuple[Outcome, Outcome, str]:
    """A victim attempt waits with a secret in its tree while an attacker looks for it."""
    task = a.task(A.LRUCACHE)
    victim_token, attacker_token = a.token(), a.token()
    secret = f"secret-{A.new_token()}"
    secret_name = f"jbattack-secret-{victim_token}.txt"
    victim_patch = A.build_patch(
        task,
        append={
            A.LRUCACHE.library: A.payload(A.VICTIM, {"token": victim_token, "seconds": 15}),
        },
        files={secret_name: secret + "\n"},
        scratch=a.root / victim_token,
    )
    cfg = {
        "token": attacker_token,
        "work": str(a.daemon.data_dir / "work"),
        "secret_name": secret_name,
        "seconds": 12,
    }
    attacker_patch = A.build_patch(
        task, append={A.LRUCACHE.library: A.payload(A.PEEK, cfg)}, scratch=a.root / attacker_token
    )
    with ThreadPoolExecutor(max_workers=2) as pool:
        victim = pool.submit(submit, a.target, A.LRUCACHE.task_id, victim_patch, victim_token)
        # The attacker goes in only once the victim's tree holds the secret on this host,
        # so its looking cannot miss the secret merely by being early.
        seeded = A.wait_until(
            lambda: any((a.daemon.data_dir / "work").glob(f"attempt-*/tree/{secret_name}")),
            GRACE_S,
        )
        assert seeded, "the victim's tree never held its secret"
        attacker = submit(a.target, A.LRUCACHE.task_id, attacker_patch, attacker_token)
        return victim.result(), attacker, secret


@scenario
def scenario_forkbomb(a: Arena) -> Outcome:
    token = a.token()
    task = a.task(A.LRUCACHE)
    cfg = {"token": token, "forks": 3000, "seconds": 30}
    patch = A.build_patch(
        task, append={A.LRUCACHE.library: A.payload(A.FORK_BOMB, cfg)}, scratch=a.root / token
    )
    try:
        out = submit(a.target, A.LRUCACHE.task_id, patch, token)
        gone = A.wait_until(lambda: not A.procs_with(token), GRACE_S)
        out.notes["survivors"] = 0 if gone else len(A.procs_with(token))
        out.notes["alive"] = serving(a.target)
    finally:
        A.kill_token(token)
    return out


MEMORY_PROCS, MEMORY_EACH = 8, 1 << 30


@scenario
def scenario_memory(a: Arena) -> Outcome | None:
    if A.mem_available() < MEMORY_PROCS * MEMORY_EACH * 3 // 2:
        return None  # not enough memory on this host to try safely
    token = a.token()
    task = a.task(A.LRUCACHE)
    cfg = {"token": token, "procs": MEMORY_PROCS, "bytes_each": MEMORY_EACH}
    patch = A.build_patch(
        task, append={A.LRUCACHE.library: A.payload(A.MEMORY, cfg)}, scratch=a.root / token
    )
    out = submit(a.target, A.LRUCACHE.task_id, patch, token)
    out.notes["alive"] = serving(a.target)
    return out


# -- helpers for the assertions -------------------------------------------------------------


def ran(out: Outcome, *probes: str) -> dict[str, str]:
    """The markers, after checking the payload ran, did not crash and reported `probes`."""
    assert out.receipt is not None, f"the attempt got no receipt: {out.error}"
    assert out.status in TERMINAL, out.status
    found = out.found
    assert "ran" in found, f"the payload did not run (no marker)\n{out.why()}"
    assert "crash" not in found, f"the payload crashed: {found['crash']}\n{out.why()}"
    missing = [p for p in probes if p not in found]
    assert not missing, f"the payload never reported {missing}\n{out.why()}"
    return found


# -- the tests --------------------------------------------------------------------------------


@uses("recon")
def test_the_payload_runs_unprivileged_without_capabilities(arena: Arena) -> None:
    out: Outcome = arena.result("recon")
    found = ran(out, "identity")
    assert A.verdict(found["identity"]) == "OK", out.why()
    fields = dict(part.split("=", 1) for part in A.detail(found["identity"]).split(";"))
    uids = fields["uid"].split(",")
    assert "0" not in uids, f"the payload runs as root: {found['identity']}"
    assert int(fields["capeff"], 16) == 0, f"the payload has capabilities: {found['identity']}"
    assert fields["nnp"] == "1", f"no_new_privs is not set: {found['identity']}"


@uses("recon")
def test_the_signing_key_cannot_be_read(arena: Arena) -> None:
    out: Outcome = arena.result("recon")
    found = ran(out, "read-key-direct", "ancestors")
    read = A.succeeded(found, "read-key")
    assert not read, f"the payload read the signing key via {sorted(read)}\n{out.why()}"
    assert arena.key_sha not in out.output
    assert out.notes["key_sha"] == arena.key_sha


@uses("recon")
def test_a_stolen_key_cannot_be_planted_in_a_served_task(arena: Arena) -> None:
    out: Outcome = arena.result("recon")
    found = ran(out, "copy-key")
    assert A.verdict(found["copy-key"]) != "OK", f"planted: {found['copy-key']}\n{out.why()}"
    assert not out.notes["planted"], "the payload wrote into the task's pristine tree"
    assert not out.notes["fetched_key"], f"fetch served key bytes: {out.notes['fetched_key']}"
    assert not out.notes["fetched_token"], f"fetch served {out.notes['fetched_token']}"


@uses("recon")
def test_host_paths_are_not_writable(arena: Arena, tmp_path: Path) -> None:
    out: Outcome = arena.result("recon")
    probes = ["write-etc", "write-root", "write-home", "write-tasks-copy", "write-data-dir"]
    found = ran(out, *probes, "write-site-packages", "write-ledger")
    wrote = A.succeeded(found, "write-")
    assert not wrote, f"the payload could write: {wrote}\n{out.why()}"
    assert not out.notes["written"], f"left on the host: {out.notes['written']}"
    export = tmp_path / "ledger.jsonl"
    done = arena.daemon.client("export", "--out", str(export))
    assert done.returncode == 0, done.stderr
    ok = arena.daemon.client("verify", str(export), "--pubkey", str(arena.pubkey), "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr


@uses("recon")
def test_tmp_and_home_files_do_not_reach_the_host(arena: Arena) -> None:
    out: Outcome = arena.result("recon")
    ran(out, "tmp-write-tmp", "tmp-write-home")
    assert not out.notes["tmp_leftovers"], f"left in /tmp: {out.notes['tmp_leftovers']}"


@uses("rewrite")
def test_the_pristine_tests_cannot_be_rewritten(arena: Arena) -> None:
    out, later, unchanged = arena.result("rewrite")
    found = ran(out, "rewrite-tests")
    assert A.verdict(found["rewrite-tests"]) != "OK", out.why()
    assert unchanged, "the task's pristine test file on the host changed"
    assert later.status == "unresolved", f"a later non-fix is {later.status}"


@uses("network")
def test_the_network_and_the_daemon_are_out_of_reach(arena: Arena) -> None:
    net, _, host = arena.result("network")
    found = ran(
        net,
        "net-tcp-daemon",
        "net-calibrate-tcp",
        "net-outside",
        "net-unix-daemon",
        "net-calibrate-unix",
        "net-setns",
    )
    reached = A.succeeded(found, "net-")
    assert not reached, f"the payload reached {reached}\n{net.why()}"
    assert host["calibrations_after"] == host["calibrations_before"], (
        f"a calibration entry was appended from the sandbox: {host}"
    )


@uses("network")
def test_the_payload_cannot_kill_the_daemon(arena: Arena) -> None:
    _, kill, host = arena.result("network")
    assert host["tcp_alive"], f"the payload killed the daemon ({kill.error})"
    assert host["shared_alive"]
    found = ran(kill, "kill-daemon")
    assert A.verdict(found["kill-daemon"]) != "OK", kill.why()


@uses("persist")
def test_no_process_outlives_its_attempt(arena: Arena) -> None:
    out, _ = arena.result("persist")
    ran(out, "persist")
    assert not out.notes["survivors"], (
        f"left running on the host after the attempt: pids {out.notes['survivors']}\n{out.why()}"
    )


@uses("persist")
def test_a_leftover_process_cannot_revert_a_later_fix(arena: Arena) -> None:
    out, later = arena.result("persist")
    ran(out, "persist")
    assert later.status == "resolved", f"a correct fix after the attack is {later.status}"


@uses("peek")
def test_another_attempts_tree_is_not_visible(arena: Arena) -> None:
    victim, attacker, secret = arena.result("peek")
    ran(victim, "victim")
    found = ran(attacker, "list-work", "other-tree")
    assert A.verdict(found["other-tree"]) != "OK", attacker.why()
    assert A.verdict(found["list-work"]) != "OK", f"lists the work dir: {found['list-work']}"
    assert secret not in attacker.output


@uses("forkbomb")
def test_a_fork_bomb_is_bounded(arena: Arena) -> None:
    out: Outcome = arena.result("forkbomb")
    found = ran(out, "forkbomb")
    assert out.notes["alive"], "the daemon stopped serving"
    assert out.status != "resolved"
    assert A.verdict(found["forkbomb"]) == "OK", out.why()
    stats = dict(part.split("=", 1) for part in A.detail(found["forkbomb"]).split(";"))
    got, asked = (int(n) for n in stats["got"].split("/"))
    assert stats["stop"] != "time", f"forking too slow here to reach a cap: {found['forkbomb']}"
    assert got < asked // 2, f"the payload forked {got} of {asked} processes"
    assert not out.notes["survivors"], f"{out.notes['survivors']} forks outlived the attempt"


@uses("memory")
def test_aggregate_memory_is_bounded(arena: Arena) -> None:
    out: Outcome | None = arena.result("memory")
    if out is None:
        pytest.skip("this host has too little memory to try the attack safely")
    assert out.notes["alive"], "the daemon stopped serving"
    found = ran(out, "memory-start")
    assert out.status != "resolved"
    result = found.get("memory", "killed")  # no report: the sandbox was killed, as it should
    if A.detail(result).startswith("skipped"):
        pytest.skip(f"the payload found too little memory to try: {result}")
    held = re.search(r"held=(\d+)", A.detail(result))
    assert held is None or int(held.group(1)) < MEMORY_PROCS, (
        f"{MEMORY_PROCS} processes held {MEMORY_EACH >> 30} GiB each at once\n{out.why()}"
    )


@uses(*SCENARIOS)
def test_a_correct_fix_still_resolves(arena: Arena) -> None:
    arena.wait_all()
    patch = A.build_patch(arena.task(A.LRUCACHE), fix=True, scratch=arena.root / "control")
    out = submit(arena.target, A.LRUCACHE.task_id, patch)
    assert out.status == "resolved", out.why()
