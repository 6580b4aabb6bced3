"""What a bwrap sandbox shows: its namespaces and mounts, as bwrap's argv.

The system's read-only directories, a few files of /etc, the daemon's
interpreter installation (read-only) and the workdir, mounted read-write at
`/testbed`; `/tmp` (and $HOME inside it) a private, size-bounded tmpfs; `/proc`
the sandbox's own and `/dev` a minimal one. Nothing that would show a secret
path (the data dir, the task trees) is bound.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

from jouled.errors import SandboxError

# Where a run sees its workdir and the read-only files the daemon gives it.
SANDBOX_WORKDIR = "/testbed"
SANDBOX_RO = "/run/jouled"
SANDBOX_TMP = "/tmp"


def bwrap_argv(
    bwrap_path: str,
    *,
    root: bool,
    blocked: str,
    secret: Sequence[str],
    workdir: Path,
    tmp_bytes: int,
    ro_dir: Path | None,
    overlays: Mapping[str, Path],
    network: bool = False,
    read_only: Sequence[Path] = (),
) -> list[str]:
    """bwrap's arguments, up to the launcher, for one run on `workdir`.

    `root`: the daemon is root (no user namespace); `blocked`: how nested user
    namespaces are kept out (see `Sandbox`'s isolation record); a read-only
    bind that would show one of the `secret` paths is refused.
    """
    args = [bwrap_path, "--die-with-parent", "--new-session"]
    if root:
        # No user namespace: its ids would map back to root outside. The
        # launcher drops to the run's uid, which clears these two as well.
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-uts"]
        args += [] if network else ["--unshare-net"]
        args += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-all", "--unshare-user"]
        args += ["--share-net"] if network else []
        args += ["--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"]
    if blocked == "disable-userns":
        args += ["--disable-userns"]
    elif blocked == "seccomp":
        args += ["--seccomp", "{seccomp}"]
    args += ["--hostname", "jouled-sandbox", "--info-fd", "{info}", "--block-fd", "{block}"]
    args += _system_binds()
    bound: set[str] = {*_SYSTEM_DIRS, "/etc"}
    made: set[str] = {"/"}
    if network:
        for name in ("resolv.conf", "gai.conf"):
            real = os.path.realpath(f"/etc/{name}")
            if os.path.isfile(real):
                args += ["--ro-bind", real, f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", SANDBOX_TMP]
    args += ["--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/dev/shm"]
    made.update({SANDBOX_TMP, "/dev/shm"})
    # After the tmpfs mounts, so that an installation under /tmp is not hidden by them.
    extra = [os.path.normpath(str(p)) for p in read_only if os.path.exists(p)]
    for path in [*interpreter_paths(), *extra]:
        args += _bind_read_only(path, made, bound, secret)
    args += ["--bind", str(workdir), SANDBOX_WORKDIR]
    if ro_dir is not None:
        args += _parents(SANDBOX_RO, made, bound)
        args += ["--ro-bind", str(ro_dir), SANDBOX_RO]
    for rel, source in sorted(overlays.items()):
        if rel.startswith("/") or ".." in rel.split("/"):
            raise SandboxError(f"overlay path {rel!r} is not relative to the workdir")
        args += ["--ro-bind", str(source), f"{SANDBOX_WORKDIR}/{rel}"]
    # The launcher enters the workdir once it runs as the run's uid (the owner).
    args += ["--chdir", "/", "--"]
    return args


def _bind_read_only(path: str, made: set[str], bound: set[str], secret: Sequence[str]) -> list[str]:
    refuse_secret(path, secret)
    if any(_within(path, b) for b in bound):
        return []
    bound.add(path)
    return [*_parents(path, made, bound), "--ro-bind", path, path]


def refuse_secret(path: str, secret: Sequence[str]) -> None:
    """Refuse `path` when showing it would show one of the `secret` paths inside."""
    real = os.path.realpath(path)
    for hidden in secret:
        if _within(hidden, real):
            raise SandboxError(
                f"the sandbox would show {hidden} read-only inside {path}",
                hint="keep the data dir and task dirs outside the interpreter's installation",
            )


def interpreter_paths() -> list[str]:
    """What a command needs to run the daemon's interpreter and its packages."""
    paths = {
        os.path.realpath(sys.executable),
        os.path.dirname(os.path.abspath(sys.executable)),
        sys.prefix,
        sys.base_prefix,
    }
    paths.update(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib"))
    paths.update(sysconfig.get_paths()[key] for key in ("platlib",))
    # Only the outermost: nested binds of the same files are redundant.
    ordered = sorted({os.path.normpath(p) for p in paths if p and os.path.exists(p)})
    kept: list[str] = []
    for path in ordered:
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs need of /etc; the rest of it (shadow, credentials, service
# configuration) stays out.
_ETC_FILES = (
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "alternatives",
    "mime.types",
    "ssl/certs",
    "ca-certificates",
    "os-release",
)


def _system_binds() -> list[str]:
    args: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in _ETC_FILES:
        path = f"/etc/{name}"
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def _parents(path: str, made: set[str], bound: set[str]) -> list[str]:
    """Create `path`'s missing ancestors world-searchable (bwrap would make them 0700).

    Skips ancestors made already or lying inside a directory bound before.
    """
    args: list[str] = []
    for parent in reversed(Path(path).parents):
        name = str(parent)
        if name in made or any(_within(name, b) for b in bound):
            continue
        args += ["--perms", "0755", "--dir", name]
        made.add(name)
    return args


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
