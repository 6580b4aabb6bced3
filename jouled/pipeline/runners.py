"""What every run through one of the daemon's runners is given: the files, the boot, the setup.

A runner run sees, read-only at the layout's `ro` directory, the integrity
monitor (`jouled_monitor.py` and the files it names), the runner (`jouled_pytest.py`,
`jouled_unittest.py` or `jouled_sympy.py`) and `trusted.json`: the tree's protected files and the
tree's source files the patch left as they were, with their hashes, which the
monitor takes as code the patch did not write. Its boot code executes the
monitor's files and the runner into one namespace (neither is ever importable) and
calls `main`. The run's key, the canary files and the text of its sealed test
modules (`seal_tests`: hidden tests, shown to the run as unreadable files) travel on
fd 3 (`setup`), never on a command line or in a file the run can read.
"""

from __future__ import annotations

import base64
import hashlib
import json
import marshal
import os
import secrets
import shutil
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from jouled.pipeline.sandbox import Layout

HERE = Path(__file__).parent
# The monitor's files, in the order they run (`jouled_monitor.py` says what each holds).
MONITOR = tuple(
    HERE / f"jouled_{name}.py"
    for name in (
        "monitor",
        "origins",
        "observe",
        "case",
        "failures",
        "compared",
        "traced",
        "snapshot",
        "stack",
        "sealed",
        "hook",
    )
)
KEY_BYTES = 32
_CACHE_LIMIT = 64
_pristine_cache: dict[tuple[str, int], dict[str, str]] = {}
_code_cache: dict[tuple[str, int, str], bytes] = {}
_cache_lock = threading.Lock()


def install(ro_dir: Path, runner: Path, layout: Layout) -> None:
    """Copy the monitor's files and `runner` into the run's read-only directory, each with its code
    compiled for this interpreter (`NAME.<cache tag>.code`): an environment's interpreter
    of another version compiles the source instead."""
    for source in (*MONITOR, runner):
        shutil.copyfile(source, ro_dir / source.name)
        code = _compiled(source, f"{layout.ro}/{source.name}")
        (ro_dir / f"{source.name}.{sys.implementation.cache_tag}.code").write_bytes(code)


def _compiled(source: Path, filename: str) -> bytes:
    """The marshalled code of `source` as the sandbox names it (cached per file version)."""
    key = (str(source), source.stat().st_mtime_ns, filename)
    with _cache_lock:
        cached = _code_cache.get(key)
    if cached is None:
        code = compile(source.read_bytes(), filename, "exec", dont_inherit=True)
        cached = marshal.dumps(code)
        with _cache_lock:
            _code_cache[key] = cached
    return cached


def boot(layout: Layout, runner: Path) -> str:
    """`python -c` code that executes the monitor's files and the runner, then `main`.

    Each file's code is taken from its `.code` twin when that was compiled for this
    interpreter (marshal's format is the interpreter's), else compiled from source. The
    namespace has a copy of the builtins of its own: what a test suite patches in Python's
    (`open` under a fake file system) is not what the monitor and the runner call.
    """
    files = [f"{layout.ro}/{source.name}" for source in (*MONITOR, runner)]
    return (
        "import sys, os, marshal, builtins; sys.path[:] = [p for p in sys.path if p]; "
        "ns = {'__name__': '__jouled__', '__builtins__': dict(vars(builtins))}; "
        "tag = getattr(sys.implementation, 'cache_tag', None); "
        "load = lambda f: marshal.loads(open(f + '.' + tag + '.code', 'rb').read()) "
        "if tag and os.path.exists(f + '.' + tag + '.code') "
        "else compile(open(f, 'rb').read(), f, 'exec'); "
        f"[exec(load(f), ns) for f in {files!r}]; "
        "ns['main']()"
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sources(tree: Path) -> Iterable[tuple[str, Path]]:
    for top, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        for name in files:
            if name.endswith(".py"):
                path = Path(top, name)
                if not path.is_symlink():
                    yield path.relative_to(tree).as_posix(), path


def pristine_sources(pristine: Path) -> dict[str, str]:
    """Relative path -> sha256 of every Python source of a pristine tree (cached)."""
    stat = pristine.stat()
    key = (str(pristine.resolve()), stat.st_mtime_ns)
    with _cache_lock:
        cached = _pristine_cache.get(key)
    if cached is not None:
        return cached
    found = {rel: _digest(path) for rel, path in sources(pristine)}
    with _cache_lock:
        if len(_pristine_cache) >= _CACHE_LIMIT:
            _pristine_cache.pop(next(iter(_pristine_cache)))
        _pristine_cache[key] = found
    return found


def unchanged_sources(tree: Path, pristine: Path | None) -> dict[str, str]:
    """The tree's Python sources whose bytes are the pristine tree's: rel -> sha256."""
    if pristine is None or not pristine.is_dir():
        return {}
    before = pristine_sources(pristine)
    unchanged: dict[str, str] = {}
    for rel, path in sources(tree):
        want = before.get(rel)
        if want is not None and _digest(path) == want:
            unchanged[rel] = want
    return unchanged


def write_trusted(ro_dir: Path, protected: Iterable[str], unchanged: Mapping[str, str]) -> None:
    listing = {"protected": sorted(set(protected)), "unchanged": dict(sorted(unchanged.items()))}
    (ro_dir / "trusted.json").write_text(json.dumps(listing))


def prepare_plain(
    ro_dir: Path,
    runner: Path,
    layout: Layout,
    tree: Path,
    pristine: Path | None,
    protected: Sequence[str],
    framework: tuple[str, ...],
    scripts: Sequence[str] = (),
) -> bool:
    """Install `runner` for a plain command (Django's, SymPy's) and write what the monitor
    trusts; returns whether the patch changed the tree's own test framework (files under
    the `framework` prefixes), whose code is then the patch's: the run is graded at
    `reduced`, and those files count as the framework's rather than as the patch's.

    `scripts` are the command's scripts that are no `.py` file (SymPy's `bin/test`): each
    counts as unchanged when its bytes are the pristine's.
    """
    install(ro_dir, runner, layout)
    unchanged = unchanged_sources(tree, pristine)
    for rel in scripts:
        path = tree / rel
        if pristine is not None and path.is_file() and (pristine / rel).is_file():
            digest = _digest(path)
            if digest == _digest(pristine / rel):
                unchanged = {**unchanged, rel: digest}
    changed = framework_changes(tree, unchanged, framework, scripts)
    write_trusted(ro_dir, [*protected, *changed], unchanged)
    seal(ro_dir)
    return bool(changed)


def framework_changes(
    tree: Path,
    unchanged: Mapping[str, str],
    framework: tuple[str, ...],
    scripts: Sequence[str] = (),
) -> list[str]:
    """The tree's files under the `framework` prefixes the patch changed or added."""
    if not framework:
        return []
    return [
        rel
        for rel in [*(rel for rel, _ in sources(tree)), *scripts]
        if rel.startswith(framework) and rel not in unchanged and (tree / rel).is_file()
    ]


def interpreter(named: str | None, python: str) -> str:
    """The interpreter a command runs under: the environment's `python` where the command
    names none or a portable `python`/`python3`, else the one it names."""
    return python if named is None or named in ("python", "python3") else named


def seal(ro_dir: Path) -> None:
    """Make the read-only directory's files readable by the sandbox's unprivileged user."""
    for path in ro_dir.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    os.chmod(ro_dir, 0o755)


def setup(layout: Layout, canaries: Iterable[str], **extra: object) -> tuple[bytes, bytes]:
    """(the run's key, what the runner reads on fd 3: the key, then its setup document)."""
    key = secrets.token_bytes(KEY_BYTES)
    document = json.dumps(
        {"root": layout.workdir, "ro": layout.ro, "canaries": list(canaries), **extra}
    ).encode()
    return key, key + len(document).to_bytes(4, "big") + document


SEALED_STUB = "sealed"  # the unreadable file shown over each sealed test module


def seal_tests(
    setup_bytes: bytes,
    tree: Path,
    ro_dir: Path,
    secret: Sequence[str],
    texts: Mapping[str, bytes] | None = None,
) -> tuple[bytes, dict[str, Path]]:
    """Keep the `secret` test modules (tree-relative) from every process of the run: their
    text joins the setup the runner reads on fd 3, and each is shown as an empty file no
    one may read (mode 000 on a read-only mount). `texts` replaces some modules' text
    (`mutants`: the run then tests what it holds, not what is on disk). Returns (the
    setup, the overlays)."""
    texts = texts or {}
    unsealed = sorted(set(texts) - set(secret))
    if unsealed:
        raise ValueError(f"texts for modules the run does not seal: {unsealed}")
    if not secret:
        return setup_bytes, {}
    key, document = setup_bytes[:KEY_BYTES], json.loads(setup_bytes[KEY_BYTES + 4 :])
    document["sealed"] = {
        rel: base64.b64encode(texts[rel] if rel in texts else (tree / rel).read_bytes()).decode()
        for rel in secret
    }
    stub = ro_dir / SEALED_STUB
    stub.touch()
    os.chmod(stub, 0)
    body = json.dumps(document).encode()
    return key + len(body).to_bytes(4, "big") + body, {rel: stub for rel in secret}
