"""`jouled swebench prepare`: build an instance's environment from its official specification.

Every path (the checkout root, the environments' root, `--python`) is made
absolute before anything runs. For a record:

0. the specification's `pre_install` edits of the checkout (`sed -i ...
   tox.ini`) are applied to the record's checkout, from its committed bytes;
   its other steps (system packages, locales) are reported as host
   requirements (`jouled.swebench_preinstall`);
1. a virtualenv at `ENVS/<owner>__<name>__<version>` (or `ENVS/<instance_id>`
   with `per_instance`), from the interpreter of the specification's Python
   version (`--python`, else found: `jouled.swebench_pythons`);
2. pip brought to a release that reads current wheels where the
   interpreter's own is older than PIP_FLOOR (the newest that supports that
   Python: `PIP_FOR_PYTHON`), then the `setuptools`/`wheel` pins the
   specification names;
3. the specification's packages: its requirements as the official harness
   assembles them (`packages: requirements.txt`; see `requirements_text`),
   or the packages it names, then its pinned `pip_packages`;
4. its install step (`python -m pip install -e .` and the like) run with the
   environment's bin first on PATH and the checkout seen at `/testbed`,
   through bwrap, so the editable install points where the sandbox later
   mounts each attempt's tree; a shell preamble refuses to run it unless
   `python` and `pip` there are the environment's own;
5. a manifest, `jouled-env.json`, naming the interpreter and what the sandbox
   must show of it.

Each attempt's log is kept: `prepare-<n>.log` (and `prepare.log`, the
latest), never deleted by a retry. What it does not do: conda environments
(`packages: environment.yml`), fetching the checkout. pip's own environment
variables (PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX) reach every pip run,
the install step's included.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jouled import swebench_preinstall, swebench_pythons, swebench_tox
from jouled.contracts import swebench_env
from jouled.contracts import swebench_harness as harness
from jouled.contracts.swebench_records import SweBenchRecord
from jouled.errors import ConfigError, TaskError
from jouled.pipeline.bwrap import bwrap

_PROBE = (
    "import json, os, sys; print(json.dumps({'prefix': sys.prefix, 'base': sys.base_prefix, "
    "'exe': os.path.realpath(sys.executable), "
    "'version': '%d.%d' % sys.version_info[:2]}))"
)


# pip older than this cannot install many current wheels (manylinux_2_x tags, PEP 600).
PIP_FLOOR = (21, 0)
# The newest pip each old interpreter supports; newer interpreters take the newest pip.
PIP_FOR_PYTHON = {"3.5": "pip<21", "3.6": "pip<22", "3.7": "pip<24.1", "3.8": "pip<25.1"}
# Build tools whose pins in a specification are installed before anything else.
BUILD_TOOLS = ("pip", "setuptools", "wheel")
# The install step's exit status when its preamble refuses to run it.
REFUSED_EXIT = 97


@dataclass
class Prepared:
    instance_id: str
    directory: Path | None
    ok: bool
    message: str
    host_requirements: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)  # pre_install edits made to the checkout

    def to_json(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "environment": str(self.directory) if self.directory else None,
            "ok": self.ok,
            "message": self.message,
            "host_requirements": self.host_requirements,
            "pre_install_applied": self.applied,
        }


def find_python(
    version: str, explicit: str | None = None, pythons: dict[str, str] | None = None
) -> str:
    """The interpreter to build a `version` environment from, absolute; ConfigError if none.

    `explicit` (`--python`) wins for every version; a bare name is looked up on PATH.
    """
    if explicit:
        found = explicit if os.sep in explicit else shutil.which(explicit)
        if found is None or not os.path.isfile(found):
            raise ConfigError(f"--python {explicit}: no such interpreter")
        return os.path.abspath(found)
    return swebench_pythons.find(version, mapping=pythons)


def pip_pin(python_version: str) -> str:
    """The pip requirement an environment of `python_version` is upgraded to."""
    return PIP_FOR_PYTHON.get(python_version, "pip")


def build_tool_pins(spec: harness.Spec) -> list[str]:
    """The specification's own pins of pip, setuptools and wheel, in its order."""
    words = list(spec.pip_packages)
    if spec.packages and spec.packages not in ("requirements.txt", "environment.yml"):
        words = [*spec.packages.split(), *words]
    pins = []
    for word in words:
        name = re.split(r"[<>=!~\[; ]", word, maxsplit=1)[0].strip().lower()
        if name in BUILD_TOOLS and word not in pins:
            pins.append(word)
    return pins


def probe(python: str) -> dict[str, str]:
    done = subprocess.run(
        [python, "-c", _PROBE], capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        raise TaskError(f"{python} does not run: {done.stderr.strip()[-500:]}")
    data: dict[str, str] = json.loads(done.stdout)
    return data


def _run(argv: list[str], log: list[str], env: dict[str, str] | None = None) -> None:
    log.append("$ " + shlex.join(argv))
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=3600)
    log.append(done.stdout[-4000:] + done.stderr[-4000:])
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-1500:]
        raise TaskError(f"`{shlex.join(argv[:6])} ...` failed ({done.returncode}): {tail}")


def _at_testbed(checkout: Path, bin_dir: Path | None, command: str) -> list[str]:
    """`command` run by sh with the checkout at /testbed and everything else as on the host.

    `bin_dir` (absolute) goes first on PATH.
    """
    found = bwrap()
    args = [found.path, "--die-with-parent"]
    if os.geteuid() != 0:
        args += ["--unshare-user"]
    for name in sorted(os.listdir("/")):
        path = f"/{name}"
        if name in ("proc", "dev", "testbed") or not os.path.isdir(path):
            continue
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        else:
            args += ["--bind", path, path]
    args += ["--dev", "/dev", "--proc", "/proc", "--bind", str(checkout), swebench_env.TESTBED]
    host_path = os.environ.get("PATH", swebench_env.SYSTEM_PATH)
    path_var = f"{bin_dir}{os.pathsep}{host_path}" if bin_dir is not None else host_path
    args += ["--chdir", swebench_env.TESTBED, "--setenv", "PATH", path_var]
    if bin_dir is not None:
        args += ["--setenv", "VIRTUAL_ENV", str(bin_dir.parent)]
    return [*args, "--", "/bin/sh", "-c", command]


def guarded(venv: Path, command: str) -> str:
    """`command` behind a preamble that refuses to run it under any python but `venv`'s.

    The preamble exits REFUSED_EXIT, saying what `python` or `pip` resolved
    to, when either is not the environment's own or its `sys.prefix` is not
    the environment: nothing the install step does can reach another
    interpreter's site-packages.
    """
    bin_dir = venv / "bin"
    want = {name: shlex.quote(str(bin_dir / name)) for name in ("python", "pip")}
    prefix = shlex.quote(os.path.realpath(venv))
    lines = []
    for name, path in want.items():
        lines.append(
            f'got=$(command -v {name}); [ "$got" = {path} ] || {{ echo "jouled: {name} '
            f"resolves to '$got', not {path}: the install step is refused\" >&2; "
            f"exit {REFUSED_EXIT}; }}"
        )
    probe = "import os, sys; print(os.path.realpath(sys.prefix))"
    lines.append(
        f'got=$(python -c {shlex.quote(probe)}); [ "$got" = {prefix} ] || {{ echo "jouled: '
        f"python's prefix is '$got', not {prefix}: the install step is refused\" >&2; "
        f"exit {REFUSED_EXIT}; }}"
    )
    return "\n".join([*lines, command])


_EXCLUDED = ("-e .", "#", ".[test")


def _file_at(checkout: Path, commit: str | None, rel: str) -> str | None:
    """`rel` as of `commit` when the checkout's history has it, else as it is in the tree."""
    if commit and shutil.which("git") and (checkout / ".git").exists():
        done = subprocess.run(
            [
                "git",
                "-c",
                f"safe.directory={checkout}",
                "-C",
                str(checkout),
                "show",
                f"{commit}:{rel}",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if done.returncode == 0:
            return done.stdout
    path = checkout / rel
    return path.read_text(encoding="utf-8") if path.is_file() else None


def requirements_text(spec: harness.Spec, checkout: Path, commit: str | None = None) -> str | None:
    """The requirements the official harness installs for `packages: requirements.txt`.

    The first of the repository's requirement files that exists (at the
    instance's environment_setup_commit where the checkout has it), with the
    files it includes by `-r` inlined before it, one level deep; lines for
    the package itself (`-e .`, `.[test]`) and comments are left out.
    """
    for rel in spec.requirements:
        text = _file_at(checkout, commit, rel)
        if text is not None:
            break
    else:
        return None
    base = rel.rsplit("/", 1)[0] if "/" in rel else ""
    included: list[str] = []
    own: list[str] = []
    for line in text.split("\n"):
        if line.strip().startswith("-r"):
            name = line[len("-r") :].strip()
            other = _file_at(checkout, commit, f"{base}/{name}" if base else name)
            for extra in (other or "").split("\n"):
                if not extra.strip().startswith(_EXCLUDED):
                    included.append(extra)
        elif not line.strip().startswith(_EXCLUDED):
            own.append(line)
    included.append("\n".join(own))
    return "\n".join(included)


def _log_number(directory: Path) -> int:
    numbers = [
        int(m.group(1))
        for f in (directory.iterdir() if directory.is_dir() else ())
        if (m := re.fullmatch(r"prepare-(\d+)\.log", f.name))
    ]
    return max(numbers, default=0) + 1


def _clear_keeping_logs(directory: Path) -> None:
    """Empty `directory` for a rebuild, keeping every earlier attempt's log."""
    for entry in directory.iterdir():
        if re.fullmatch(r"prepare-\d+\.log", entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _keep_log(directory: Path, number: int, log: list[str]) -> None:
    text = "\n".join(log) + "\n"
    (directory / f"prepare-{number}.log").write_text(text, encoding="utf-8")
    (directory / "prepare.log").write_text(text, encoding="utf-8")


def apply_pre_install(spec: harness.Spec, checkout: Path, log: list[str]) -> list[str]:
    """Apply the specification's checkout edits to `checkout`; the commands applied."""
    edits, _ = swebench_preinstall.plan(spec.pre_install)
    if not edits:
        return []
    git = shutil.which("git")
    if git is None or not (checkout / ".git").exists():
        raise TaskError(
            f"{checkout}: the specification's pre_install edits need the checkout's git "
            "history (they are applied to the files as committed)",
            hint="clone the repository and check out the instance's base_commit",
        )
    for step in edits:
        swebench_preinstall.restore_committed(checkout, step.files, git)
    for step in edits:
        _run(_at_testbed(checkout, None, step.command), log)
    return [step.command for step in edits]


def _pip_version(python: Path) -> tuple[int, ...]:
    done = subprocess.run(
        [str(python), "-m", "pip", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    found = re.match(r"pip (\d+)\.(\d+)", done.stdout)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def prepare(
    record: SweBenchRecord,
    checkout_root: Path,
    envs: Path,
    *,
    python: str | None = None,
    pythons: dict[str, str] | None = None,
    per_instance: bool = False,
    force: bool = False,
) -> Prepared:
    """Build (or keep, unless `force`) the environment `record` runs in.

    `python` (`--python`) builds every version from one interpreter; `pythons`
    (`--pythons FILE`) maps versions to interpreters; otherwise the
    specification's version is found on the host.
    """
    iid = record.instance_id
    checkout_root, envs = checkout_root.resolve(), envs.resolve()  # before anything runs
    spec = harness.spec_for(record.repo, record.version)
    if spec is None:
        return Prepared(iid, None, False, f"{record.repo} {record.version}: no official spec")
    name = iid if per_instance else swebench_env.version_name(record.repo, spec.version)
    directory = envs / name
    _, host = swebench_preinstall.plan(spec.pre_install)
    checkout = checkout_root / iid
    if not checkout.is_dir():
        return Prepared(iid, None, False, f"no checkout at {checkout}", host)
    log: list[str] = []
    try:
        # Every checkout gets the edits, whether its environment is built now or was before.
        applied = apply_pre_install(spec, checkout, log)
    except (TaskError, OSError, subprocess.TimeoutExpired) as err:
        message = err.message if isinstance(err, TaskError) else str(err)
        return Prepared(iid, None, False, f"pre_install: {message}", host)
    if (directory / swebench_env.MANIFEST).is_file() and not force:
        applied += _link_tox(spec, checkout, directory)
        return Prepared(iid, directory, True, "already prepared", host, applied)
    try:
        interpreter = find_python(spec.python, python, pythons)
    except ConfigError as err:
        return Prepared(iid, None, False, err.message, host, applied)
    number = _log_number(directory)
    try:
        if directory.exists():
            _clear_keeping_logs(directory)
        directory.mkdir(parents=True, exist_ok=True)
        log.insert(0, f"# prepare attempt {number}: {record.repo} {spec.version}, {interpreter}")
        venv = directory / "venv"
        _run([interpreter, "-m", "venv", str(venv)], log)
        bin_dir = venv / "bin"
        env_python = bin_dir / "python"
        pip = [str(env_python), "-m", "pip", "install", "--disable-pip-version-check"]
        if _pip_version(env_python) < PIP_FLOOR:
            _run([*pip, "--upgrade", pip_pin(spec.python)], log)
        pins = build_tool_pins(spec)
        if pins:
            _run([*pip, *pins], log)
        if spec.packages == "requirements.txt":
            text = requirements_text(spec, checkout, record.environment_setup_commit)
            if text is None:
                raise TaskError(
                    f"no requirement file ({', '.join(spec.requirements)}) in {checkout}"
                )
            (directory / "requirements.txt").write_text(text, encoding="utf-8")
            _run([*pip, "-r", str(directory / "requirements.txt")], log)
        elif spec.packages == "environment.yml":
            raise TaskError(f"{spec.repo} {spec.version} is specified as a conda environment")
        elif spec.packages:
            _run([*pip, *spec.packages.split()], log)
        if spec.pip_packages:
            _run([*pip, *spec.pip_packages], log)
        if spec.install:
            _run(_at_testbed(checkout, bin_dir, guarded(venv, spec.install)), log)
        found = probe(str(env_python))
        manifest = swebench_env.Manifest(
            name=name,
            python=str(env_python),
            paths=tuple(dict.fromkeys([str(venv), found["base"]])),
            bin_dir=str(bin_dir),
            repo=spec.repo,
            version=spec.version,
            python_version=found["version"],
            how="prepared",
        )
        data = {
            **manifest.to_json(),
            "host_requirements": host,
            "pre_install_applied": applied,
            "spec": spec.describe(),
        }
        (directory / swebench_env.MANIFEST).write_text(json.dumps(data, indent=1) + "\n")
        _keep_log(directory, number, log)
    except (TaskError, OSError, subprocess.TimeoutExpired) as err:
        if directory.is_dir():
            _keep_log(directory, number, log)
        message = err.message if isinstance(err, TaskError) else str(err)
        return Prepared(iid, directory, False, message, host, applied)
    applied += _link_tox(spec, checkout, directory)
    return Prepared(iid, directory, True, "prepared", host, applied)


def _link_tox(spec: harness.Spec, checkout: Path, directory: Path) -> list[str]:
    """For a `tox --current-env` command, tox's environment in the checkout made the
    prepared one's (`jouled.swebench_tox`); what was written, for the record."""
    env = swebench_tox.tox_env(spec.test_cmd)
    if env is None:
        return []
    written = swebench_tox.link(checkout, directory / "venv", env)
    return [f"tox environment .tox/{env}: {len(written)} files"] if written else []


def adopt(directory: Path, python: str, *, name: str = "") -> swebench_env.Manifest:
    """Write the manifest for an environment built elsewhere: `python` with the repo at /testbed."""
    found = probe(python)
    bin_dir = str(Path(python).parent)
    manifest = swebench_env.Manifest(
        name=name or directory.name,
        python=python,
        paths=tuple(dict.fromkeys([found["prefix"], found["base"]])),
        bin_dir=bin_dir,
        python_version=found["version"],
        how="adopted",
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / swebench_env.MANIFEST).write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    return manifest


def report(
    records: list[SweBenchRecord],
    checkout_root: Path,
    envs: Path,
    *,
    python: str | None = None,
    pythons: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Per repository version: whether an environment builds here, and why not; builds nothing.

    A version `builds` when it has an official specification that is not a
    conda environment and its interpreter is found here; `prepared` when its
    environment already exists under `envs`. Host requirements (pre_install
    steps that are not checkout edits) are listed: the host must provide them.
    """
    checkout_root, envs = checkout_root.resolve(), envs.resolve()
    groups: dict[tuple[str, str], list[SweBenchRecord]] = {}
    for record in records:
        groups.setdefault((record.repo, record.version or ""), []).append(record)
    rows = []
    interpreters: dict[str, str] = {}
    for (repo, version), members in sorted(groups.items()):
        spec = harness.spec_for(repo, version or None)
        row: dict[str, Any] = {
            "repo": repo,
            "version": version,
            "instances": len(members),
            "checkouts": sum((checkout_root / r.instance_id).is_dir() for r in members),
            "python": spec.python if spec else None,
            "interpreter": None,
            "host_requirements": swebench_preinstall.plan(spec.pre_install)[1] if spec else [],
        }
        name = swebench_env.version_name(repo, version) if spec else ""
        if spec is None:
            row |= {"builds": False, "reason": "no official specification for this version"}
        elif spec.packages == "environment.yml":
            row |= {"builds": False, "reason": "specified as a conda environment"}
        else:
            try:
                if spec.python not in interpreters:
                    interpreters[spec.python] = find_python(spec.python, python, pythons)
                row |= {"interpreter": interpreters[spec.python], "builds": True, "reason": ""}
            except ConfigError as err:
                row |= {"builds": False, "reason": err.message}
        row["prepared"] = bool(name) and (envs / name / swebench_env.MANIFEST).is_file()
        rows.append(row)
    total = sum(r["instances"] for r in rows)
    builds = sum(r["instances"] for r in rows if r["builds"] or r["prepared"])
    return {"versions": rows, "instances": total, "buildable_instances": builds}
