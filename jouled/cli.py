"""`jouled`: the daemon's command line. It maps flags onto Config and calls the library."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from jouled.config import MEMORY_MODULE_POLICIES, Config
from jouled.documents.bodies import KeyRotationBody
from jouled.errors import JouledError, UsageError

app = typer.Typer(
    name="jouled",
    help="The joule-bench evaluation daemon: grades patches, meters energy, signs a ledger.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
keys_app = typer.Typer(help="Manage the ledger's signing key.", no_args_is_help=True)
tasks_app = typer.Typer(help="Inspect and check task suites.", no_args_is_help=True)
meter_app = typer.Typer(help="Inspect this host's energy meters.", no_args_is_help=True)
sandbox_app = typer.Typer(help="Inspect this host's sandbox.", no_args_is_help=True)
tokens_app = typer.Typer(help="Manage bearer tokens for TCP clients.", no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")
app.add_typer(tasks_app, name="tasks")
app.add_typer(meter_app, name="meter")
app.add_typer(keys_app, name="keys")
app.add_typer(sandbox_app, name="sandbox")
swebench_app = typer.Typer(help="Prepare SWE-bench environments.", no_args_is_help=True)
app.add_typer(swebench_app, name="swebench")

EXIT_FAILED_CHECK = 1
EXIT_USAGE = 2
EXIT_STARTUP = 3

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Ledger, key and socket (default $JOULED_HOME)."),
]
Tasks = Annotated[
    list[Path] | None, typer.Option("--tasks", help="A tasks/ dir, suite dir or task dir.")
]


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _fail(err: JouledError, code: int) -> typer.Exit:
    typer.echo(f"jouled: {err.diagnostics()}", err=True)
    return typer.Exit(code)


@app.command()
def serve(
    data_dir: DataDir = None,
    tasks: Tasks = None,
    listen: Annotated[
        list[str] | None,
        typer.Option(
            help="unix:PATH or HOST:PORT; repeat for several (default: the data dir's socket)."
        ),
    ] = None,
    energy: Annotated[str, typer.Option(help="auto, rapl, nvml or estimator.")] = "auto",
    calibrate_seconds: Annotated[
        float, typer.Option(help="Idle calibration at start; 0 reuses the last one.")
    ] = 10.0,
    gpus: Annotated[str | None, typer.Option(help="GPU indices or UUIDs, comma separated.")] = None,
    dram: Annotated[bool, typer.Option(help="Meter DRAM too (RAPL).")] = False,
    attribution: Annotated[str, typer.Option(help="exclusive or shared.")] = "exclusive",
    estimator_mode: Annotated[str, typer.Option(help="wall or cpu.")] = "wall",
    workers: Annotated[int, typer.Option(help="Attempts evaluated at once.")] = 4,
    grace: Annotated[float, typer.Option(help="Seconds running attempts get on stop.")] = 30.0,
    insecure: Annotated[
        bool, typer.Option(help="Plaintext TCP on a loopback address (never off it).")
    ] = False,
    tls_cert: Annotated[Path | None, typer.Option(help="TLS certificate chain (PEM).")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="TLS private key (PEM).")] = None,
    tls_client_ca: Annotated[
        Path | None, typer.Option(help="Require client certificates signed by this CA (mTLS).")
    ] = None,
    tokens: Annotated[
        Path | None,
        typer.Option("--tokens", help="Bearer tokens file (hashed; `jouled tokens add`)."),
    ] = None,
    peer_role: Annotated[
        list[str] | None,
        typer.Option(
            help="Unix-socket peers to roles: uid:N, user:NAME, gid:N or group:NAME = "
            "ROLE[,ROLE]. The daemon's own uid and root are operators."
        ),
    ] = None,
    socket_group: Annotated[
        str, typer.Option(help="Group that may connect to the Unix socket (mode 0660).")
    ] = "",
    checkout_root: Annotated[
        Path | None, typer.Option(help="SWE-bench checkouts, one per instance id.")
    ] = None,
    swebench_envs: Annotated[
        Path | None,
        typer.Option(help="SWE-bench environments (`jouled swebench prepare`), one per version."),
    ] = None,
    swebench_container: Annotated[
        str,
        typer.Option(help="Run SWE-bench instances in their official images: docker or podman."),
    ] = "",
    queue_limit: Annotated[int, typer.Option(help="Attempts that may wait for a worker.")] = 64,
    attempts_per_agent: Annotated[
        int, typer.Option(help="Attempts one agent credential may have waiting or running.")
    ] = 8,
    min_free_mb: Annotated[
        int, typer.Option(help="Refuse new attempts below this much free space (MiB).")
    ] = 256,
    attempt_disk_mb: Annotated[
        int,
        typer.Option(
            help="Each attempt's writable space (MiB): a tmpfs of this size where the daemon "
            "may mount one; 0: none (runs are held to --min-free-mb alone)."
        ),
    ] = 1024,
    op_windows_max: Annotated[
        int, typer.Option(help="Op windows open at once, all agents together.")
    ] = 32,
    op_windows_per_agent: Annotated[int, typer.Option(help="Op windows open per agent.")] = 4,
    op_window_max_s: Annotated[
        float,
        typer.Option(
            help="Seconds an op window may stay open before it is abandoned; also how long a "
            "whole-host window can delay grading."
        ),
    ] = 300.0,
    heartbeat: Annotated[
        float, typer.Option(help="Seconds between heartbeats to a queued or running call.")
    ] = 5.0,
    min_isolation: Annotated[
        str, typer.Option(help="Refuse to grade below this sandbox level: bwrap or process.")
    ] = "bwrap",
    min_integrity: Annotated[
        str,
        typer.Option(
            help="Refuse to grade runs whose report integrity is below this: none, reduced "
            "or monitor (docs/threat-model.md)."
        ),
    ] = "none",
    memory_modules: Annotated[
        str,
        typer.Option(
            help="withhold: no graded run loads ctypes or cffi (an importer gets ImportError); "
            "allow: they load where the environment asks, and those runs are signed reduced "
            "(docs/threat-model.md)."
        ),
    ] = "withhold",
    solvers: Annotated[
        Path | None, typer.Option(help="Agent CLIs to run as solvers (TOML; see deploy/).")
    ] = None,
    metrics_listen: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT",
            help="Serve Prometheus metrics here: on loopback to loopback peers only; "
            "elsewhere over HTTPS to auditors' and operators' tokens (needs --tls-cert, "
            "--tls-key and --tokens).",
        ),
    ] = None,
    metrics_solver: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME",
            help="A solver the metrics name in their solver label, beside the hosted ones "
            "(repeatable); every other solver is counted as _other.",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Serve the jouled.v1 API until SIGTERM or SIGINT."""
    from jouled.api.server import Server
    from jouled.auth import PeerRule
    from jouled.daemon import Daemon

    _setup_logging(verbose)
    try:
        config = Config.from_env(
            data_dir=data_dir,
            task_dirs=tuple(tasks) if tasks else None,
            listen=tuple(listen) if listen else None,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_client_ca=tls_client_ca,
            tokens_file=tokens,
            peer_rules=tuple(PeerRule.parse(r) for r in peer_role or ()),
            socket_group=socket_group,
            checkout_root=checkout_root,
            swebench_envs=swebench_envs,
            swebench_container=swebench_container,
            queue_limit=queue_limit,
            attempts_per_agent=attempts_per_agent,
            min_free_mb=min_free_mb,
            attempt_disk_mb=attempt_disk_mb,
            op_windows_max=op_windows_max,
            op_windows_per_agent=op_windows_per_agent,
            op_window_max_s=op_window_max_s,
            heartbeat_s=heartbeat,
            energy=energy,
            calibrate_seconds=calibrate_seconds,
            gpus=tuple(g.strip() for g in gpus.split(",") if g.strip()) if gpus else None,
            dram=dram,
            attribution=attribution,
            estimator_mode=estimator_mode,
            workers=workers,
            grace_s=grace,
            insecure=insecure,
            min_isolation=min_isolation,
            min_integrity=min_integrity,
            memory_modules=memory_modules,
            solvers_file=solvers,
            metrics_listen=metrics_listen,
            metrics_solvers=tuple(metrics_solver) if metrics_solver else None,
        )
        daemon = Daemon(config)
        try:
            server = Server(daemon)
        except BaseException:
            daemon.close()
            raise
    except JouledError as err:
        if verbose:
            raise
        raise _fail(err, EXIT_STARTUP) from None
    server.serve_forever()


@tasks_app.command("check")
def tasks_check(
    tasks: Tasks = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run every task's baseline and reference; report tasks that do not flip."""
    from jouled.pipeline.taskcheck import check_tasks

    _setup_logging(False)
    try:
        config = Config.from_env(task_dirs=tuple(tasks) if tasks else None)
        reports = check_tasks(config, progress=lambda m: typer.echo(m, err=True))
    except JouledError as err:
        raise _fail(err, EXIT_USAGE) from None
    if as_json:
        typer.echo(json.dumps({"tasks": reports}, indent=2))
    else:
        _print_reports(reports)
    if any(not r["ok"] for r in reports):
        raise typer.Exit(EXIT_FAILED_CHECK)


def _print_reports(reports: list[dict[str, Any]]) -> None:
    for r in reports:
        mark = "ok " if r["ok"] else "BAD"
        typer.echo(f"{mark} {r['task_id']}  digest {r['digest'][:16]}")
        if not r["ok"]:
            typer.echo(f"    {r['reason']}")
        for key in ("fail_to_pass", "pass_to_pass"):
            ids = r[key]
            more = f", ... (+{len(ids) - 6}; --json lists all)" if len(ids) > 6 else ""
            typer.echo(f"    {key} ({len(ids)}): " + ", ".join(ids[:6]) + more)
    bad = sum(not r["ok"] for r in reports)
    typer.echo(f"{len(reports) - bad} ok, {bad} bad", err=True)


@tokens_app.command("add")
def tokens_add(
    name: Annotated[str, typer.Option(help="Who holds the token; results name it as agent.")],
    role: Annotated[list[str], typer.Option(help="agent, auditor or operator; repeatable.")],
    tokens: Annotated[Path, typer.Option("--tokens", help="The tokens file to append to.")],
    solver_prefix: Annotated[
        str | None,
        typer.Option(help="Solver names the holder may sign start with this (default: its name)."),
    ] = None,
) -> None:
    """Create a bearer token: its hash goes into the tokens file, the token to stdout once."""
    from jouled.auth import add_token

    try:
        token = add_token(tokens, name, role, solver_prefix)
    except JouledError as err:
        raise _fail(err, EXIT_USAGE) from None
    typer.echo(
        f"added {name} to {tokens}; give the holder this token (it is not stored):", err=True
    )
    typer.echo(token)


@keys_app.command("rotate")
def keys_rotate(
    data_dir: DataDir = None,
    overlap: Annotated[int, typer.Option(help="Entries whose checkpoints both keys sign.")] = 1000,
) -> None:
    """Introduce a new signing key, named in a key_rotation entry the old key signs.

    Stop the daemon first. Afterwards give auditors the new jouled.pub with the
    entry range it signs from (the rotation entry's seq + 1).
    """
    from jouled.startup import rotate_key

    _setup_logging(False)
    try:
        entry = rotate_key(Config.from_env(data_dir=data_dir), overlap)
    except JouledError as err:
        raise _fail(err, EXIT_USAGE) from None
    body = KeyRotationBody.parse(entry.body)
    typer.echo(
        f"rotated at entry {entry.seq}: {body.old_keyid[:16]} signs entries up to "
        f"{entry.seq}, {body.new_keyid[:16]} from {entry.seq + 1}; checkpoints are "
        f"signed by both until entry {entry.seq + body.overlap_entries}"
    )


@sandbox_app.command("probe")
def sandbox_probe(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """What isolation this host gives each run, which bwrap, and what it lacks."""
    from jouled.pipeline.sandbox import host

    report = host().describe()
    typer.echo(json.dumps(report, indent=2) if as_json else _format_probe(report))


@swebench_app.command("prepare")
def swebench_prepare(
    dataset: Annotated[Path, typer.Option(help="SWE-bench records (JSON, JSONL).")],
    checkout_root: Annotated[Path, typer.Option(help="Checkouts, one per instance id.")],
    envs: Annotated[Path, typer.Option(help="Where environments go (jouled --swebench-envs).")],
    instance: Annotated[
        list[str] | None, typer.Option(help="Only these instances (repeatable).")
    ] = None,
    python: Annotated[
        str | None,
        typer.Option(help="Build every version from this interpreter, not the spec's version."),
    ] = None,
    pythons: Annotated[
        Path | None,
        typer.Option(help="Interpreters by version, `3.6 = /path/python3.6` a line."),
    ] = None,
    per_instance: Annotated[
        bool, typer.Option(help="One environment per instance, not per repository version.")
    ] = False,
    force: Annotated[bool, typer.Option(help="Rebuild environments that exist.")] = False,
    show_report: Annotated[
        bool,
        typer.Option(
            "--report", help="Build nothing: per repository version, whether one builds here."
        ),
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Then grade each prepared record's gold and empty patch once: gradable or not.",
        ),
    ] = False,
    memory_modules: Annotated[
        str,
        typer.Option(
            help="With --check: grade as `jouled serve --memory-modules` will (withhold or "
            "allow ctypes and cffi; an instance whose tests import them is gradable only "
            "under allow, its runs signed reduced)."
        ),
    ] = "withhold",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Build each record's environment from its official specification (see docs/swebench.md)."""
    from jouled.contracts.swebench_records import load_records
    from jouled.swebench_check import check as check_record
    from jouled.swebench_prepare import prepare, report
    from jouled.swebench_pythons import read_map

    try:
        records = load_records(dataset)
        mapping = read_map(pythons.absolute()) if pythons is not None else None
    except JouledError as err:
        raise _fail(err, 2) from None
    if memory_modules not in MEMORY_MODULE_POLICIES:
        why = (
            f"--memory-modules {memory_modules!r} is not one of {', '.join(MEMORY_MODULE_POLICIES)}"
        )
        raise _fail(UsageError(why), 2)
    wanted = set(instance or ())
    if show_report:
        chosen = [r for r in records if not wanted or r.instance_id in wanted]
        doc = report(chosen, checkout_root, envs, python=python, pythons=mapping)
        if as_json:
            typer.echo(json.dumps(doc, indent=2))
            return
        for row in doc["versions"]:
            state = "prepared" if row["prepared"] else "builds" if row["builds"] else "no"
            why = f": {row['reason']}" if row["reason"] and not row["prepared"] else ""
            typer.echo(
                f"{state:8} {row['repo']} {row['version']} ({row['instances']} instances, "
                f"{row['checkouts']} checkouts){why}"
            )
            for need in row["host_requirements"]:
                typer.echo(f"         host requirement: {need}")
        typer.echo(
            f"{doc['buildable_instances']}/{doc['instances']} instances have an environment "
            "that is prepared or builds here"
        )
        return
    results = []
    for record in records:
        if wanted and record.instance_id not in wanted:
            continue
        done = prepare(
            record,
            checkout_root,
            envs,
            python=python,
            pythons=mapping,
            per_instance=per_instance,
            force=force,
        )
        result = done.to_json()
        if not as_json:
            mark = "ok  " if done.ok else "FAIL"
            typer.echo(f"{mark} {done.instance_id}: {done.message} ({done.directory or '-'})")
            for need in done.host_requirements:
                typer.echo(f"     host requirement (not run): {need}")
        if check and done.ok:
            checked = check_record(record, checkout_root, envs, memory_modules=memory_modules)
            result["check"] = checked.to_json()
            if not as_json:
                verdict = "gradable" if checked.gradable else f"NOT gradable ({checked.code})"
                typer.echo(
                    f"     {verdict}: gold {checked.gold or '-'}, empty {checked.empty or '-'}"
                    + (f": {checked.reason}" if checked.reason else "")
                )
        results.append(result)
    if as_json:
        typer.echo(json.dumps(results, indent=2))
    if not all(r["ok"] for r in results):
        raise typer.Exit(1)
    if check and not all(r["check"]["gradable"] for r in results):
        raise typer.Exit(3)


@swebench_app.command("adopt")
def swebench_adopt(
    directory: Annotated[Path, typer.Argument(help="ENVS/<instance_id> or ENVS/<o>__<r>__<v>.")],
    python: Annotated[str, typer.Option(help="The environment's interpreter.")],
) -> None:
    """Name an environment built elsewhere: its repository editable-installed at /testbed."""
    from jouled.swebench_prepare import adopt

    try:
        manifest = adopt(directory, python)
    except JouledError as err:
        raise _fail(err, 2) from None
    typer.echo(json.dumps(manifest.to_json(), indent=2))


@meter_app.command("probe")
def meter_probe(
    powercap_root: Annotated[Path | None, typer.Option(help="powercap sysfs root.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """What energy counters this host has, which would be used, and why."""
    from jouled.meter.probe import probe

    try:
        config = Config.from_env(powercap_root=powercap_root)
    except JouledError as err:
        raise _fail(err, EXIT_USAGE) from None
    report = probe(config.powercap_root)
    typer.echo(json.dumps(report, indent=2, default=str) if as_json else _format_probe(report))


def _format_probe(report: dict[str, Any], indent: str = "") -> str:
    lines = []
    for key, value in report.items():
        if isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines.append(_format_probe(value, indent + "  "))
        elif isinstance(value, list):
            lines.append(f"{indent}{key}:")
            for item in value:
                if isinstance(item, dict):
                    lines.append(f"{indent}  -")
                    lines.append(_format_probe(item, indent + "    "))
                else:
                    lines.append(f"{indent}  - {item}")
        else:
            lines.append(f"{indent}{key}: {value}")
    return "\n".join(lines)


def main() -> None:
    try:
        app()
    except JouledError as err:
        # A command that did not map the error itself still ends with its message, not a
        # traceback: a usage error exits 2, anything else as a failure to start.
        code = EXIT_USAGE if isinstance(err, UsageError) else EXIT_STARTUP
        typer.echo(f"jouled: {err.diagnostics()}", err=True)
        sys.exit(code)
