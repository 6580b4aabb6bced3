"""Agent-opened metered windows: the bookkeeping behind signed `op` entries.

An agent running on the metered host asks the daemon to meter one of its own
operations (an inference call, a tool call, a whole episode). The window is a
pair of meter snapshots like any phase's; what the figure covers is decided
when it opens and said in its attribution, never more precisely than the
counter allows:

- `whole-host`: under the `exclusive` policy, the window took the daemon's
  host lock (it was free, and no attempt was queued or running, when the
  window opened). No graded phase ran inside it; the figure is everything the
  host drew, the agent's work and whatever else ran on the host. Graded phases
  wait until the window closes, at most the maximum duration; while any
  attempt waits, new windows do not take the host, so the wait ends there.
- `cpu-share`: the host was shared (the `shared` policy, or the lock was held
  by a graded phase or an attempt was waiting for it) and the daemon knows the
  caller's process from the Unix socket's peer credentials: the window's
  energy times the share of the host's busy CPU time that the process tree
  used.
- `unattributed`: the host was shared and the daemon cannot see the caller's
  process (a TCP caller): the figures are the whole host's over the window,
  flagged `reliable: false`.

A window ends when its holder closes it (`closed`), when it stays open past
the maximum duration (`deadline`), when the call that opened it ends before it
is closed (`disconnect`) or when the daemon stops (`shutdown`). Every end is
signed; all but `closed` also carry `abandoned: true`. A window open when the
daemon crashes leaves no entry: nothing about it was signed.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from jouled import __version__, limits
from jouled.documents.bodies import OpBody
from jouled.documents.parts import EnergyWindow
from jouled.documents.sent import OpReceipt
from jouled.errors import BusyError, DeniedError, NotFoundError, UsageError
from jouled.meter.base import Snapshot
from jouled.meter.metering import Metering, host_busy_cpu_ns
from jouled.meter.window import PhaseEnergy, phase_energy

log = logging.getLogger("jouled")

WHOLE_HOST = "whole-host"
CPU_SHARE = "cpu-share"
UNATTRIBUTED = "unattributed"

CLOSED, DEADLINE, DISCONNECT, SHUTDOWN = "closed", "deadline", "disconnect", "shutdown"

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# -- process trees --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Proc:
    ppid: int
    cpu_ticks: int  # utime + stime + cutime + cstime: its own and its reaped children's
    start: int  # start time in ticks since boot: tells a reused pid apart


def _read_stat(pid: int, proc: Path) -> _Proc | None:
    try:
        raw = (proc / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name is in parentheses and may hold anything, spaces and ")" included.
    rest = raw[raw.rfind(")") + 2 :].split()
    try:
        return _Proc(
            ppid=int(rest[1]),
            cpu_ticks=sum(int(v) for v in rest[11:15]),
            start=int(rest[19]),
        )
    except (IndexError, ValueError):
        return None


def process_uid(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The real uid of a running process, or None when it is gone."""
    try:
        for line in (proc / str(pid) / "status").read_text(encoding="ascii").splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def tree_cpu_ns(root: int, proc: Path = Path("/proc")) -> tuple[int, int] | None:
    """CPU time used so far by `root` and every live descendant, and root's start time.

    A descendant that exited and was reaped inside the tree is in its parent's
    cutime/cstime, so it still counts; one reparented outside the tree (its
    parent exited first) is lost. None when `root` is gone.
    """
    procs: dict[int, _Proc] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return None
    for name in names:
        if name.isdigit():
            p = _read_stat(int(name), proc)
            if p is not None:
                procs[int(name)] = p
    if root not in procs:
        return None
    children: dict[int, list[int]] = {}
    for pid, p in procs.items():
        children.setdefault(p.ppid, []).append(pid)
    ticks, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        ticks += procs[pid].cpu_ticks
        todo.extend(children.get(pid, ()))
    return ticks * 1_000_000_000 // _CLK_TCK, procs[root].start


# -- windows --------------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowRequest:
    label: str
    agent: str
    task_id: str = ""
    run_id: str = ""
    rollout: int = 0
    pid: int = 0  # 0: the caller's own process, when the daemon can see it


@dataclass
class OpWindow:
    id: str
    request: WindowRequest
    attribution: str
    start: Snapshot
    deadline_ns: int
    pid: int | None  # the root of the metered process tree (cpu-share)
    pid_start: int | None = None
    tree_cpu_start: int | None = None
    host_cpu_start: int | None = None
    holds_host: bool = False
    closed: threading.Event = field(default_factory=threading.Event)
    receipt: OpReceipt | None = None
    error: BaseException | None = None
    _ending: bool = False


class OpWindows:
    """Open windows, bounded per agent and overall, each closed exactly once.

    `sign(body)` appends the `op` entry and returns its receipt; it is the
    daemon's, so this module never touches the ledger.
    """

    def __init__(
        self,
        metering: Metering,
        sign: Callable[[dict[str, Any]], OpReceipt],
        *,
        max_open: int,
        max_per_agent: int,
        max_s: float,
        proc: Path = Path("/proc"),
        grading: Callable[[], bool] = lambda: False,
    ) -> None:
        self.metering = metering
        self._grading = grading  # whether any attempt is queued or running
        self._sign = sign
        self.max_open = max_open
        self.max_per_agent = max_per_agent
        self.max_s = max_s
        self._proc = proc
        self._open: dict[str, OpWindow] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._reaper = threading.Thread(target=self._reap, name="op-windows", daemon=True)
        self._reaper.start()

    # -- opening --------------------------------------------------------------------------

    def open(self, req: WindowRequest, *, peer_pid: int | None, peer_uid: int | None) -> OpWindow:
        """Open a window; `peer_pid`/`peer_uid` are the kernel's (None: a TCP caller)."""
        limits.name("label", req.label)
        limits.name("agent", req.agent)
        limits.name("run id", req.run_id, empty=True)
        limits.rollout_index(req.rollout)
        pid = self._tree_root(req.pid, peer_pid, peer_uid)
        with self._cond:
            if self._stopped:
                raise BusyError("the daemon is stopping", hint="retry once it is back")
            mine = sum(w.request.agent == req.agent for w in self._open.values())
            if mine >= self.max_per_agent:
                raise BusyError(
                    f"{req.agent} already has {mine} op windows open; the limit is "
                    f"{self.max_per_agent} per agent",
                    hint="close a window before opening another",
                )
            if len(self._open) >= self.max_open:
                raise BusyError(
                    f"{len(self._open)} op windows are open on this daemon; the limit is "
                    f"{self.max_open}",
                    hint="retry once other windows have closed",
                )
            window = self._start(req, pid)
            self._open[window.id] = window
            self._cond.notify_all()
        log.info(
            "op window %s opened by %s (%s, %s)",
            window.id,
            req.agent,
            req.label,
            window.attribution,
        )
        return window

    def _tree_root(self, requested: int, peer_pid: int | None, peer_uid: int | None) -> int | None:
        if requested < 0:
            raise UsageError(f"pid {requested} is out of range")
        if not requested:
            return peer_pid
        if peer_pid is None or peer_uid is None:
            raise UsageError(
                f"pid {requested}: over TCP the daemon cannot see the caller's processes, so it "
                "cannot check that this one is yours",
                hint="leave the pid out (the window is then whole-host or unattributed), or "
                "open the window over the daemon's Unix socket",
            )
        uid = process_uid(requested, self._proc)
        if uid is None:
            raise NotFoundError(f"no process {requested} runs on the daemon's host")
        if uid != peer_uid and peer_uid != 0:
            raise DeniedError(
                f"process {requested} belongs to uid {uid}, not to the caller (uid {peer_uid})",
                hint="meter a process of your own",
            )
        return requested

    def _start(self, req: WindowRequest, pid: int | None) -> OpWindow:
        holds = False
        if self.metering.policy == "exclusive" and not self._grading():
            # The lock every metered phase holds under the exclusive policy: taken only
            # when free and no attempt waits to be graded, so opening never waits behind a
            # graded phase and grading waits for at most the window open when it arrived.
            # Others waiting are told how long it may last, not whose it is.
            holds = self.metering.take_host(f"an agent's op window, open at most {self.max_s:g} s")
        attribution = WHOLE_HOST if holds else (CPU_SHARE if pid is not None else UNATTRIBUTED)
        window = OpWindow(
            id=secrets.token_hex(8),
            request=req,
            attribution=attribution,
            start=self.metering.meter.snapshot(),
            deadline_ns=time.monotonic_ns() + int(self.max_s * 1e9),
            pid=pid if attribution == CPU_SHARE else None,
            holds_host=holds,
            # Whatever the attribution: a counter that stands still while the host
            # was busy is frozen (`phase_energy`'s busy_ns).
            host_cpu_start=host_busy_cpu_ns(),
        )
        if attribution == CPU_SHARE:
            assert pid is not None
            tree = tree_cpu_ns(pid, self._proc)
            if tree is not None:
                window.tree_cpu_start, window.pid_start = tree
        return window

    # -- closing --------------------------------------------------------------------------

    def get(self, window_id: str, agent: str | None) -> OpWindow:
        """An open window of `agent` (None: any agent's, for an operator)."""
        with self._cond:
            window = self._open.get(window_id)
        if window is None or (agent is not None and window.request.agent != agent):
            # Another agent's window is as unknown to the caller as a closed one.
            raise NotFoundError(
                f"no open op window {window_id[:40]!r}" + ("" if agent is None else f" of {agent}"),
                hint="a window is closed once: by its holder, or by the daemon when it outlives "
                "its maximum duration or its call",
            )
        return window

    def close(self, window_id: str, agent: str | None) -> OpReceipt:
        return self._end(self.get(window_id, agent), CLOSED)

    def abandon(self, window: OpWindow, end: str) -> None:
        """End a window its holder did not close (no-op once it is closed)."""
        try:
            self._end(window, end)
        except NotFoundError:
            pass
        except Exception:
            log.exception("cannot sign the end of op window %s", window.id)

    def holds_host(self, agent: str) -> OpWindow | None:
        with self._cond:
            return next(
                (w for w in self._open.values() if w.holds_host and w.request.agent == agent),
                None,
            )

    def _end(self, window: OpWindow, end: str) -> OpReceipt:
        with self._cond:
            if window._ending or window.id not in self._open:
                raise NotFoundError(f"op window {window.id} is already closed")
            window._ending = True
        try:
            end_snap = self.metering.meter.snapshot()
            energy = self._energy(window, end_snap)
        finally:
            if window.holds_host:
                self.metering.give_host()
        req = window.request
        body = OpBody(
            window_id=window.id,
            label=req.label,
            agent=req.agent,
            task_id=req.task_id,
            run_id=req.run_id,
            rollout=req.rollout,
            energy=cast(EnergyWindow, energy.to_wire()),
            end=end,
            abandoned=end != CLOSED,
            version=__version__,
        ).to_dict()
        try:
            window.receipt = self._sign(body)
        except BaseException as err:
            window.error = err
            raise
        finally:
            with self._cond:
                self._open.pop(window.id, None)
                self._cond.notify_all()
            window.closed.set()
        log.info("op window %s ended (%s): entry %s", window.id, end, window.receipt.seq)
        return window.receipt

    def _energy(self, window: OpWindow, end: Snapshot) -> PhaseEnergy:
        m = self.metering
        share: float | None = None
        reasons: list[str] = []
        host_end = host_busy_cpu_ns()
        busy_ns = (
            host_end - window.host_cpu_start
            if host_end is not None and window.host_cpu_start is not None
            else None
        )
        if window.attribution == CPU_SHARE:
            assert window.pid is not None
            tree = tree_cpu_ns(window.pid, self._proc)
            if (
                tree is None
                or window.tree_cpu_start is None
                or tree[1] != window.pid_start
                or window.host_cpu_start is None
                or host_end is None
            ):
                share = 0.0
                reasons.append(
                    f"process {window.pid} was gone before the window closed: its CPU "
                    "time is not known, so the share is a lower bound"
                )
            else:
                busy = host_end - window.host_cpu_start
                share = (tree[0] - window.tree_cpu_start) / busy if busy > 0 else 0.0
        energy = phase_energy(
            m.meter.source,
            m.meter.domains(),
            window.start,
            end,
            m.calibration,
            share=share,
            busy_ns=busy_ns,
        )
        if window.attribution == UNATTRIBUTED:
            reasons.append(
                "the host was shared and the daemon cannot see the caller's processes: "
                "the figures are the whole host's"
            )
        reliable = energy.reliable and not reasons
        return replace(
            energy,
            attribution=window.attribution,
            reliable=reliable,
            reasons=(*energy.reasons, *reasons),
        )

    # -- deadlines and shutdown -----------------------------------------------------------

    def _reap(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic_ns()
                due = [w for w in self._open.values() if w.deadline_ns <= now and not w._ending]
                if not due:
                    nxt = min((w.deadline_ns for w in self._open.values()), default=None)
                    timeout = None if nxt is None else max(0.0, (nxt - now) / 1e9)
                    self._cond.wait(timeout)
                    continue
            for window in due:
                log.warning("op window %s outlived its %.0f s maximum", window.id, self.max_s)
                self.abandon(window, DEADLINE)

    def close_all(self) -> None:
        """Sign every open window as abandoned (the daemon is stopping)."""
        with self._cond:
            self._stopped = True
            left = list(self._open.values())
            self._cond.notify_all()
        for window in left:
            self.abandon(window, SHUTDOWN)
        self._reaper.join(timeout=5)

    def __len__(self) -> int:
        with self._cond:
            return len(self._open)
