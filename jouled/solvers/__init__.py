"""Daemon-hosted solvers: the built-in `reference` and `noop`, and agent CLIs an operator declares.

An operator declares agent solvers in a TOML file (`jouled serve --solvers FILE`):

    secrets = "/etc/jouled/secrets.env"     # optional: KEY=VALUE lines, mode 0600

    [solvers.claude]
    argv = ["claude", "-p", "{prompt}", "--output-format", "json", "--model", "{model}"]
    model = "claude-sonnet-4-5"             # the default for {model}
    env = ["ANTHROPIC_API_KEY"]             # passed through by name, never logged or signed
    timeout_s = 1800
    network = "open"                        # the solve phase's network: "open" or "none"
    paths = []                              # extra read-only paths the CLI needs
    [solvers.claude.usage]                  # the agent's own report, read from its stdout
    usd = "total_cost_usd"
    tokens_in = "usage.input_tokens"
    tokens_out = "usage.output_tokens"

Placeholders in `argv`: {prompt} (the task's prompt), {prompt_file} (the same
as PROMPT.md in the workdir), {workdir} and {model}. `usage` paths are
dotted keys into the last JSON object the agent prints; `*` matches every key
of an object and sums what it finds. What they yield is recorded as
`claimed` (the agent's word, beside the attested joules), never as a
measurement.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jouled import limits
from jouled.errors import ConfigError, UsageError

BUILTIN = ("reference", "noop")
NETWORK_POLICIES = ("none", "open")
PLACEHOLDERS = frozenset({"prompt", "prompt_file", "workdir", "model"})
USAGE_FIELDS = ("usd", "tokens_in", "tokens_out")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True)
class CommandSolver:
    """An agent CLI the daemon runs in the attempt's workdir, metered and sandboxed."""

    name: str
    argv: tuple[str, ...]
    model: str = ""
    env: tuple[str, ...] = ()  # names of variables passed through
    timeout_s: int = 1800
    network: str = "open"
    paths: tuple[Path, ...] = ()  # extra read-only paths inside the sandbox
    usage: Mapping[str, str] = field(default_factory=dict)  # claimed figure -> dotted path

    def render(self, prompt: str, prompt_file: str, workdir: str, model: str) -> list[str]:
        values = {"prompt": prompt, "prompt_file": prompt_file, "workdir": workdir}
        values["model"] = model or self.model
        return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in self.argv]


@dataclass(frozen=True)
class Solvers:
    """The command solvers an operator declared, and the secrets they may be given."""

    commands: Mapping[str, CommandSolver] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def names(self) -> tuple[str, ...]:
        return (*BUILTIN, *sorted(self.commands))

    def is_hosted(self, name: str) -> bool:
        return name in BUILTIN or name in self.commands

    def environment(self, solver: CommandSolver, env: Mapping[str, str]) -> dict[str, str]:
        """The variables `solver` gets: from the daemon's environment, else the secrets file."""
        out: dict[str, str] = {}
        missing = []
        for name in solver.env:
            value = env.get(name, self.secrets.get(name))
            if value is None:
                missing.append(name)
            else:
                out[name] = value
        if missing:
            raise UsageError(
                f"solver {solver.name!r} needs {', '.join(missing)}, "
                "which the daemon does not have",
                hint="set it in the daemon's environment or in the secrets file the solvers "
                "file names, then restart jouled",
            )
        return out


def load_solvers(path: Path | None) -> Solvers:
    """Parse a solvers file; ConfigError says what is wrong and where."""
    if path is None:
        return Solvers()
    try:
        document = tomllib.loads(path.read_text())
    except OSError as err:
        raise ConfigError(f"cannot read the solvers file {path}: {err.strerror}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"the solvers file {path} is not valid TOML: {err}") from err
    unknown = set(document) - {"secrets", "solvers"}
    if unknown:
        raise ConfigError(f"{path}: unknown top-level keys {sorted(unknown)}")
    secrets: dict[str, str] = {}
    if "secrets" in document:
        secrets = load_secrets((path.parent / str(document["secrets"])).resolve())
    table = document.get("solvers", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [solvers] must be a table of solver tables")
    commands = {name: _solver(path, name, spec) for name, spec in table.items()}
    return Solvers(commands, secrets)


def _solver(path: Path, name: str, spec: Any) -> CommandSolver:
    where = f"{path}: solver {name!r}"
    try:
        limits.name("solver", name)
    except UsageError as err:
        raise ConfigError(f"{where}: {err.message}") from err
    if name in BUILTIN:
        raise ConfigError(f"{where}: the name is the daemon's own built-in solver")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = set(spec) - {"argv", "model", "env", "timeout_s", "network", "paths", "usage"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    argv = spec.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigError(f"{where}: argv must be a non-empty list of strings")
    for arg in argv:
        for placeholder in _PLACEHOLDER.findall(arg):
            if placeholder not in PLACEHOLDERS:
                raise ConfigError(
                    f"{where}: unknown placeholder {{{placeholder}}} in argv",
                    hint=f"placeholders are {', '.join(sorted(PLACEHOLDERS))}",
                )
    env = spec.get("env", [])
    if not isinstance(env, list) or not all(
        isinstance(e, str) and _ENV_NAME.fullmatch(e) for e in env
    ):
        raise ConfigError(f"{where}: env must be a list of variable names")
    timeout = spec.get("timeout_s", 1800)
    if not isinstance(timeout, int) or not 1 <= timeout <= 24 * 3600:
        raise ConfigError(f"{where}: timeout_s must be an integer from 1 to 86400")
    network = spec.get("network", "open")
    if network not in NETWORK_POLICIES:
        raise ConfigError(f"{where}: network must be one of {', '.join(NETWORK_POLICIES)}")
    paths = spec.get("paths", [])
    if not isinstance(paths, list) or not all(
        isinstance(p, str) and p.startswith("/") for p in paths
    ):
        raise ConfigError(f"{where}: paths must be a list of absolute paths")
    usage = spec.get("usage", {})
    if not isinstance(usage, dict) or not all(
        k in USAGE_FIELDS and isinstance(v, str) and v for k, v in usage.items()
    ):
        raise ConfigError(
            f"{where}: usage maps {', '.join(USAGE_FIELDS)} to dotted paths in the agent's JSON"
        )
    model = spec.get("model", "")
    if not isinstance(model, str):
        raise ConfigError(f"{where}: model must be a string")
    return CommandSolver(
        name=name,
        argv=tuple(argv),
        model=model,
        env=tuple(env),
        timeout_s=timeout,
        network=network,
        paths=tuple(Path(p) for p in paths),
        usage=dict(usage),
    )


def load_secrets(path: Path) -> dict[str, str]:
    """KEY=VALUE lines from a file only its owner can read; values never leave the daemon."""
    try:
        info = path.stat()
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read the secrets file {path}: {err.strerror}") from err
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"the secrets file {path} is readable by others (mode {info.st_mode & 0o777:o})",
            hint=f"chmod 600 {path}",
        )
    if info.st_uid != os.geteuid():
        raise ConfigError(f"the secrets file {path} belongs to another user")
    secrets: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip().removeprefix("export ").strip()
        if not sep or not _ENV_NAME.fullmatch(key):
            # Never echo the line: it may hold a secret.
            raise ConfigError(f"{path}:{number}: expected KEY=VALUE")
        secrets[key] = value.strip().strip("'\"")
    return secrets
