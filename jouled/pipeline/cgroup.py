"""Aggregate memory and process limits for sandbox runs, where the host delegates a cgroup.

RLIMIT_AS bounds each process alone, so eight processes may each take the
per-process bound; RLIMIT_NPROC counts per uid. A cgroup bounds the run as a
whole: every process the sandbox starts is in it, with `memory` (swap
included where the host accounts it) and `pids` limits.

The daemon uses the cgroup it runs in:
- cgroup v1 (a `memory` and a `pids` hierarchy): a child group per slot in
  each, where the daemon may create them;
- cgroup v2: a child group per slot, where the daemon's group is writable and
  offers `memory` and `pids` (a delegated group, e.g. systemd `Delegate=yes`).
  Processes may not sit in a v2 group whose children use controllers, so
  the daemon first moves itself into a `daemon` leaf of its own group.
Each group also counts the CPU time of every process that was in it (v1: a
`cpuacct` group beside them, where the host mounts that hierarchy; v2:
`cpu.stat`): the run's own CPU, which bubblewrap's process tree hides from
the daemon's `wait4`.
Groups are made once per slot and reused; each daemon names its own
(`jouled.pipeline.instance`), so two daemons on one host never share one.
Where none of this works the sandbox falls back to rlimits, and every result
records which applied.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("jouled")

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_paths(proc_cgroup: str) -> dict[str, str]:
    """controller (or "" for the v2 unified hierarchy) -> this process's group path."""
    paths: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            paths[""] = path
        for name in controllers.split(","):
            if name:
                paths[name] = path
    return paths


@dataclass(frozen=True)
class Group:
    """One slot's group(s): where the sandbox's pid 1 goes and its limits are written."""

    kind: str  # "v1" or "v2"
    dirs: tuple[Path, ...]  # v1: memory, pids, then cpuacct where there is one; v2: the group

    def limit(self, memory_bytes: int | None, processes: int | None) -> None:
        if self.kind == "v2":
            group = self.dirs[0]
            _write(group / "memory.max", str(memory_bytes) if memory_bytes else "max")
            if (group / "memory.swap.max").exists():
                _write(group / "memory.swap.max", "0")
            _write(group / "pids.max", str(processes) if processes else "max")
            return
        memory, pids = self.dirs[:2]
        value = str(memory_bytes) if memory_bytes else "-1"
        swap = memory / "memory.memsw.limit_in_bytes"
        # memsw must stay >= the memory limit: lower in the order that keeps it so.
        if swap.exists():
            with contextlib.suppress(OSError):
                _write(swap, "-1")
        _write(memory / "memory.limit_in_bytes", value)
        if swap.exists():
            _write(swap, value)
        with contextlib.suppress(OSError):
            _write(memory / "memory.max_usage_in_bytes", "0")  # reset the peak
        _write(pids / "pids.max", str(processes) if processes else "max")

    def add(self, pid: int) -> None:
        for group in self.dirs:
            _write(group / "cgroup.procs", str(pid))

    def cpu_ns(self) -> int | None:
        """CPU time used so far by every process that has been in the group (None: the
        host does not account it here). Grows for the group's life: take differences."""
        try:
            if self.kind == "v2":
                for line in (self.dirs[0] / "cpu.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) * 1000
                return None
            if len(self.dirs) < 3:
                return None
            return int((self.dirs[2] / "cpuacct.usage").read_text())
        except (OSError, ValueError):
            return None

    def peak_memory(self) -> int | None:
        name = "memory.peak" if self.kind == "v2" else "memory.max_usage_in_bytes"
        try:
            return int((self.dirs[0] / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def oom_kills(self) -> int:
        """How many processes the kernel has killed in this group for memory, so far."""
        name = "memory.events" if self.kind == "v2" else "memory.oom_control"
        try:
            for line in (self.dirs[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


class Groups:
    """The slots' groups under the daemon's own cgroup, or nothing where none can be made."""

    def __init__(self, root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> None:
        self.root = root
        self._proc = proc_cgroup
        self._lock = threading.Lock()
        self._made: dict[str, Group] = {}
        self._base: tuple[str, tuple[Path, ...]] | None = None
        self.why_not = ""
        self._probed = False

    @property
    def kind(self) -> str:
        self._probe()
        return self._base[0] if self._base else ""

    def _probe(self) -> None:
        with self._lock:
            if self._probed:
                return
            self._probed = True
            try:
                text = (
                    self._proc if self._proc is not None else Path("/proc/self/cgroup").read_text()
                )
            except OSError as err:
                self.why_not = f"cannot read /proc/self/cgroup: {err}"
                return
            own = _own_paths(text)
            v1 = self._v1(own)
            if v1 is not None:
                self._base = ("v1", v1)
                return
            v2 = self._v2(own)
            if v2 is not None:
                self._base = ("v2", (v2,))

    def _v1(self, own: dict[str, str]) -> tuple[Path, ...] | None:
        if "memory" not in own or "pids" not in own:
            return None
        dirs = (
            self.root / "memory" / own["memory"].lstrip("/"),
            self.root / "pids" / own["pids"].lstrip("/"),
        )
        if all(d.is_dir() and os.access(d, os.W_OK) for d in dirs):
            cpu = self.root / "cpuacct" / own.get("cpuacct", "").lstrip("/")
            if "cpuacct" in own and cpu.is_dir() and os.access(cpu, os.W_OK):
                return (*dirs, cpu)
            return dirs
        self.why_not = "the cgroup v1 memory and pids groups of the daemon are not writable"
        return None

    def _v2(self, own: dict[str, str]) -> Path | None:
        if "" not in own:
            return None
        group = self.root / own[""].lstrip("/")
        try:
            available = (group / "cgroup.controllers").read_text().split()
        except OSError:
            self.why_not = self.why_not or "no cgroup v2 group to use"
            return None
        if not {"memory", "pids"} <= set(available) or not os.access(group, os.W_OK):
            self.why_not = (
                f"the daemon's cgroup {group} is not delegated with memory and pids "
                "(systemd: Delegate=yes)"
            )
            return None
        try:
            enabled = (group / "cgroup.subtree_control").read_text().split()
            if not {"memory", "pids"} <= set(enabled):
                leaf = group / "daemon"
                leaf.mkdir(exist_ok=True)
                _write(leaf / "cgroup.procs", str(os.getpid()))
                _write(group / "cgroup.subtree_control", "+memory +pids")
        except OSError as err:
            self.why_not = f"cannot enable memory and pids in {group}: {err}"
            return None
        return group

    @contextlib.contextmanager
    def slot(self, index: int, name: str = "") -> Iterator[Group | None]:
        """Slot `index`'s group, named `name` (one daemon's own), made on first use.

        None where the host gives none.
        """
        self._probe()
        if self._base is None:
            yield None
            return
        name = name or f"jouled-run-{index}"
        with self._lock:
            group = self._made.get(name)
            if group is None:
                kind, bases = self._base
                dirs = tuple(base / name for base in bases)
                try:
                    for d in dirs:
                        d.mkdir(exist_ok=True)
                except OSError as err:
                    log.warning("cannot make cgroup %s: %s", dirs, err)
                    self.why_not = f"cannot make a cgroup under {bases[0]}: {err}"
                    self._base = None
                    group = None
                else:
                    group = Group(kind, dirs)
                    self._made[name] = group
        yield group

    def remove(self, names: Iterable[str]) -> None:
        """Remove the groups named (made by this process); a group still in use stays."""
        with self._lock:
            for name in names:
                group = self._made.pop(name, None)
                if group is None:
                    continue
                for d in group.dirs:
                    with contextlib.suppress(OSError):
                        d.rmdir()


_groups = Groups()


def groups() -> Groups:
    return _groups
