"""The daemon's configuration, built in one place.

`Config.from_env(**overrides)` reads the environment once; the CLI only maps
flags onto overrides. Nothing else in the library reads `os.environ`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jouled.errors import ConfigError

ENERGY_KINDS = ("auto", "rapl", "nvml", "estimator")
ATTRIBUTION_POLICIES = ("exclusive", "shared")
ISOLATION_LEVELS = ("process", "bwrap")  # weakest first


def default_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("JOULED_HOME"):
        return Path(env["JOULED_HOME"]).expanduser()
    return Path.home() / ".local" / "share" / "jouled"


def bundled_tasks() -> Path:
    """The task suites shipped beside the package in a source checkout."""
    return Path(__file__).resolve().parent.parent / "tasks"


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as err:
        raise ConfigError(f"{name}={raw!r} is not a number") from err


@dataclass(frozen=True)
class Config:
    data_dir: Path = field(default_factory=default_home)
    task_dirs: tuple[Path, ...] = ()
    listen: str = ""  # "unix:PATH" or "HOST:PORT"; empty: the socket in the data dir
    insecure: bool = False
    energy: str = "auto"
    calibrate_seconds: float = 10.0
    active_watts: float = 15.0
    watts_per_core: float = 5.0
    estimator_mode: str = "wall"
    powercap_root: Path = Path("/sys/class/powercap")
    gpus: tuple[str, ...] | None = None
    dram: bool = False
    attribution: str = "exclusive"
    max_patch_bytes: int = 1 << 20
    workers: int = 4  # attempts evaluated at once (metered phases still serialise when exclusive)
    queue_limit: int = 64  # accepted attempts waiting beyond that are refused
    grace_s: float = 30.0
    origin: str = ""  # checkpoint origin line; empty: derived from host and key
    min_isolation: str = "bwrap"  # below this, the daemon refuses to grade

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Config:
        env = os.environ if env is None else env
        base: dict[str, Any] = {
            "data_dir": default_home(env),
            "active_watts": _float(env, "JOULED_ACTIVE_WATTS", cls.active_watts),
            "watts_per_core": _float(env, "JOULED_WATTS_PER_CORE", cls.watts_per_core),
        }
        if env.get("JOULED_POWERCAP_ROOT"):
            base["powercap_root"] = Path(env["JOULED_POWERCAP_ROOT"])
        if env.get("JOULED_TASKS"):
            base["task_dirs"] = tuple(Path(p) for p in env["JOULED_TASKS"].split(os.pathsep) if p)
        base.update({k: v for k, v in overrides.items() if v is not None})
        config = cls(**base)
        return config.validated()

    def validated(self) -> Config:
        if self.energy not in ENERGY_KINDS:
            raise ConfigError(f"--energy {self.energy!r} is not one of {', '.join(ENERGY_KINDS)}")
        if self.attribution not in ATTRIBUTION_POLICIES:
            raise ConfigError(
                f"attribution {self.attribution!r} is not one of {', '.join(ATTRIBUTION_POLICIES)}"
            )
        if self.calibrate_seconds < 0:
            raise ConfigError("--calibrate-seconds must be 0 (reuse the last) or positive")
        if self.min_isolation not in ISOLATION_LEVELS:
            raise ConfigError(
                f"--min-isolation {self.min_isolation!r} is not one of "
                f"{', '.join(ISOLATION_LEVELS)}"
            )
        if self.workers < 1:
            raise ConfigError("workers must be at least 1")
        config = self
        if not config.task_dirs:
            config = replace(config, task_dirs=(bundled_tasks(),))
        return replace(config, data_dir=Path(config.data_dir).expanduser().resolve())

    @property
    def ledger_path(self) -> Path:
        return self.data_dir / "ledger.duckdb"

    @property
    def key_path(self) -> Path:
        return self.data_dir / "jouled.key"

    @property
    def pub_path(self) -> Path:
        return self.data_dir / "jouled.pub"

    @property
    def checkpoint_path(self) -> Path:
        return self.data_dir / "checkpoint.note"

    @property
    def socket_path(self) -> Path:
        return self.data_dir / "jouled.sock"

    @property
    def work_root(self) -> Path:
        return self.data_dir / "work"

    @property
    def listen_address(self) -> str:
        """The address as gRPC spells it."""
        return self.listen or f"unix:{self.socket_path}"

    @property
    def hostname(self) -> str:
        return socket.gethostname()
