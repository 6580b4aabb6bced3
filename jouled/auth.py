"""Who may do what: identities, roles, the tokens file and Unix peer rules.

The transport (`api/auth.py`) finds out who is calling: a bearer token over TLS,
or the peer credentials of a Unix-socket connection. This module turns that into
an `Identity` and answers whether the identity may call a method. It knows
nothing of gRPC.

Roles:
- `agent`: list and fetch tasks, submit patches, meter its own operations (op
  windows), read receipts, logs and the frontier;
- `auditor`: read-only: export, checkpoints, proofs, frontier, receipts, logs, keys;
- `operator`: calibrate, register SWE-bench records, run daemon-hosted
  solvers, and everything an agent or auditor may.

A caller without a credential has no role: it gets health and reflection only.
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import os
import pwd
import secrets
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from jouled import limits
from jouled.errors import ConfigError, DeniedError, UsageError

AGENT, OPERATOR, AUDITOR = "agent", "operator", "auditor"
ROLES = (AGENT, OPERATOR, AUDITOR)

# Solver names the daemon itself signs (its hosted solvers); no credential may claim them.
RESERVED_SOLVERS = ("reference", "noop")

_READ = {
    "ListTasks",
    "GetTask",
    "Frontier",
    "BestOfK",
    "GetReceipt",
    "GetLogs",
    "PublicKeys",
    "MeterStatus",
}
PERMISSIONS: dict[str, frozenset[str]] = {
    AGENT: frozenset(_READ | {"FetchTask", "Submit", "OpenWindow", "CloseWindow"}),
    AUDITOR: frozenset(_READ | {"Export", "Checkpoint", "InclusionProof", "ConsistencyProof"}),
}
PERMISSIONS[OPERATOR] = frozenset(
    PERMISSIONS[AGENT] | PERMISSIONS[AUDITOR] | {"Calibrate", "RegisterSwebench", "RunSolver"}
)


@dataclass(frozen=True)
class Identity:
    """A caller the daemon recognised: its name, roles and the solver names it may sign."""

    name: str
    roles: frozenset[str]
    via: str  # how it was recognised: "token", "peer uid 1000", ...
    # None: results carry `name` as their solver (operators may name any solver);
    # a string: the solver name must start with it ("" allows any name).
    solver_prefix: str | None = None

    def may(self, method: str) -> bool:
        return any(method in PERMISSIONS[r] for r in self.roles)

    def check(self, method: str) -> None:
        if not self.may(method):
            wanted = sorted(r for r in ROLES if method in PERMISSIONS[r])
            raise DeniedError(
                f"{self.name} ({', '.join(sorted(self.roles)) or 'no role'}, {self.via}) "
                f"may not call {method}",
                hint=f"{method} needs the role {' or '.join(wanted)}; ask the daemon's "
                "operator for a credential that has it",
            )

    def solver_for(self, requested: str) -> str:
        """The solver name a result of this caller carries; refuses names it may not sign."""
        if requested in RESERVED_SOLVERS:
            raise DeniedError(
                f"solver {requested!r} is reserved to the daemon's own hosted solvers",
                hint="submit under your own solver name; operators run reference and noop "
                "with `jb-client run`",
            )
        prefix = self.solver_prefix
        if prefix is None and OPERATOR in self.roles:
            prefix = ""
        if prefix is None:
            if requested not in ("", self.name):
                raise DeniedError(
                    f"solver {requested!r} is not yours: results of {self.name} are signed "
                    f"as solver {self.name!r}",
                    hint="leave --solver out, or ask for a token bound to a solver prefix",
                )
            return self.name
        if not requested and not self.name.startswith(prefix):
            # The credential's name is not one it may sign: a bare prefix is no solver.
            raise UsageError(
                f"name the solver: {self.name}'s results are signed under {prefix!r}",
                hint=f"give a solver name that starts with {prefix!r} ({prefix}<something>)",
            )
        solver = requested or self.name
        if not solver.startswith(prefix):
            raise DeniedError(
                f"solver {requested!r} does not start with {prefix!r}, the prefix your "
                "credential may sign",
                hint=f"name your solver {prefix}<something>",
            )
        return limits.name("solver", solver)


# -- bearer tokens -----------------------------------------------------------------------


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return "jb_" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class TokenStore:
    """Tokens by their sha256; the file never holds a token itself.

    ```toml
    [[token]]
    name = "alice"                 # recorded as the result's agent
    sha256 = "<hex sha256 of the token>"
    roles = ["agent"]
    solver_prefix = "alice/"       # optional: solver names alice may sign
    ```
    """

    by_hash: Mapping[str, Identity] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> TokenStore:
        try:
            raw = path.read_bytes()
        except OSError as err:
            raise ConfigError(
                f"cannot read the tokens file {path}: {err.strerror}",
                hint="create it with `jouled tokens add`",
            ) from err
        if os.stat(path).st_mode & 0o022:
            raise ConfigError(
                f"the tokens file {path} is writable by others",
                hint=f"chmod go-w {path}: whoever can write it can grant themselves any role",
            )
        try:
            doc = tomllib.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise ConfigError(f"the tokens file {path} is not TOML: {err}") from err
        by_hash: dict[str, Identity] = {}
        entries = doc.get("token", [])
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: `token` must be an array of tables ([[token]])")
        for i, entry in enumerate(entries):
            where = f"{path}: token {i}"
            if not isinstance(entry, dict):
                raise ConfigError(f"{where} is not a table")
            digest = str(entry.get("sha256", "")).lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ConfigError(
                    f"{where}: sha256 must be 64 hex digits (the hash, not the token)",
                    hint="`jouled tokens add` writes entries in the right form",
                )
            try:
                name = limits.name("name", str(entry.get("name", "")))
            except UsageError as err:
                raise ConfigError(f"{where}: {err.message}") from err
            roles = _roles(entry.get("roles", []), where)
            prefix = entry.get("solver_prefix")
            if prefix is not None and (not isinstance(prefix, str) or not _prefix_ok(prefix)):
                raise ConfigError(f"{where}: solver_prefix {prefix!r} is not a valid name prefix")
            if digest in by_hash:
                raise ConfigError(f"{where}: the same token hash appears twice")
            by_hash[digest] = Identity(name, roles, "token", prefix)
        return cls(by_hash)

    def lookup(self, token: str) -> Identity | None:
        return self.by_hash.get(hash_token(token))


def _prefix_ok(prefix: str) -> bool:
    return prefix == "" or limits.NAME_RE.fullmatch(prefix) is not None


def _roles(value: object, where: str) -> frozenset[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: roles must be a non-empty list of {', '.join(ROLES)}")
    bad = [r for r in value if r not in ROLES]
    if bad:
        raise ConfigError(f"{where}: unknown role {bad[0]!r}; roles are {', '.join(ROLES)}")
    return frozenset(value)


def add_token(path: Path, name: str, roles: Iterable[str], solver_prefix: str | None) -> str:
    """Append a fresh token's hash to the tokens file; returns the token (shown once)."""
    name = limits.name("name", name)
    role_set = _roles(list(roles), "--role")
    if solver_prefix is not None and not _prefix_ok(solver_prefix):
        raise UsageError(f"solver prefix {solver_prefix!r} is not a valid name prefix")
    token = new_token()
    lines = [
        "[[token]]",
        f'name = "{name}"',
        f'sha256 = "{hash_token(token)}"',
        "roles = [" + ", ".join(f'"{r}"' for r in sorted(role_set)) + "]",
    ]
    if solver_prefix is not None:
        lines.append(f'solver_prefix = "{solver_prefix}"')
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as err:
        raise UsageError(
            f"cannot write the tokens file {path}: {err.strerror}",
            hint="--tokens names a file (created if missing), e.g. $JOULED_HOME/tokens.toml",
        ) from None
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n\n")
    TokenStore.load(path)  # the file still parses
    return token


# -- Unix peers --------------------------------------------------------------------------


@dataclass(frozen=True)
class PeerRule:
    """`uid:N`, `user:NAME` or `group:NAME` (or `gid:N`) mapped to roles."""

    kind: str
    who: str
    roles: frozenset[str]

    @classmethod
    def parse(cls, spec: str) -> PeerRule:
        left, sep, right = spec.partition("=")
        kind, sep2, who = left.partition(":")
        if not sep or not sep2 or kind not in ("uid", "user", "gid", "group") or not who:
            raise ConfigError(
                f"peer rule {spec!r} is not KIND:WHO=ROLE[,ROLE]",
                hint="for example user:alice=agent, uid:1001=auditor, group:jouled-agents=agent",
            )
        if kind in ("uid", "gid") and not who.isdigit():
            raise ConfigError(f"peer rule {spec!r}: {kind} must be a number")
        roles = _roles([r.strip() for r in right.split(",") if r.strip()], f"peer rule {spec!r}")
        return cls(kind, who, roles)

    def matches(self, uid: int, user: str, gids: set[int], groups: set[str]) -> bool:
        if self.kind == "uid":
            return uid == int(self.who)
        if self.kind == "user":
            return user == self.who
        if self.kind == "gid":
            return int(self.who) in gids
        return self.who in groups


@dataclass(frozen=True)
class PeerRules:
    """Roles of Unix-socket peers, by the uid and groups the kernel reports for them.

    The daemon's own uid and root are operators unless `own_uid_operator` is off,
    so a local daemon works as before for the user who started it.
    """

    rules: tuple[PeerRule, ...] = ()
    daemon_uid: int = field(default_factory=os.getuid)
    own_uid_operator: bool = True

    def identify(self, uid: int, gid: int) -> Identity | None:
        user = _user_name(uid)
        via = f"peer uid {uid}"
        roles: set[str] = set()
        if self.own_uid_operator and uid in (0, self.daemon_uid):
            roles.add(OPERATOR)
        if self.rules:
            gids = {gid}
            with contextlib.suppress(KeyError, OSError):
                gids.update(os.getgrouplist(user, gid))
            groups = {_group_name(g) for g in gids}
            for rule in self.rules:
                if rule.matches(uid, user, gids, groups):
                    roles |= rule.roles
        if not roles:
            return None
        return Identity(user, frozenset(roles), via)


def _user_name(uid: int) -> str:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid-{uid}"
    return name if limits.NAME_RE.fullmatch(name) else f"uid-{uid}"


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
