"""Several metered hosts, one jouled each: spread a suite, merge verified ledgers.

A fleet is a list of hosts, each a target with the public key pinned for it out
of band (`--pin TARGET=KEYFILE`, or a fleet file). Nothing a host says about
its own key is trusted: each host's export is verified against that host's
pinned key before any of its results reach a merged frontier or a merged
export, and a host that fails verification stops the merge, named.

Spreading: every attempt (solver, rollout, task) goes to the live host that
ranks highest for it by rendezvous hashing (`assign`), so the same suite on
the same fleet lands the same way every time, and when a host goes away only
its own attempts move, each to its next-ranked live host. An attempt keeps
its idempotency key wherever it runs; the merged frontier counts each key
once (`jouled.frontier_fleet.count_once`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import tempfile
import threading
import tomllib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jb_client.api import Client, checkpoint_history_path, parquet_path
from jb_client.documents import Receipt
from jb_client.errors import ClientError
from jb_client.fleet_documents import (
    FleetDuplicate,
    FleetExport,
    FleetFrontier,
    FleetHost,
    FleetRow,
    HostCheckpoint,
    Unreachable,
)

from jouled.errors import JouledError, Kind, UsageError, VerificationError
from jouled.frontier_fleet import HostLedger, fleet_frontier
from jouled.ledger.checkpoint import parse_note
from jouled.ledger.trust import PinnedKey, load_pinned
from jouled.ledger.verify import split_notes, verify_file

MANIFEST = "manifest.json"
EXPORT_FORMAT = "jouled-fleet-export/1"


@dataclass(frozen=True)
class Host:
    """One daemon of the fleet: its name in rows, where to reach it, its pinned keys."""

    name: str
    target: str
    pinned: tuple[PinnedKey, ...]
    ca: Path | None = None
    insecure: bool | None = None
    token: str | None = None

    @property
    def keyids(self) -> list[str]:
        return sorted({p.keyid for p in self.pinned})


ClientFor = Callable[[Host], Client]


# -- the fleet ----------------------------------------------------------------------------


def _pins(pairs: Iterable[str]) -> dict[str, Path]:
    pins: dict[str, Path] = {}
    for pair in pairs:
        host, sep, keyfile = pair.partition("=")
        if not sep or not host or not keyfile:
            raise UsageError(f"--pin {pair!r} is not HOST=KEYFILE")
        pins[host] = Path(keyfile)
    return pins


def load_fleet_file(path: Path) -> list[Host]:
    """A fleet file (TOML): one `[[host]]` table per daemon.

    `target` (required), `name` (default: the target), `pubkey` (a PEM file) or
    `trust` (a JSON trust file, for keys rotated with ranges), `ca`, `insecure`.
    Relative paths are read from the fleet file's folder.
    """
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"cannot read fleet file {path}: {err.strerror}") from err
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"fleet file {path} is not TOML: {err}") from err
    tables = doc.get("host")
    if not isinstance(tables, list) or not tables:
        raise UsageError(f"fleet file {path} needs at least one [[host]] table")
    hosts = []
    for i, t in enumerate(tables):
        where = f"{path} host {i}"
        if not isinstance(t, dict) or not isinstance(t.get("target"), str):
            raise UsageError(f'{where}: needs target = "unix:PATH" or "HOST:PORT"')
        pub, trust = t.get("pubkey"), t.get("trust")
        if not pub and not trust:
            raise UsageError(
                f'{where}: pin its key with pubkey = "FILE" or trust = "FILE"',
                hint="a fleet merges only ledgers verified against keys pinned out of band",
            )
        pinned = load_pinned(
            [path.parent / str(pub)] if pub else [], path.parent / str(trust) if trust else None
        )
        ca = t.get("ca")
        hosts.append(
            Host(
                name=str(t.get("name") or t["target"]),
                target=t["target"],
                pinned=tuple(pinned),
                ca=path.parent / str(ca) if ca else None,
                insecure=bool(t["insecure"]) if "insecure" in t else None,
            )
        )
    return hosts


def fleet_hosts(
    targets: Sequence[str], pins: Sequence[str] = (), fleet_file: Path | None = None
) -> list[Host]:
    """The hosts named by a fleet file and by `--target`s, each with its pinned keys.

    A `--pin` names a host by its target or its fleet-file name. Every host must
    have a key pinned: a fleet never merges a ledger it could not verify.
    """
    hosts = load_fleet_file(fleet_file) if fleet_file is not None else []
    known = {h.target for h in hosts} | {h.name for h in hosts}
    pinned = _pins(pins)
    for target in targets:
        if target not in known:
            keyfile = pinned.get(target)
            if keyfile is None:
                raise UsageError(
                    f"no key pinned for {target}",
                    hint=f"pin its public key: --pin {target}=jouled.pub (copied from that "
                    "host's data dir out of band), or list it in a --fleet file",
                )
            hosts.append(Host(target, target, tuple(load_pinned([keyfile], None))))
            known.add(target)
    extra = set(pinned) - {h.target for h in hosts} - {h.name for h in hosts}
    if extra:
        raise UsageError(f"--pin names no host of the fleet: {', '.join(sorted(extra))}")
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise UsageError("two hosts of the fleet have the same name")
    return hosts


# -- spreading a suite --------------------------------------------------------------------


def _rank(unit: str, host: str) -> bytes:
    return hashlib.sha256(f"{unit}\0{host}".encode()).digest()


def assign(unit: str, live: Iterable[str]) -> str:
    """The live host an attempt runs on: the highest rendezvous rank (deterministic)."""
    return max(live, key=lambda host: _rank(unit, host))


@dataclass(frozen=True)
class Unit:
    """One attempt of a run, and the idempotency key it keeps on every host."""

    task_id: str
    solver: str
    rollout: int
    key: str


def units_of(
    task_ids: Sequence[str], solvers: Sequence[str], rollouts: int, run_id: str, model: str
) -> list[Unit]:
    # The same key as a one-host run: re-running a run id resumes instead of duplicating.
    return [
        Unit(t, s, r, f"{run_id}:{s}:{model}:{r}:{t}")
        for s in solvers
        for r in range(rollouts)
        for t in task_ids
    ]


@dataclass
class FleetRun:
    run_id: str
    receipts: dict[str, Receipt] = field(default_factory=dict)  # by unit key, naming its host
    gone: dict[str, str] = field(default_factory=dict)  # host -> why it left
    retried: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "receipts": [r.to_dict() for r in self.receipts.values()],
            "hosts_gone": [{"host": h, "reason": r} for h, r in sorted(self.gone.items())],
            "retried": self.retried,
        }


OnReceipt = Callable[[str, Unit, Receipt], None]
OnStart = Callable[[str, Unit], None]


class _Spread:
    """Per-host queues, a worker thread per host, and moves when a host goes away."""

    def __init__(self, hosts: Sequence[Host], units: Sequence[Unit], result: FleetRun) -> None:
        self.live = [h.name for h in hosts]
        self.queues: dict[str, deque[Unit]] = {h: deque() for h in self.live}
        for u in units:
            self.queues[assign(u.key, self.live)].append(u)
        self.pending = len(units)
        self.result = result
        self.failure: JouledError | None = None
        self.cond = threading.Condition()

    def next(self, host: str) -> Unit | None:
        with self.cond:
            while True:
                if self.failure is not None or self.pending == 0 or host not in self.live:
                    return None
                if self.queues[host]:
                    return self.queues[host].popleft()
                self.cond.wait()

    def done(self, host: str, unit: Unit, receipt: Receipt) -> None:
        with self.cond:
            self.result.receipts[unit.key] = receipt
            self.pending -= 1
            self.cond.notify_all()

    def lose(self, host: str, unit: Unit, why: str) -> None:
        """The host went away while `unit` was its: move its work to the live hosts."""
        with self.cond:
            self.live.remove(host)
            self.result.gone[host] = why
            moved = [unit, *self.queues.pop(host)]
            if not self.live:
                self.failure = ClientError(
                    f"every host of the fleet went away ({len(moved)} attempts left)",
                    Kind.UNAVAILABLE,
                    hint="see each host's reason above",
                )
            else:
                for u in moved:
                    to = assign(u.key, self.live)
                    self.queues[to].append(u)
                    self.result.retried.append(
                        {"key": u.key, "task_id": u.task_id, "from": host, "to": to}
                    )
            self.cond.notify_all()

    def fail(self, err: JouledError) -> None:
        with self.cond:
            self.failure = self.failure or err
            self.cond.notify_all()


def run_suite(
    hosts: Sequence[Host],
    suite: str,
    solvers: Sequence[str],
    *,
    run_id: str,
    rollouts: int = 1,
    model: str = "",
    client_for: ClientFor,
    on_start: OnStart | None = None,
    on_receipt: OnReceipt | None = None,
    resume: bool = False,
) -> FleetRun:
    """Run daemon-hosted solvers over a suite, spread across the fleet.

    Each attempt runs on one host; when a host cannot be reached, it leaves the
    fleet for this run and its attempts (the one it was running included) move
    to the others with their idempotency keys. Hosts unreachable at the start
    are left out the same way. Every host that takes part must grade the suite's
    tasks at the same digests. `on_receipt` is called on the host's worker
    thread before it takes its next attempt.

    With `resume` (a run id used before), every live host is first asked for
    each attempt's key: an attempt that already has a result anywhere in the
    fleet is not run again, wherever the spread would put it now.
    """
    result = FleetRun(run_id)
    live: list[Host] = []
    digests: dict[str, str] = {}
    for host in hosts:
        try:
            with client_for(host) as c:
                found = {t.task_id: t.digest for t in c.tasks(suite)}
        except ClientError as err:
            if err.kind != Kind.UNAVAILABLE:
                raise
            result.gone[host.name] = err.message
            continue
        if not found:
            raise UsageError(f"no tasks in suite {suite!r} on {host.name}")
        if digests and found != digests:
            raise UsageError(
                f"{host.name} grades suite {suite!r} differently from {live[0].name}: "
                + _digest_difference(digests, found),
                hint="give every host of the fleet the same tasks",
            )
        digests = found
        live.append(host)
    if not live:
        raise ClientError("no host of the fleet can be reached", Kind.UNAVAILABLE)
    units = units_of(sorted(digests), solvers, rollouts, run_id, model)
    if resume:
        units = _not_yet_run(live, units, result, client_for)
    spread = _Spread(live, units, result)

    def work(host: Host) -> None:
        try:
            with client_for(host) as c:
                while (unit := spread.next(host.name)) is not None:
                    if on_start is not None:
                        on_start(host.name, unit)
                    try:
                        receipt = c.run_solver(
                            unit.task_id,
                            unit.solver,
                            run_id=run_id,
                            rollout=unit.rollout,
                            idempotency_key=unit.key,
                            model=model,
                        )
                    except ClientError as err:
                        if err.kind != Kind.UNAVAILABLE:
                            raise
                        spread.lose(host.name, unit, err.message)
                        return
                    receipt.set("host", host.name)  # beside the daemon's fields, in its JSON
                    spread.done(host.name, unit, receipt)
                    if on_receipt is not None:
                        on_receipt(host.name, unit, receipt)
        except JouledError as err:
            spread.fail(err if host.name in err.message else _on(host, err))

    threads = [threading.Thread(target=work, args=(h,), name=f"fleet-{h.name}") for h in live]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if spread.failure is not None:
        raise spread.failure
    return result


def _not_yet_run(
    hosts: Sequence[Host], units: Sequence[Unit], result: FleetRun, client_for: ClientFor
) -> list[Unit]:
    """The units no host has a result for; the others' receipts go into `result`."""
    for host in hosts:
        with client_for(host) as c:
            for u in units:
                if u.key in result.receipts:
                    continue
                try:
                    receipt = c.receipt(idempotency_key=u.key)
                except ClientError as err:
                    if err.kind != Kind.NOT_FOUND:
                        raise _on(host, err) from None
                    continue
                receipt.set("host", host.name)
                receipt.replayed = True
                result.receipts[u.key] = receipt
    return [u for u in units if u.key not in result.receipts]


def _on(host: Host, err: JouledError) -> JouledError:
    """The error, saying which host it came from."""
    return ClientError(f"{host.name}: {err.message}", err.kind, hint=err.hint)


def _digest_difference(a: dict[str, str], b: dict[str, str]) -> str:
    only = sorted(set(a) ^ set(b))
    if only:
        return f"tasks {', '.join(only[:5])} are on one and not the other"
    changed = sorted(t for t in a if a[t] != b[t])
    return f"tasks {', '.join(changed[:5])} have other digests"


# -- verified ledgers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Verified:
    """One host's export, verified against its pinned key."""

    host: str
    target: str
    path: Path
    keyids: list[str]
    origin: str
    entries: int
    checkpoint: HostCheckpoint  # the newest in the export's history
    results: list[dict[str, Any]]
    ops: list[dict[str, Any]]

    def manifest_entry(self, root: Path) -> FleetHost:
        """The host as a fleet export's manifest names it: with its export's file."""
        return FleetHost(
            host=self.host,
            target=self.target,
            file=str(self.path.relative_to(root)),
            keyids=self.keyids,
            origin=self.origin,
            entries=self.entries,
            checkpoint=self.checkpoint,
        )

    def frontier_entry(self) -> FleetHost:
        """The host as a fleet's frontier names it: its checkpoint's size and root."""
        return FleetHost(
            host=self.host,
            target=self.target,
            keyids=self.keyids,
            origin=self.origin,
            entries=self.entries,
            checkpoint=HostCheckpoint(size=self.checkpoint.size, root=self.checkpoint.root),
        )


def verify_host_export(
    host: Host, path: Path, *, target: str = "", claimed_keyids: Sequence[str] = ()
) -> Verified:
    """Verify `path` against the host's pinned keys; VerificationError names the host."""
    try:
        history_file = checkpoint_history_path(path)
        history = (
            split_notes(history_file.read_text(encoding="utf-8")) if history_file.is_file() else []
        )
        if not history:
            raise VerificationError(
                "the export has no signed checkpoint beside it "
                f"({history_file.name}): its Merkle root is vouched for by nothing"
            )
        parquet = parquet_path(path)
        report = verify_file(
            path,
            list(host.pinned),
            signatures=True,
            parquet=parquet if parquet.is_file() else None,
            history=history,
        )
        stray = sorted(set(claimed_keyids) - set(host.keyids))
        if stray:
            raise VerificationError(
                f"the manifest names key {stray[0][:16]}, which is not pinned for this host"
            )
    except VerificationError as err:
        raise VerificationError(
            f"{host.name}: its ledger does not verify against its pinned key "
            f"({', '.join(k[:16] for k in host.keyids)}), so it is not merged: {err.message}",
            seq=err.seq,
            hint=err.hint,
        ) from None
    except OSError as err:
        raise UsageError(f"{host.name}: cannot read {err.filename}: {err.strerror}") from None
    note = history[-1]
    cp, _ = parse_note(note)
    results, ops = _bodies(path)
    return Verified(
        host=host.name,
        target=target or host.target,
        path=path,
        keyids=report.keyids,
        origin=report.origin,
        entries=report.entries,
        checkpoint=HostCheckpoint(size=cp.size, root=cp.root.hex(), note=note),
        results=results,
        ops=ops,
    )


def _bodies(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The `result` and `op` bodies of a verified export, in seq order."""
    bodies: dict[str, list[dict[str, Any]]] = {"result": [], "op": []}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                doc = json.loads(base64.b64decode(json.loads(line)["payload"]))
                if doc["kind"] in bodies:
                    bodies[doc["kind"]].append(doc["body"])
    return bodies["result"], bodies["op"]


def _slug(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "host"
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}-{n}"
    taken.add(slug)
    return slug


@dataclass
class Collected:
    """Every reachable host's verified ledger; the unreachable ones, with why."""

    ledgers: list[Verified]
    unreachable: dict[str, str]


def collect(hosts: Sequence[Host], out_dir: Path, client_for: ClientFor) -> Collected:
    """Export each host's ledger into `out_dir` and verify it against the host's key.

    An unreachable host is left out and named; one whose export does not verify
    stops the whole merge (VerificationError naming the host).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    ledgers, unreachable = [], {}
    for host in hosts:
        path = out_dir / f"{_slug(host.name, taken)}.jsonl"
        try:
            with client_for(host) as c:
                c.export(path)
        except ClientError as err:
            if err.kind != Kind.UNAVAILABLE:
                raise _on(host, err) from None
            unreachable[host.name] = err.message
            continue
        ledgers.append(verify_host_export(host, path))
    return Collected(ledgers, unreachable)


def _unreachable(collected: Collected) -> list[Unreachable]:
    return [Unreachable(host=h, reason=r) for h, r in sorted(collected.unreachable.items())]


def write_manifest(out_dir: Path, collected: Collected) -> FleetExport:
    manifest = FleetExport(
        format=EXPORT_FORMAT,
        hosts=[v.manifest_entry(out_dir) for v in collected.ledgers],
        unreachable=_unreachable(collected),
    )
    tmp = out_dir / (MANIFEST + ".tmp")
    text = json.dumps(manifest.to_dict(), indent=2, sort_keys=True)
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(out_dir / MANIFEST)
    return manifest


def export_fleet(hosts: Sequence[Host], out_dir: Path, client_for: ClientFor) -> FleetExport:
    """A merged export: each host's export (verifiable alone) and a manifest naming them."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{out_dir} is a file; a fleet export is a directory")
    return write_manifest(out_dir, collect(hosts, out_dir, client_for))


def load_export_dir(root: Path, hosts: Sequence[Host]) -> Collected:
    """The parts of a merged export, each verified against its host's pinned key."""
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(
            f"{root} is not a fleet export: cannot read {MANIFEST}: {err.strerror}"
        ) from None
    except ValueError as err:
        raise UsageError(f"{root / MANIFEST} is not JSON: {err}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
        raise UsageError(f"{root / MANIFEST} is not a {EXPORT_FORMAT} manifest")
    by_name = {h.name: h for h in hosts} | {h.target: h for h in hosts}
    ledgers = []
    for part in manifest.get("hosts", []):
        name = str(part.get("host", ""))
        host = by_name.get(name) or by_name.get(str(part.get("target", "")))
        if host is None:
            raise UsageError(
                f"no key pinned for {name}, a host of the export",
                hint=f"pin its public key: --pin {name}=KEYFILE, or list it in a --fleet file",
            )
        file = (root / str(part.get("file", ""))).resolve()
        if root.resolve() not in file.parents:
            raise UsageError(f"{root / MANIFEST} names a file outside the export: {file}")
        verified = verify_host_export(
            Host(name, host.target, host.pinned),
            file,
            target=str(part.get("target", "")),
            claimed_keyids=[str(k) for k in part.get("keyids", [])],
        )
        claimed = part.get("checkpoint") or {}
        if claimed.get("root") != verified.checkpoint.root:
            raise VerificationError(
                f"{name}: the manifest's checkpoint is not the newest in its export's history"
            )
        ledgers.append(verified)
    unreachable = {str(u["host"]): str(u["reason"]) for u in manifest.get("unreachable", [])}
    return Collected(ledgers, unreachable)


def merged_frontier(
    collected: Collected,
    *,
    suite: str | None = None,
    axis: str = "joules",
    merge_digests: bool = False,
) -> FleetFrontier:
    doc = fleet_frontier(
        [HostLedger(v.host, v.results, v.ops) for v in collected.ledgers],
        suite=suite,
        axis=axis,
        merge_digests=merge_digests,
    )
    return FleetFrontier(
        rows=[FleetRow.parse(r) for r in doc["rows"]],
        summary=[FleetRow.parse(r) for r in doc["summary"]],
        duplicates=[FleetDuplicate.parse(d) for d in doc["duplicates"]],
        hosts=[v.frontier_entry() for v in collected.ledgers],
        unreachable=_unreachable(collected),
    )


def live_frontier(
    hosts: Sequence[Host],
    client_for: ClientFor,
    *,
    suite: str | None = None,
    axis: str = "joules",
    merge_digests: bool = False,
) -> FleetFrontier:
    """Export every reachable host, verify each, and merge their frontiers."""
    with tempfile.TemporaryDirectory(prefix="jb-fleet-") as tmp:
        collected = collect(hosts, Path(tmp), client_for)
        return merged_frontier(collected, suite=suite, axis=axis, merge_digests=merge_digests)
