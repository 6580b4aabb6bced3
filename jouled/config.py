"""The daemon's configuration, built in one place.

`Config.from_env(**overrides)` reads the environment once; the CLI only maps
flags onto overrides. Nothing else in the library reads `os.environ`.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from jouled import limits
from jouled.auth import PeerRule
from jouled.documents.vocabulary import INTEGRITY_LEVELS
from jouled.errors import ConfigError
from jouled.home import DEFAULT_HOME, HOME_VARIABLE, SOCKET_NAME

ENERGY_KINDS = ("auto", "rapl", "nvml", "estimator")
ATTRIBUTION_POLICIES = ("exclusive", "shared")
ISOLATION_LEVELS = ("process", "bwrap")  # weakest first
MEMORY_MODULE_POLICIES = ("withhold", "allow")


def default_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(HOME_VARIABLE) or DEFAULT_HOME).expanduser()


def bundled_tasks() -> Path:
    """The task suites shipped beside the package in a source checkout."""
    return Path(__file__).resolve().parent.parent / "tasks"


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as err:
        raise ConfigError(f"{name}={raw!r} is not a number") from err
    if not math.isfinite(value):
        raise ConfigError(f"{name}={raw!r} is not a finite number")
    return value


def host_port(address: str) -> tuple[str, int]:
    """HOST:PORT ([V6]:PORT for IPv6) as (host, port); a bare PORT means loopback."""
    host, sep, port = address.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", address
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--metrics-listen {address!r} is not HOST:PORT",
            hint="for example 127.0.0.1:9464 (keep it on loopback, or behind a proxy)",
        )
    return host, int(port)


def loopback_host(host: str) -> bool:
    """Whether a host name or address (an IPv4-mapped one too) is this host's loopback."""
    if host == "localhost":
        return True
    try:
        address = ip_address(host.removeprefix("[").removesuffix("]").split("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


@dataclass(frozen=True)
class Config:
    data_dir: Path = field(default_factory=default_home)
    task_dirs: tuple[Path, ...] = ()
    # "unix:PATH" or "HOST:PORT", one or more; empty: the socket in the data dir
    listen: tuple[str, ...] = ()
    insecure: bool = False  # plaintext TCP, on loopback only
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None  # set: TLS clients need a certificate it signed (mTLS)
    tokens_file: Path | None = None  # bearer tokens, hashed (see jouled.auth.TokenStore)
    peer_rules: tuple[PeerRule, ...] = ()  # Unix-socket peers -> roles
    own_uid_operator: bool = True  # the daemon's own uid and root are operators on the socket
    socket_group: str = ""  # the Unix socket's group (mode 0660); empty: owner only (0600)
    checkout_root: Path | None = None  # SWE-bench checkouts: CHECKOUT_ROOT/<instance_id>
    # SWE-bench environments (see jouled.contracts.swebench_env); None: the daemon's own
    # interpreter, for pytest-run instances only.
    swebench_envs: Path | None = None
    # The opt-in container runtime for SWE-bench instances: "docker", "podman" or "" (none).
    swebench_container: str = ""
    min_free_mb: int = 256  # below this much free space in the data dir, attempts are refused
    # Each attempt's writable space: a tmpfs of this many MiB where the daemon may mount one
    # (jouled.pipeline.scratch); 0: none, and a run is killed when it takes the data dir's
    # file system below min_free_mb.
    attempt_disk_mb: int = 1024
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
    queue_limit: int = 64  # attempts waiting for a worker; beyond that Submit is refused
    attempts_per_agent: int = 8  # attempts one credential may have waiting or running
    op_windows_max: int = 32  # agent-opened op windows open at once, all agents together
    op_windows_per_agent: int = 4  # ... and per agent
    # An op window open longer is closed as abandoned; a whole-host one delays grading by
    # at most this much (jouled.opwindows).
    op_window_max_s: float = 300.0
    heartbeat_s: float = 5.0  # a queued or running call hears from the daemon this often
    grace_s: float = 30.0
    origin: str = ""  # checkpoint origin line; empty: derived from host and key
    min_isolation: str = "bwrap"  # below this, the daemon refuses to grade
    min_integrity: str = "none"  # ... and below this report integrity (INTEGRITY_LEVELS)
    # Modules that hand Python code raw memory (ctypes, cffi): "withhold" them from every
    # graded run, or "allow" them (for environments that cannot do without; runs `reduced`)
    memory_modules: str = "withhold"
    solvers_file: Path | None = None  # agent CLIs the daemon may run as solvers (TOML)
    metrics_listen: str = ""  # "HOST:PORT" (or "PORT": loopback) of the metrics endpoint; "": none
    # Solvers the metrics name in their `solver` label, beside the daemon-hosted ones;
    # every other solver is counted under one label value (jouled.metrics.OTHER_SOLVER).
    metrics_solvers: tuple[str, ...] = ()

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
        if self.min_integrity not in INTEGRITY_LEVELS:
            raise ConfigError(
                f"--min-integrity {self.min_integrity!r} is not one of "
                f"{', '.join(INTEGRITY_LEVELS)}"
            )
        if self.memory_modules not in MEMORY_MODULE_POLICIES:
            raise ConfigError(
                f"--memory-modules {self.memory_modules!r} is not one of "
                f"{', '.join(MEMORY_MODULE_POLICIES)}",
                hint="withhold keeps ctypes and cffi out of graded runs (the default); allow "
                "loads them where the environment asks, and signs those runs reduced",
            )
        for name, watts in (
            ("JOULED_ACTIVE_WATTS", self.active_watts),
            ("JOULED_WATTS_PER_CORE", self.watts_per_core),
        ):
            if not (math.isfinite(watts) and watts > 0):
                raise ConfigError(
                    f"{name} must be a positive number of watts, got {watts}",
                    hint=f"unset {name} for the default, or set it to the host's figure",
                )
        if self.workers < 1:
            raise ConfigError("workers must be at least 1")
        if self.queue_limit < 0:
            raise ConfigError("--queue-limit must be 0 or more")
        if self.attempts_per_agent < 1:
            raise ConfigError("--attempts-per-agent must be at least 1")
        if self.op_windows_max < 0 or self.op_windows_per_agent < 0:
            raise ConfigError("the op window limits must be 0 or more")
        if self.op_window_max_s <= 0:
            raise ConfigError("--op-window-max-s must be positive")
        if self.min_free_mb < 0:
            raise ConfigError("--min-free-mb must be 0 or more")
        if not 0 <= self.attempt_disk_mb <= 1 << 20:
            raise ConfigError(
                f"--attempt-disk-mb {self.attempt_disk_mb} is out of range",
                hint="give 0 (no tmpfs) to 1048576 MiB",
            )
        if self.heartbeat_s <= 0:
            raise ConfigError("the heartbeat interval must be positive")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key")
        if self.metrics_listen:
            host, _ = host_port(self.metrics_listen)
            if not loopback_host(host) and not (self.tls_cert and self.tokens_file):
                raise ConfigError(
                    f"--metrics-listen {self.metrics_listen!r} is not a loopback address, and "
                    "metrics served beyond this host need TLS and bearer tokens",
                    hint="keep it on loopback (127.0.0.1:PORT, or a bare PORT), or give "
                    "--tls-cert, --tls-key and --tokens: scrapers then send an auditor's or "
                    "operator's token over HTTPS",
                )
        for name in self.metrics_solvers:
            limits.name("--metrics-solver", name)
        if isinstance(self.listen, str):
            return replace(self, listen=(self.listen,) if self.listen else ()).validated()
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
        return self.data_dir / SOCKET_NAME

    @property
    def work_root(self) -> Path:
        return self.data_dir / "work"

    @property
    def private_socket_path(self) -> Path:
        """gRPC's own listener behind the Unix socket (only the daemon's user reaches it)."""
        return self.data_dir / "rpc.sock"

    @property
    def registrations_path(self) -> Path:
        """SWE-bench records registered over the API, replayed at start."""
        return self.data_dir / "swebench-records.jsonl"

    @property
    def journal_refused_path(self) -> Path:
        """Journal rows refused at start (never signed from), one JSON line each."""
        return self.data_dir / "journal-refused.jsonl"

    @property
    def tree_digests_path(self) -> Path:
        """SWE-bench checkout digests, by checkout, with the file metadata they were taken at."""
        return self.data_dir / "swebench-trees.json"

    @property
    def listen_addresses(self) -> tuple[str, ...]:
        """The addresses as gRPC spells them."""
        return self.listen or (f"unix:{self.socket_path}",)

    @property
    def listen_address(self) -> str:
        return self.listen_addresses[0]

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """Where the metrics endpoint listens (host, port); None: it is off."""
        return host_port(self.metrics_listen) if self.metrics_listen else None

    @property
    def hostname(self) -> str:
        return socket.gethostname()
