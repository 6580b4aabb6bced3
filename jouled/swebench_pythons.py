"""Finding the interpreter an environment of a given Python version is built from.

Never assumed: every candidate is run and must say it is that version. Where
one is looked for, in order:

1. a `--pythons FILE` map (`3.6 = /opt/python3.6/bin/python3.6`, one a line,
   `#` comments);
2. `python<version>` on PATH, unless it is a pyenv shim (a shim runs
   whatever pyenv selects for the directory it runs in, which in the sandbox
   is nothing): its real binary is found under `$(pyenv root)/versions`
   instead;
3. pyenv's installed versions (`$PYENV_ROOT`, else `pyenv root`, else
   `~/.pyenv`): the newest `<version>.N` with a `bin/python<version>`;
4. uv-managed interpreters (`$UV_PYTHON_INSTALL_DIR`, else
   `~/.local/share/uv/python`): `cpython-<version>.N-*/bin/python<version>`;
5. conda: the base and every environment under `$CONDA_PREFIX`'s root,
   `$CONDA_EXE`'s root, `~/miniconda3`, `~/anaconda3`, `/opt/conda`,
   `/opt/miniconda3`.

What is returned is the real binary, an absolute path (symlinks resolved to
the interpreter they run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

from jouled.errors import ConfigError

_VERSION = re.compile(r"^\d+\.\d+$")
_PROBE = "import sys; print('%d.%d' % sys.version_info[:2])"


def read_map(path: Path) -> dict[str, str]:
    """A `--pythons` file: `VERSION = PATH` lines, paths made absolute against the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read the interpreter map {path}: {err.strerror}") from None
    found: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        version, sep, where = (part.strip() for part in line.partition("="))
        if not sep or not _VERSION.match(version) or not where:
            raise ConfigError(
                f"{path}:{n}: {raw.strip()!r} is not `VERSION = PATH`",
                hint="write one interpreter a line, e.g. `3.6 = /opt/py36/bin/python3.6`",
            )
        found[version] = str((path.parent / os.path.expanduser(where)).absolute())
    return found


def _version_of(python: str) -> str | None:
    try:
        done = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, check=False, timeout=60
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _is_shim(path: str) -> bool:
    return os.sep + "shims" + os.sep in path


def _newest(pattern_root: Path, glob: str) -> list[Path]:
    def key(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.name))

    return sorted(pattern_root.glob(glob), key=key, reverse=True) if pattern_root.is_dir() else []


def pyenv_root(environ: Mapping[str, str]) -> Path | None:
    if environ.get("PYENV_ROOT"):
        return Path(environ["PYENV_ROOT"])
    pyenv = shutil.which("pyenv", path=environ.get("PATH"))
    if pyenv is not None:
        try:
            done = subprocess.run(
                [pyenv, "root"], capture_output=True, text=True, check=False, timeout=30
            )
        except OSError:
            done = None
        if done is not None and done.returncode == 0 and done.stdout.strip():
            return Path(done.stdout.strip())
    home = Path(environ.get("HOME", "~")).expanduser() / ".pyenv"
    return home if home.is_dir() else None


def _conda_roots(environ: Mapping[str, str]) -> Iterator[Path]:
    home = Path(environ.get("HOME", "~")).expanduser()
    for var in ("CONDA_PREFIX", "CONDA_EXE"):
        value = environ.get(var)
        if value:
            path = Path(value)
            # CONDA_EXE is ROOT/bin/conda; CONDA_PREFIX is ROOT or ROOT/envs/NAME.
            root = path.parent.parent if var == "CONDA_EXE" else path
            if root.parent.name == "envs":
                root = root.parent.parent
            yield root
    for where in ("miniconda3", "anaconda3"):
        yield home / where
    yield Path("/opt/conda")
    yield Path("/opt/miniconda3")


def candidates(version: str, environ: Mapping[str, str]) -> Iterator[tuple[str, Path]]:
    """(where it was found, path) for every place `version` may be, in the order above."""
    exe = f"python{version}"
    on_path = shutil.which(exe, path=environ.get("PATH"))
    if on_path is not None and not _is_shim(on_path):
        yield "PATH", Path(on_path)
    root = pyenv_root(environ)
    if root is not None:
        for d in _newest(root / "versions", f"{version}.*"):
            yield "pyenv", d / "bin" / exe
        yield "pyenv", root / "versions" / version / "bin" / exe
    uv = environ.get("UV_PYTHON_INSTALL_DIR") or str(
        Path(environ.get("HOME", "~")).expanduser() / ".local/share/uv/python"
    )
    for d in _newest(Path(uv), f"cpython-{version}.*"):
        yield "uv", d / "bin" / exe
    for conda in dict.fromkeys(_conda_roots(environ)):
        yield "conda", conda / "bin" / exe
        for d in _newest(conda / "envs", "*"):
            yield "conda", d / "bin" / exe


def find(
    version: str,
    *,
    mapping: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The real interpreter for Python `version`, absolute; ConfigError naming where it looked."""
    env = os.environ if environ is None else environ
    looked: list[str] = []
    if mapping and version in mapping:
        given = mapping[version]
        real = os.path.realpath(given)
        if _version_of(real) == version:
            return real
        raise ConfigError(
            f"the interpreter map names {given} for Python {version}, which does not run "
            f"as Python {version}",
            hint="fix that line of the --pythons file",
        )
    for where, path in candidates(version, env):
        if not path.is_file():
            continue
        looked.append(f"{where}: {path}")
        real = os.path.realpath(path)
        if _version_of(real) == version:
            return real
    raise ConfigError(
        f"needs Python {version}; no interpreter of that version was found "
        f"(looked at python{version} on PATH, pyenv, uv and conda interpreters"
        + (f"; candidates that did not run as {version}: {', '.join(looked[:6])}" if looked else "")
        + ")",
        hint=f"install Python {version} (e.g. `pyenv install {version}`) or name it in a "
        f"--pythons file (`{version} = /path/to/python{version}`)",
    )
