"""`jb-client run`, `frontier` and `export` across a fleet of daemons."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from jb_client.cli_common import (
    emit,
    fail,
    render,
    state,
)

if TYPE_CHECKING:
    from jb_client import fleet, render_fleet
    from jb_client.api import Client
    from jb_client.documents import Receipt
else:
    from jb_client.later import Later

    render_fleet = Later("jb_client.render_fleet")  # rich loads only where a table prints

from jouled.errors import JouledError, UsageError, VerificationError


def is_fleet() -> bool:
    return len(state.targets) > 1 or state.fleet is not None or bool(state.pins)


def _fleet_hosts(need_targets: bool = True) -> list[fleet.Host]:
    from jb_client import fleet

    targets = state.targets
    if not targets and not need_targets:
        # Offline, a pin names a host of the export by its target (or fleet-file name).
        targets = tuple(p.partition("=")[0] for p in state.pins)
    if not targets and state.fleet is None and need_targets:
        from jb_client.api import default_target

        targets = (default_target(),)
    hosts = fleet.fleet_hosts(targets, state.pins, state.fleet)
    if need_targets and not hosts:
        raise UsageError("the fleet has no host", hint="give --target more than once, or --fleet")
    return hosts


def _fleet_client(host: fleet.Host) -> Client:
    from jb_client.api import Client

    return Client(
        host.target,
        token=host.token if host.token is not None else state.token,
        ca=host.ca or state.ca,
        cert=state.cert,
        key=state.key,
        insecure=host.insecure if host.insecure is not None else state.insecure,
    )


def fleet_run(
    suite: str, solvers: str, rollouts: int, run_id: str, model: str, as_json: bool
) -> None:
    from jb_client import fleet

    names = [s.strip() for s in solvers.split(",") if s.strip()]
    given, run_id = run_id, run_id or os.urandom(6).hex()

    def started(host: str, unit: fleet.Unit) -> None:
        render.err.print(
            f"{host}: {unit.solver} r{unit.rollout} {unit.task_id}", highlight=False, markup=False
        )

    def done(host: str, unit: fleet.Unit, receipt: Receipt) -> None:
        if not as_json:
            render_fleet.fleet_receipt_line(host, receipt)

    try:
        hosts = _fleet_hosts()
        result = fleet.run_suite(
            hosts,
            suite,
            names,
            run_id=run_id,
            rollouts=rollouts,
            model=model,
            client_for=_fleet_client,
            on_start=started,
            on_receipt=done,
            resume=bool(given),
        )
        for host, why in sorted(result.gone.items()):
            render.err.print(render.marked("[yellow]{} left the fleet:[/] {}", host, why))
        for r in result.retried:
            render.err.print(
                render.marked(
                    "[yellow]retried[/] {} on {} (was {})", r["task_id"], r["to"], r["from"]
                )
            )
        merged = fleet.live_frontier(hosts, _fleet_client, suite=suite)
    except JouledError as err:
        fail(err)
    if as_json:
        emit({**result.to_json(), "frontier": merged.to_dict()})
    else:
        render_fleet.fleet_frontier_table(merged)


def fleet_frontier(
    suite: str, axis: str, export: Path | None, as_json: bool, merge_digests: bool
) -> None:
    from jb_client import fleet

    try:
        if export is not None:
            if not export.is_dir():
                raise UsageError(
                    f"{export} is not a fleet export directory",
                    hint="a fleet's --from-export is the directory `export --out DIR` wrote",
                )
            hosts = _fleet_hosts(need_targets=False)
            merged = fleet.merged_frontier(
                fleet.load_export_dir(export, hosts),
                suite=suite or None,
                axis=axis,
                merge_digests=merge_digests,
            )
        else:
            merged = fleet.live_frontier(
                _fleet_hosts(),
                _fleet_client,
                suite=suite or None,
                axis=axis,
                merge_digests=merge_digests,
            )
    except JouledError as err:
        if as_json and isinstance(err, VerificationError):
            emit({"ok": False, "error": err.message})
        fail(err)
    if as_json:
        emit(merged.to_dict())
    else:
        render_fleet.fleet_frontier_table(merged)


def fleet_export(out: Path, as_json: bool) -> None:
    from jb_client import fleet

    try:
        manifest = fleet.export_fleet(_fleet_hosts(), out, _fleet_client)
    except JouledError as err:
        fail(err)
    if as_json:
        emit(manifest.to_dict())
        return
    for h in manifest.hosts:
        render.err.print(
            f"{h.host}: {h.entries} entries -> {out / str(h.file)} (key "
            f"{h.keyids[0][:16]}, checkpoint size {h.checkpoint.size})",
            highlight=False,
        )
    for u in manifest.unreachable:
        render.err.print(render.marked("[yellow]{} not exported:[/] {}", u.host, u.reason))
    render.err.print(f"manifest -> {out / fleet.MANIFEST}")
