"""`jb-client`'s ledger commands: export, verify, audit, checkpoint and proofs."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from jb_client.cli_args import Argument, Option
from jb_client.cli_common import (
    CLAIM_MAX,
    EXIT_USAGE,
    Json,
    ask,
    emit,
    error,
    fail,
    read_file,
    render,
)

if TYPE_CHECKING:
    pass

from jb_client.cli_fleet import fleet_export, is_fleet

from jouled.errors import JouledError, UsageError, VerificationError


def export(
    out: Annotated[Path, Option("--out", help="JSONL file to write (a directory for a fleet).")],
    as_json: Json = False,
) -> None:
    """Export the ledger (JSONL entries, plus the checkpoint history beside it).

    With several targets (or --fleet): a directory of per-host exports, each verified
    against its host's pinned key, and a manifest naming each host's key and checkpoint.
    """
    if is_fleet():
        return fleet_export(out, as_json)
    summary = ask(lambda c: c.export(out))
    if as_json:
        emit(summary.to_dict())
    else:
        render.err.print(
            f"{summary.entries} entries -> {out}; {summary.checkpoints} "
            f"checkpoints -> {summary.checkpoint_history}; Parquet snapshot -> "
            f"{summary.parquet}"
        )


def verify(
    file: Annotated[Path, Argument(help="An export written by `jb-client export`.")],
    pubkey: Annotated[
        list[Path] | None, Option("--pubkey", help="Pinned public key (PEM), all entries.")
    ] = None,
    trust: Annotated[
        Path | None,
        Option(help="JSON trust file: pinned keys with the entry range each may sign."),
    ] = None,
    checkpoint: Annotated[
        Path | None, Option(help="The daemon's checkpoint note, fetched separately.")
    ] = None,
    since: Annotated[
        Path | None,
        Option(help="A checkpoint you saved earlier: the export must extend it."),
    ] = None,
    merkle_only: Annotated[
        bool, Option(help="Skip entry signatures (chain and Merkle root only).")
    ] = False,
    workers: Annotated[
        int, Option(help="Processes parsing and checking entries (0: every core).")
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
            history = _history(history_file, split_notes)
        for option, note in (("--checkpoint", checkpoint), ("--since", since)):
            if note is not None:
                notes.append(_note(option, note))
        parquet = parquet_path(file)
        # What the export lacks, and so was not checked: said, never passed over.
        not_checked = []
        if not parquet.is_file():
            not_checked.append(f"no Parquet snapshot at {parquet}")
        if not history_file.is_file():
            not_checked.append(f"no checkpoint history at {history_file}")
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
        error(f"cannot read {err.filename}: {err.strerror}")
        raise SystemExit(EXIT_USAGE) from None
    except JouledError as err:
        if as_json and isinstance(err, VerificationError):
            emit({"ok": False, "seq": err.seq, "error": err.message})
        fail(err)
    if report.entries == 0:
        not_checked.insert(0, "no entries: the export is empty")
    if as_json:
        emit({**report.to_json(), "not_checked": not_checked})
    else:
        extra = "" if report.parquet_rows is None else f", Parquet {report.parquet_rows} rows"
        if not report.entries:
            render.out.print(render.marked("[yellow]empty[/] {}: no entries to verify", file))
        else:
            render.out.print(
                render.marked(
                    "[green]ok[/] {}",
                    f"{report.entries} entries, root {report.root[:16]}…, "
                    f"{len(report.checkpoints) + report.history} checkpoint(s) consistent{extra}, "
                    "signed by "
                    + ", ".join(k[:16] for k in report.keyids)
                    + (" (signatures not checked)" if merkle_only else ""),
                )
            )
        if not_checked:
            render.out.print(render.marked("[yellow]not checked:[/] {}", "; ".join(not_checked)))


def audit(
    receipt: Annotated[Path, Argument(help="A receipt from `submit --json`.")],
    pubkey: Annotated[list[Path], Option("--pubkey", help="Pinned public key (PEM).")],
    as_json: Json = False,
) -> None:
    """Check one receipt alone: its signature, its inclusion proof and its checkpoint."""
    from jouled.ledger.audit import audit_receipt
    from jouled.ledger.signing import load_public_key

    try:
        keys = [load_public_key(p) for p in pubkey]
        doc = json.loads(read_file(receipt))
        result = audit_receipt(doc, keys)
    except ValueError as err:
        error(f"{receipt} is not a JSON receipt: {err}")
        raise SystemExit(EXIT_USAGE) from None
    except JouledError as err:
        if as_json and isinstance(err, VerificationError):
            emit({"ok": False, "seq": err.seq, "error": err.message})
        fail(err)
    if as_json:
        emit(result)
    else:
        render.out.print(
            render.marked(
                "[green]ok[/] {}",
                f"entry {result['seq']} ({result['task_id']}, {result['status']}) is "
                f"signed and included in the tree of {result['tree_size']} entries",
            )
        )


def checkpoint_cmd(as_json: Json = False) -> None:
    """The daemon's latest signed checkpoint (size, root, note)."""
    cp = ask(lambda c: c.checkpoint())
    if as_json:
        emit(cp.to_dict())
    else:
        sys.stdout.write(cp.note)


def proof(
    seq: Annotated[int, Option("--seq", min=0, max=CLAIM_MAX, help="Ledger entry.")],
    tree_size: Annotated[int, Option(min=0, max=CLAIM_MAX, help="Tree size (0: latest).")] = 0,
    as_json: Json = False,
) -> None:
    """An inclusion proof of one entry in the ledger's Merkle tree."""
    p = ask(lambda c: c.proof(seq, tree_size))
    if as_json:
        emit(p.to_dict())
    else:
        render.kv(f"inclusion proof of entry {seq}", p, hashes=len(p.hashes))


def consistency(
    old: Annotated[int, Option("--old", min=1, max=CLAIM_MAX, help="The size you saw before.")],
    new: Annotated[
        int, Option("--new", min=0, max=CLAIM_MAX, help="The later size (0: latest).")
    ] = 0,
    as_json: Json = False,
) -> None:
    """A consistency proof: the ledger of size --new extends the one of size --old."""
    p = ask(lambda c: c.consistency(old, new))
    if as_json:
        emit(p.to_dict())
    else:
        render.kv(f"consistency {p.old_size} -> {p.new_size}", p, hashes=len(p.hashes))


def _history(path: Path, split_notes: Callable[[str], list[str]]) -> list[str]:
    """The checkpoint notes of the history file beside an export; a usage error, naming
    the line, where it is not one JSON object {"note": ...} a line."""
    hint = (
        f"export again with `jb-client export`, or move {path.name} away to verify "
        "without the checkpoint history"
    )
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        fail(UsageError(f"{path} is not a checkpoint history: not UTF-8 text", hint=hint))
    notes = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            notes += split_notes(line)
        except (ValueError, KeyError, TypeError) as err:
            why = f"no note ({err})" if isinstance(err, KeyError) else str(err)
            fail(UsageError(f"{path} line {n} is not a checkpoint note: {why}", hint=hint))
    return notes


def _note(option: str, path: Path) -> str:
    """The checkpoint note `option` names; a usage error where the file holds none."""
    from jouled.errors import DocumentError
    from jouled.ledger.checkpoint import parse_note

    try:
        text = read_file(path).decode("utf-8")
        parse_note(text)
    except (UnicodeDecodeError, ValueError, DocumentError, VerificationError) as err:
        why = getattr(err, "message", None) or str(err)
        fail(
            UsageError(
                f"{option} {path} is not a checkpoint note: {why}",
                hint="give the note `jb-client checkpoint` printed (or the daemon's "
                "checkpoint.note), unchanged",
            )
        )
    return text
