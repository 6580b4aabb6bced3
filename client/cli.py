"""`jb-client`: a thin CLI over `jb_client.api` and the offline verifier.

Tables on a terminal, `--json` on stdout for scripts, progress and logs on
stderr. Exit codes: 0 ok, 1 a failed check, 2 usage or a rejected request,
3 the daemon cannot be reached.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from jb_client import render

if TYPE_CHECKING:
    # Loaded where used: the API brings gRPC, which offline commands never need,
    # and the fleet module the verifier and DuckDB.
    from jb_client import fleet
    from jb_client.api import Client

from jouled.errors import JouledError, Kind, UsageError, VerificationError
from jouled.ledger.canonical import MAX_SAFE_INTEGER
from jouled.limits import ROLLOUT_MAX

CLAIM_MAX = MAX_SAFE_INTEGER

T = TypeVar("T")

EXIT_OK, EXIT_FAILED_CHECK, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

app = typer.Typer(
    name="jb-client",
    help="Submit patches to a jouled daemon, read its frontier, verify its ledger.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

Json = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
Suite = Annotated[str, typer.Option("--suite", help="Only this suite.")]
Wide = Annotated[
    bool | None,
    typer.Option(
        "--wide/--compact", help="Every column, or the compact layout (default: by terminal width)."
    ),
]


class State:
    target: str | None = None
    targets: tuple[str, ...] = ()
    fleet: Path | None = None
    pins: tuple[str, ...] = ()
    token: str | None = None
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    insecure: bool | None = None
    verbose: bool = False


state = State()


@app.callback()
def main_options(
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            help="unix:PATH or HOST:PORT (default $JB_TARGET, else the "
            "daemon's socket in $JOULED_HOME). Repeat it for a fleet (run, frontier, export).",
        ),
    ] = None,
    fleet: Annotated[
        Path | None,
        typer.Option(help="Fleet file (TOML): [[host]] tables with target and pubkey."),
    ] = None,
    pin: Annotated[
        list[str] | None,
        typer.Option(help="HOST=KEYFILE: the public key pinned for a fleet host (repeatable)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            help="Bearer token (default $JB_TOKEN); over TCP it is how the daemon knows you."
        ),
    ] = None,
    ca: Annotated[
        Path | None,
        typer.Option(help="CA certificate the daemon's TLS certificate chains to ($JB_CA)."),
    ] = None,
    cert: Annotated[
        Path | None, typer.Option(help="Client certificate for mTLS ($JB_CERT).")
    ] = None,
    key: Annotated[Path | None, typer.Option(help="Client key for mTLS ($JB_KEY).")] = None,
    insecure: Annotated[
        bool | None,
        typer.Option("--insecure", help="Plaintext TCP to a loopback daemon ($JB_INSECURE=1)."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks.")] = False,
) -> None:
    state.targets = tuple(target or ())
    state.target = state.targets[0] if state.targets else None
    state.fleet, state.pins = fleet, tuple(pin or ())
    state.token, state.ca, state.cert, state.key = token, ca, cert, key
    state.insecure = insecure
    state.verbose = verbose


def _client() -> Client:
    from jb_client.api import Client

    if len(state.targets) > 1 or state.fleet is not None:
        render.err.print(
            "[red]error:[/] this command talks to one daemon; give --target once "
            "(run, frontier and export take a fleet)"
        )
        raise typer.Exit(EXIT_USAGE)
    return Client(
        state.target,
        token=state.token,
        ca=state.ca,
        cert=state.cert,
        key=state.key,
        insecure=state.insecure,
    )


def _ask(call: Callable[[Client], T]) -> T:
    """One call to the daemon, its failure reported the one way every command does."""
    try:
        with _client() as c:
            return call(c)
    except JouledError as err:
        _fail(err)


def _fail(err: JouledError) -> NoReturn:
    if state.verbose:
        raise err
    render.err.print(f"[red]error:[/] {err.diagnostics()}", highlight=False)
    if isinstance(err, VerificationError):
        raise typer.Exit(EXIT_FAILED_CHECK)
    if err.kind == Kind.UNAVAILABLE:
        raise typer.Exit(EXIT_UNREACHABLE)
    raise typer.Exit(EXIT_USAGE if err.kind != Kind.INTERNAL else EXIT_FAILED_CHECK)


def _emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


def _progress(phase: str, message: str) -> None:
    render.err.print(f"[dim]{phase:>9}[/] {message}", highlight=False)


@app.command()
def tasks(suite: Suite = "", as_json: Json = False) -> None:
    """List the tasks the daemon grades."""
    found = _ask(lambda c: c.tasks(suite))
    if as_json:
        _emit({"tasks": found})
    else:
        render.tasks_table(found)


@app.command()
def fetch(
    task: Annotated[str, typer.Option("--task", help="SUITE/NAME")],
    out: Annotated[
        Path, typer.Option("--out", help="A new or empty directory to write the buggy tree into.")
    ],
    force: Annotated[
        bool, typer.Option("--force", help="Write over what a non-empty --out holds.")
    ] = False,
    as_json: Json = False,
) -> None:
    """Fetch a task's prompt and pristine buggy tree to work on."""
    try:
        with _client() as c:
            meta = c.task(task)
            written = c.fetch(task, out, force=force)
        (out / "PROMPT.md").write_text(meta["prompt"] + "\n", encoding="utf-8")
    except OSError as err:
        _fail(UsageError(f"cannot write {out / 'PROMPT.md'}: {err.strerror}"))
    except JouledError as err:
        _fail(err)
    if as_json:
        _emit({"task": meta, "files": written, "out": str(out)})
    else:
        render.err.print(f"{task}: {len(written)} files in {out} (prompt in PROMPT.md)")


@app.command()
def submit(
    task: Annotated[str, typer.Option("--task", help="SUITE/NAME")],
    patch: Annotated[Path, typer.Option("--patch", help="Unified diff file ('-' for stdin).")],
    solver: Annotated[
        str, typer.Option(help="Who produced the patch (default: your credential's name).")
    ] = "",
    model: Annotated[str, typer.Option(help="The model behind the solver.")] = "",
    run_id: Annotated[str, typer.Option(help="Groups attempts into a run.")] = "",
    rollout: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=ROLLOUT_MAX,
            help="Rollout index within the run (default: the next free one for this "
            "task, solver and run).",
        ),
    ] = None,
    tokens_in: Annotated[int, typer.Option(min=0, max=CLAIM_MAX, help="Claimed input tokens.")] = 0,
    tokens_out: Annotated[
        int, typer.Option(min=0, max=CLAIM_MAX, help="Claimed output tokens.")
    ] = 0,
    usd_micros: Annotated[
        int, typer.Option(min=0, max=CLAIM_MAX, help="Claimed cost in micro-dollars.")
    ] = 0,
    claimed_joules_mj: Annotated[
        int, typer.Option(min=0, max=CLAIM_MAX, help="Agent-reported mJ (claimed).")
    ] = 0,
    idempotency_key: Annotated[
        str, typer.Option(help="Reuse to retry safely; default: a fresh key.")
    ] = "",
    as_json: Json = False,
) -> None:
    """Grade a patch. An unresolved result is an answer, not a failure (exit 0)."""
    raw = sys.stdin.buffer.read() if str(patch) == "-" else _read(patch)
    claimed = {
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "usd_micros": usd_micros,
        "joules_mj": claimed_joules_mj,
    }
    try:
        with _client() as c:
            receipt = c.submit(
                task,
                raw,
                solver=solver,
                model=model,
                run_id=run_id,
                rollout=rollout,
                claimed=claimed,
                idempotency_key=idempotency_key,
                progress=_progress,
            )
    except JouledError as err:
        _fail(err)
    if as_json:
        _emit(receipt)
    else:
        render.receipt_line(receipt)
        if not receipt["resolved"]:
            render.failure_lines(receipt)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        render.err.print(f"[red]error:[/] cannot read {path}: {err.strerror}")
        raise typer.Exit(EXIT_USAGE) from None


@app.command()
def run(
    suite: Annotated[str, typer.Option("--suite", help="The suite to run.")],
    solvers: Annotated[
        str, typer.Option(help="Daemon-hosted solvers, comma separated.")
    ] = "reference,noop",
    rollouts: Annotated[
        int, typer.Option(min=1, max=ROLLOUT_MAX, help="Attempts per task and solver.")
    ] = 1,
    run_id: Annotated[str, typer.Option(help="Default: a fresh id.")] = "",
    model: Annotated[
        str, typer.Option(help="The model a command solver runs (default: its own).")
    ] = "",
    as_json: Json = False,
) -> None:
    """Run daemon-hosted solvers (built-in or agent CLIs) over a suite, then its frontier.

    With several targets (or --fleet) the suite is spread across the hosts and the
    frontier merges their verified ledgers.
    """
    if _is_fleet():
        return _fleet_run(suite, solvers, rollouts, run_id, model, as_json)
    run_id = run_id or uuid.uuid4().hex[:12]
    names = [s.strip() for s in solvers.split(",") if s.strip()]
    receipts = []
    try:
        with _client() as c:
            found = c.tasks(suite)
            if not found:
                render.err.print(f"[red]error:[/] no tasks in suite {suite!r}")
                raise typer.Exit(EXIT_USAGE)
            total = len(found) * len(names) * rollouts
            n = 0
            for solver in names:
                for rollout in range(rollouts):
                    for t in found:
                        n += 1
                        render.err.print(
                            f"[{n}/{total}] {solver} r{rollout} {t['task_id']}", highlight=False
                        )
                        # The key makes a re-run of the same run id resume, not duplicate.
                        key = f"{run_id}:{solver}:{model}:{rollout}:{t['task_id']}"
                        r = c.run_solver(
                            t["task_id"],
                            solver,
                            run_id=run_id,
                            rollout=rollout,
                            idempotency_key=key,
                            model=model,
                        )
                        receipts.append(r)
                        if not as_json:
                            render.receipt_line(r)
            rows = c.frontier(suite)["rows"]
    except JouledError as err:
        _fail(err)
    if as_json:
        _emit({"run_id": run_id, "receipts": receipts, "frontier": rows})
    else:
        render.frontier_table(rows)


@app.command()
def frontier(
    suite: Suite = "",
    axis: Annotated[str, typer.Option(help="Cost axis: joules, usd or wall.")] = "joules",
    export: Annotated[
        Path | None, typer.Option("--from-export", help="Compute offline from an export file.")
    ] = None,
    plot_to: Annotated[
        Path | None,
        typer.Option("--plot", help="Also draw the frontier to FILE (.svg or .png; matplotlib)."),
    ] = None,
    merge_digests: Annotated[
        bool,
        typer.Option(
            "--merge-digests",
            help="Pool each solver's results across a changed task's digests into one row.",
        ),
    ] = False,
    wide: Wide = None,
    as_json: Json = False,
) -> None:
    """Resolution vs energy (or dollars, or wall time) per suite, solver, model and the
    revision of the tasks graded (a changed task's results form their own row).

    With several targets (or --fleet), or a fleet export directory, a row per host,
    each host's ledger verified against its pinned key first.
    """
    fleet_wide = _is_fleet() or (export is not None and export.is_dir())
    if fleet_wide:
        return _fleet_frontier(suite, axis, export, as_json, merge_digests)
    try:
        if export is not None:
            from jouled.ledger.snapshot import export_frontier

            if not export.is_file():
                _read(export)  # says why it cannot be read
            rows = export_frontier(export).rows(
                suite=suite or None, axis=axis, merge_digests=merge_digests
            )
        else:
            with _client() as c:
                rows = c.frontier(suite, axis, merge_digests=merge_digests)["rows"]
        if plot_to is not None:
            from jb_client import plot

            plot.write(plot.frontier_figure(rows, axis), plot_to)
            render.err.print(f"frontier drawn to {plot_to}", highlight=False, markup=False)
    except JouledError as err:
        _fail(err)
    if as_json:
        _emit({"rows": rows})
    else:
        render.frontier_table(rows, wide=wide)


def _export_bodies(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The `result` and `op` bodies of an export, in seq order."""
    return _bodies(_read(path).decode("utf-8").splitlines())


def _bodies(lines: Iterable[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The `result` and `op` bodies of export lines, in the order given."""
    import base64

    bodies: dict[str, list[dict[str, Any]]] = {"result": [], "op": []}
    for line in lines:
        if line.strip():
            doc = json.loads(base64.b64decode(json.loads(line)["payload"]))
            if doc["kind"] in bodies:
                bodies[doc["kind"]].append(doc["body"])
    return bodies["result"], bodies["op"]


@app.command()
def compare(
    a: Annotated[str, typer.Argument(help="Side A: a solver, or SOLVER@MODEL.")],
    b: Annotated[str, typer.Argument(help="Side B: a solver, or SOLVER@MODEL.")],
    suite: Suite = "",
    export: Annotated[
        Path | None,
        typer.Option("--from-export", help="Compare offline from an export file."),
    ] = None,
    resamples: Annotated[
        int, typer.Option(min=1, max=1_000_000, help="Bootstrap resamples.")
    ] = 10_000,
    seed: Annotated[
        int, typer.Option(min=0, help="Bootstrap seed (fixed: same ledger, same interval).")
    ] = 0,
    as_json: Json = False,
) -> None:
    """Pair A's and B's attempts on the same task digests: resolution, joules, dollars.

    Exact McNemar test on resolution, paired bootstrap intervals on joules and
    claimed dollars per task, and the tasks where they disagree. Reads the
    daemon's ledger through Export (auditor or operator), or an export file.
    """
    from jouled.compare import compare as compare_fn

    try:
        if export is not None:
            results, _ = _export_bodies(export)
        else:
            with _client() as c:
                results, _ = _bodies(v for k, v in c.export_stream() if k == "entry")
        doc = compare_fn(results, a, b, suite=suite or None, resamples=resamples, seed=seed)
    except JouledError as err:
        _fail(err)
    if as_json:
        _emit(doc)
    else:
        render.compare_report(doc)


@app.command()
def swebench(
    dataset: Annotated[Path, typer.Option(help="SWE-bench records (JSON, JSONL).")],
    predictions: Annotated[Path, typer.Option(help="Predictions (SWE-bench format).")],
    suite: Annotated[
        str, typer.Option(help="Suite for the registered tasks.")
    ] = "swebench-verified",
    run_id: Annotated[str, typer.Option(help="Default: a fresh id.")] = "",
    as_json: Json = False,
) -> None:
    """Grade SWE-bench predictions: register the records with the daemon, submit each patch.

    A malformed prediction (not a prediction object, or a patch that does not parse or
    apply) is reported and skipped, and the rest are graded; an empty one is graded
    as the pristine tree and signed unresolved, as the official harness counts it.
    """
    import dataclasses
    from collections import Counter

    from jouled.contracts.swebench import load_predictions, load_records
    from jouled.errors import BrokenEnvironmentError, PatchError, TaskError

    run_id = run_id or uuid.uuid4().hex[:12]
    receipts: list[dict[str, Any]] = []
    empty: list[str] = []
    malformed: list[dict[str, str]] = []
    declined: dict[str, dict[str, str]] = {}  # refused at submission, by instance

    def skip(instance_id: str, reason: str) -> None:
        malformed.append({"instance_id": instance_id, "reason": reason})
        shown = f"{instance_id}: {reason}" if instance_id else reason
        render.err.print(f"[yellow]malformed prediction skipped:[/] {shown}", highlight=False)

    try:
        records = load_records(dataset)
        refused: list[TaskError] = []
        preds = load_predictions(predictions, refused)
        for err in refused:
            skip("", err.message)  # names the file and line
        wanted = [r for r in records if r.instance_id in preds]
        missing = sorted(set(preds) - {r.instance_id for r in records})
        if missing:
            render.err.print(
                f"[yellow]warning:[/] {len(missing)} predictions name instances "
                f"not in {dataset}: {', '.join(missing[:5])}"
            )
        with _client() as c:
            reg = c.register_swebench([dataclasses.asdict(r) for r in wanted], suite)
            for s in reg["skipped"]:
                render.err.print(f"[yellow]skipped[/] {s['instance_id']}: {s['reason']}")
            for n, task_id in enumerate(reg["registered"], 1):
                pred = preds[task_id.split("/", 1)[1]]
                render.err.print(f"[{n}/{len(reg['registered'])}] {task_id}", highlight=False)
                try:
                    if pred.to_patch() is None:
                        # Graded all the same: the daemon signs it unresolved, as the
                        # official harness counts it.
                        empty.append(task_id)
                    r = c.submit(
                        task_id,
                        (pred.model_patch or "").encode("utf-8", errors="surrogateescape"),
                        solver=pred.model_name_or_path,
                        model=pred.model_name_or_path,
                        run_id=run_id,
                        idempotency_key=f"{run_id}:{task_id}",
                    )
                except PatchError as err:
                    skip(pred.instance_id, err.message)
                    continue
                except JouledError as err:
                    if err.code == BrokenEnvironmentError.code:
                        # Nothing signed: the environment, not the patch, failed its baseline.
                        declined[pred.instance_id] = {"code": err.code, "reason": err.message}
                        render.err.print(
                            f"[yellow]not graded[/] {pred.instance_id}: {err.code}",
                            highlight=False,
                        )
                        continue
                    if err.kind != Kind.INVALID_ARGUMENT:
                        raise
                    skip(pred.instance_id, err.message)  # the daemon refused this one alone
                    continue
                receipts.append(r)
                if not as_json:
                    render.receipt_line(r)
    except JouledError as err:
        _fail(err)
    resolved = sum(r["resolved"] for r in receipts)
    total = len(receipts)
    skipped = [*reg["skipped"], *({"instance_id": k, **v} for k, v in declined.items())]
    instances = _swebench_coverage(preds, records, skipped, malformed, receipts)
    not_graded = [i for i in instances if not i["graded"]]
    summary = {
        "run_id": run_id,
        "resolved": resolved,
        "submitted": len(receipts),
        "empty_patch": empty,
        "malformed": malformed,
        "skipped": reg["skipped"],
        "total": total,
        # Every prediction, graded or not: the denominator that leaves nothing out.
        "predictions": len(instances),
        "not_graded": len(not_graded),
        "not_graded_by_reason": dict(Counter(i["code"] for i in not_graded)),
        "instances": instances,
        "receipts": receipts,
    }
    if as_json:
        _emit(summary)
    else:
        render.swebench_coverage(instances)
        by_reason = Counter(i["code"] for i in not_graded).most_common()
        reasons = ", ".join(f"{n} {code}" for code, n in by_reason)
        render.out.print(
            f"resolved {resolved}/{len(instances)} predictions (run {run_id}); "
            f"{total} graded, {len(not_graded)} not graded"
            + (f" ({reasons}), counted unresolved" if not_graded else "")
            + f"; {len(empty)} empty patches"
        )


def _swebench_coverage(
    preds: dict[str, Any],
    records: list[Any],
    skipped: list[dict[str, Any]],
    malformed: list[dict[str, str]],
    receipts: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """One row per prediction: graded (its status, the official verdict) or why not."""
    graded = {r["task_id"].split("/", 1)[1]: r for r in receipts}
    refused = {s["instance_id"]: s for s in skipped}
    bad = {m["instance_id"]: m for m in malformed if m["instance_id"]}
    known = {r.instance_id for r in records}
    rows = []
    for iid in sorted(set(preds) | set(bad)):
        row: dict[str, Any] = {"instance_id": iid, "graded": iid in graded}
        if iid in graded:
            r = graded[iid]
            verdict = r.get("verdict") or {}
            row |= {"status": r["status"], "resolved": r["resolved"], "seq": r["seq"]}
            strict = verdict.get("strict") or {}
            row |= {"official": verdict.get("status"), "strict_agrees": strict.get("agrees")}
            row |= {"code": "", "reason": ""}
        elif iid not in known:
            row |= {"code": "not-in-dataset", "reason": "no record for this instance"}
        elif iid in refused:
            row |= {"code": refused[iid].get("code", "refused"), "reason": refused[iid]["reason"]}
        elif iid in bad:
            row |= {"code": "malformed-prediction", "reason": bad[iid]["reason"]}
        else:
            row |= {"code": "not-submitted", "reason": "not graded"}
        if not row["graded"]:
            row |= {"status": None, "resolved": False, "seq": None, "official": None}
            row |= {"strict_agrees": None}
        rows.append(row)
    return rows


@app.command()
def logs(
    seq: Annotated[int, typer.Option("--seq", min=0, max=CLAIM_MAX, help="The result's entry.")],
    as_json: Json = False,
) -> None:
    """A result's captured output per run and its full failing and missing test ids.

    Each text is checked against the hash its result signs; one that is absent or
    changed is shown as missing, never as the signed text.
    """
    doc = _ask(lambda c: c.logs(seq))
    if as_json:
        _emit(doc)
    else:
        render.logs_report(doc)


@app.command()
def receipt(
    key: Annotated[str, typer.Option("--key", help="The submission's idempotency key.")] = "",
    seq: Annotated[
        int | None, typer.Option("--seq", min=0, max=CLAIM_MAX, help="The result's entry.")
    ] = None,
    as_json: Json = False,
) -> None:
    """A result's receipt again, with a fresh inclusion proof (by idempotency key or seq)."""
    if not key and seq is None:
        render.err.print("[red]error:[/] give --key or --seq")
        raise typer.Exit(EXIT_USAGE)
    r = _ask(lambda c: c.receipt(idempotency_key=key, seq=seq))
    if as_json:
        _emit(r)
    else:
        render.receipt_line(r)


@app.command()
def keys(as_json: Json = False) -> None:
    """The daemon's public signing keys and key ids (pin them out of band to verify)."""
    doc = _ask(lambda c: c.public_keys())
    if as_json:
        _emit(doc)
    else:
        for k in doc["keys"]:
            render.out.print(f"{k['status']:8} {k['keyid']}", highlight=False)
            sys.stdout.write(k["pem"])


@app.command()
def bestofk(suite: Suite = "", wide: Wide = None, as_json: Json = False) -> None:
    """Tasks resolved within the first k rollouts against cumulative cost, with pass@k."""
    rows = _ask(lambda c: c.best_of_k(suite)["rows"])
    if as_json:
        _emit({"rows": rows})
    else:
        render.bestofk_table(rows, wide=wide)


@app.command()
def export(
    out: Annotated[
        Path, typer.Option("--out", help="JSONL file to write (a directory for a fleet).")
    ],
    as_json: Json = False,
) -> None:
    """Export the ledger (JSONL entries, plus the checkpoint history beside it).

    With several targets (or --fleet): a directory of per-host exports, each verified
    against its host's pinned key, and a manifest naming each host's key and checkpoint.
    """
    if _is_fleet():
        return _fleet_export(out, as_json)
    summary = _ask(lambda c: c.export(out))
    if as_json:
        _emit(summary)
    else:
        render.err.print(
            f"{summary['entries']} entries -> {out}; {summary['checkpoints']} "
            f"checkpoints -> {summary['checkpoint_history']}; Parquet snapshot -> "
            f"{summary['parquet']}"
        )


@app.command()
def verify(
    file: Annotated[Path, typer.Argument(help="An export written by `jb-client export`.")],
    pubkey: Annotated[
        list[Path] | None, typer.Option("--pubkey", help="Pinned public key (PEM), all entries.")
    ] = None,
    trust: Annotated[
        Path | None,
        typer.Option(help="JSON trust file: pinned keys with the entry range each may sign."),
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="The daemon's checkpoint note, fetched separately.")
    ] = None,
    since: Annotated[
        Path | None,
        typer.Option(help="A checkpoint you saved earlier: the export must extend it."),
    ] = None,
    merkle_only: Annotated[
        bool, typer.Option(help="Skip entry signatures (chain and Merkle root only).")
    ] = False,
    workers: Annotated[
        int, typer.Option(help="Processes parsing and checking entries (0: every core).")
    ] = 0,
    as_json: Json = False,
) -> None:
    """Verify an export offline: signatures, seq, prev chain, Merkle root vs checkpoints."""
    import os

    from jouled.ledger.trust import load_pinned
    from jouled.ledger.verify import split_notes, verify_file

    try:
        keys = load_pinned(pubkey or [], trust)
        notes, history = [], []
        from jb_client.api import checkpoint_history_path, parquet_path

        history_file = checkpoint_history_path(file)
        if history_file.is_file():
            history = split_notes(history_file.read_text(encoding="utf-8"))
        for note in (checkpoint, since):
            if note is not None:
                notes.append(_read(note).decode("utf-8"))
        parquet = parquet_path(file)
        report = verify_file(
            file,
            keys,
            notes,
            signatures=not merkle_only,
            workers=workers or os.cpu_count() or 1,
            parquet=parquet if parquet.is_file() else None,
            history=history,
        )
    except OSError as err:
        render.err.print(f"[red]error:[/] cannot read {err.filename}: {err.strerror}")
        raise typer.Exit(EXIT_USAGE) from None
    except JouledError as err:
        if as_json and isinstance(err, VerificationError):
            _emit({"ok": False, "seq": err.seq, "error": err.message})
        _fail(err)
    if as_json:
        _emit(report.to_json())
    else:
        extra = "" if report.parquet_rows is None else f", Parquet {report.parquet_rows} rows"
        render.out.print(
            f"[green]ok[/] {report.entries} entries, root {report.root[:16]}…, "
            f"{len(report.checkpoints) + report.history} checkpoint(s) consistent{extra}, "
            "signed by "
            + ", ".join(k[:16] for k in report.keyids)
            + (" (signatures not checked)" if merkle_only else "")
        )


@app.command()
def audit(
    receipt: Annotated[Path, typer.Argument(help="A receipt from `submit --json`.")],
    pubkey: Annotated[list[Path], typer.Option("--pubkey", help="Pinned public key (PEM).")],
    as_json: Json = False,
) -> None:
    """Check one receipt alone: its signature, its inclusion proof and its checkpoint."""
    from jouled.ledger.audit import audit_receipt
    from jouled.ledger.signing import load_public_key

    try:
        keys = [load_public_key(p) for p in pubkey]
        doc = json.loads(_read(receipt))
        result = audit_receipt(doc, keys)
    except ValueError as err:
        render.err.print(f"[red]error:[/] {receipt} is not a JSON receipt: {err}")
        raise typer.Exit(EXIT_USAGE) from None
    except JouledError as err:
        if as_json and isinstance(err, VerificationError):
            _emit({"ok": False, "seq": err.seq, "error": err.message})
        _fail(err)
    if as_json:
        _emit(result)
    else:
        render.out.print(
            f"[green]ok[/] entry {result['seq']} ({result['task_id']}, {result['status']}) is "
            f"signed and included in the tree of {result['tree_size']} entries"
        )


@app.command("checkpoint")
def checkpoint_cmd(as_json: Json = False) -> None:
    """The daemon's latest signed checkpoint (size, root, note)."""
    cp = _ask(lambda c: c.checkpoint())
    if as_json:
        _emit(cp)
    else:
        sys.stdout.write(cp["note"])


@app.command()
def proof(
    seq: Annotated[int, typer.Option("--seq", min=0, max=CLAIM_MAX, help="Ledger entry.")],
    tree_size: Annotated[
        int, typer.Option(min=0, max=CLAIM_MAX, help="Tree size (0: latest).")
    ] = 0,
    as_json: Json = False,
) -> None:
    """An inclusion proof of one entry in the ledger's Merkle tree."""
    p = _ask(lambda c: c.proof(seq, tree_size))
    if as_json:
        _emit(p)
    else:
        render.kv(f"inclusion proof of entry {seq}", {**p, "hashes": len(p["hashes"])})


@app.command()
def consistency(
    old: Annotated[
        int, typer.Option("--old", min=0, max=CLAIM_MAX, help="The size you saw before.")
    ],
    new: Annotated[
        int, typer.Option("--new", min=0, max=CLAIM_MAX, help="The later size (0: latest).")
    ] = 0,
    as_json: Json = False,
) -> None:
    """A consistency proof: the ledger of size --new extends the one of size --old."""
    p = _ask(lambda c: c.consistency(old, new))
    if as_json:
        _emit(p)
    else:
        render.kv(
            f"consistency {p['old_size']} -> {p['new_size']}", {**p, "hashes": len(p["hashes"])}
        )


@app.command()
def meter(as_json: Json = False) -> None:
    """Energy sources, domains, idle calibration, floors and attribution policy."""
    status = _ask(lambda c: c.meter())
    if as_json:
        _emit(status)
    else:
        render.meter_table(status)


@app.command()
def calibrate(
    seconds: Annotated[int, typer.Option(min=1, max=600, help="Seconds of quiet to sample.")] = 10,
    as_json: Json = False,
) -> None:
    """Re-measure idle power on the daemon's host (keep the host quiet meanwhile)."""
    cal = _ask(lambda c: c.calibrate(seconds))
    if as_json:
        _emit(cal)
    else:
        render.kv(f"calibration (ledger entry {cal['seq']})", cal)


@app.command("meter-run")
def meter_run(
    command: Annotated[list[str], typer.Argument(help="The command to meter, after `--`.")],
    label: Annotated[str, typer.Option("--label", help="What the command is (a short name).")],
    task: Annotated[str, typer.Option("--task", help="The task it works on (SUITE/NAME).")] = "",
    run_id: Annotated[str, typer.Option(help="The run the work belongs to.")] = "",
    rollout: Annotated[
        int, typer.Option(min=0, max=ROLLOUT_MAX, help="Rollout index within the run.")
    ] = 0,
    receipt_file: Annotated[
        Path | None, typer.Option("--receipt", help="Write the op receipt (JSON) here.")
    ] = None,
    as_json: Json = False,
) -> None:
    """Run a command on the daemon's host inside a metered op window; exit with its status.

    The command keeps this terminal; the signed receipt follows on stderr, or as
    JSON on stdout after the command's own output with --json.
    """
    import subprocess

    status = EXIT_USAGE
    try:
        with _client() as c, c.op(label, task_id=task, run_id=run_id, rollout=rollout) as window:
            try:
                status = subprocess.run(command).returncode
            except OSError as err:
                render.err.print(f"[red]error:[/] cannot run {command[0]}: {err.strerror}")
                status = 127
    except JouledError as err:
        _fail(err)
    receipt = window.receipt
    assert receipt is not None
    if receipt_file is not None:
        receipt_file.write_text(json.dumps(receipt, indent=2, sort_keys=True) + "\n")
    if as_json:
        _emit(receipt)
    else:
        render.op_receipt_line(receipt)
    raise typer.Exit(status if status >= 0 else 128 - status)


@app.command()
def report(
    html_out: Annotated[Path, typer.Option("--html", help="The HTML page to write.")],
    suite: Suite = "",
    axis: Annotated[str, typer.Option(help="Frontier cost axis: joules, usd or wall.")] = "joules",
    export: Annotated[
        Path | None, typer.Option("--from-export", help="Read an export file, not the daemon.")
    ] = None,
    title: Annotated[str, typer.Option(help="The page's title.")] = "",
    as_json: Json = False,
) -> None:
    """One self-contained HTML page: frontier, best-of-k, every attempt, calibration, checkpoint.

    The page loads nothing (inline SVG and CSS, no script); figures need matplotlib
    (pip install 'joule-bench[plot]'), the tables do not.
    """
    from jb_client import report as report_mod

    from jouled.errors import UsageError
    from jouled.frontier import AXES

    try:
        if axis not in AXES:
            raise UsageError(f"unknown frontier axis {axis!r}", hint=f"use one of {sorted(AXES)}")
        if export is not None:
            data = report_mod.from_export(export, suite=suite, axis=axis)
        else:
            with _client() as c:
                data = report_mod.from_daemon(c, suite=suite, axis=axis)
        report_mod.write_report(data, html_out, title=title)
    except JouledError as err:
        _fail(err)
    summary = {
        "out": str(html_out),
        "source": data.source,
        "entries": data.entries,
        "results": len(data.results),
        "frontier_rows": len(data.frontier),
        "checkpoint_size": (data.checkpoint or {}).get("size"),
    }
    if as_json:
        _emit(summary)
    else:
        render.err.print(
            f"{len(data.results)} attempts from the {data.source} -> {html_out}",
            highlight=False,
            markup=False,
        )


def main() -> None:
    app()


# -- a fleet of hosts ---------------------------------------------------------------------


def _is_fleet() -> bool:
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


def _fleet_run(
    suite: str, solvers: str, rollouts: int, run_id: str, model: str, as_json: bool
) -> None:
    from jb_client import fleet

    names = [s.strip() for s in solvers.split(",") if s.strip()]
    given, run_id = run_id, run_id or uuid.uuid4().hex[:12]

    def started(host: str, unit: fleet.Unit) -> None:
        render.err.print(
            f"{host}: {unit.solver} r{unit.rollout} {unit.task_id}", highlight=False, markup=False
        )

    def done(host: str, unit: fleet.Unit, receipt: dict[str, Any]) -> None:
        if not as_json:
            render.fleet_receipt_line(host, receipt)

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
            render.err.print(f"[yellow]{host} left the fleet:[/] {why}", highlight=False)
        for r in result.retried:
            render.err.print(
                f"[yellow]retried[/] {r['task_id']} on {r['to']} (was {r['from']})", highlight=False
            )
        merged = fleet.live_frontier(hosts, _fleet_client, suite=suite)
    except JouledError as err:
        _fail(err)
    if as_json:
        _emit({**result.to_json(), "frontier": merged})
    else:
        render.fleet_frontier_table(merged)


def _fleet_frontier(
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
            _emit({"ok": False, "error": err.message})
        _fail(err)
    if as_json:
        _emit(merged)
    else:
        render.fleet_frontier_table(merged)


def _fleet_export(out: Path, as_json: bool) -> None:
    from jb_client import fleet

    try:
        manifest = fleet.export_fleet(_fleet_hosts(), out, _fleet_client)
    except JouledError as err:
        _fail(err)
    if as_json:
        _emit(manifest)
        return
    for h in manifest["hosts"]:
        render.err.print(
            f"{h['host']}: {h['entries']} entries -> {out / h['file']} (key "
            f"{h['keyids'][0][:16]}, checkpoint size {h['checkpoint']['size']})",
            highlight=False,
        )
    for u in manifest["unreachable"]:
        render.err.print(f"[yellow]{u['host']} not exported:[/] {u['reason']}", highlight=False)
    render.err.print(f"manifest -> {out / fleet.MANIFEST}")
