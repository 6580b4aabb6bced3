"""What the daemon settles before it serves: its ledger and keys, and what a crash left.

`open_ledger` finishes a key rotation a crash interrupted; `abort_unfinished`
closes every attempt the journal shows cut off, so the log says what happened
to it.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

from jouled import __version__, metrics
from jouled.config import Config
from jouled.contracts import swebench
from jouled.documents.bodies import AbortBody
from jouled.ledger import keys
from jouled.ledger.entry import Entry
from jouled.ledger.journal import RefusedRow
from jouled.ledger.keys import KeyPaths
from jouled.ledger.schema import current_keyid
from jouled.ledger.store import Ledger
from jouled.pipeline import container

log = logging.getLogger("jouled")

# Refused journal rows named one by one in the log at start; the rest are counted there.
JOURNAL_REFUSALS_LOGGED = 20


def open_ledger(config: Config) -> Ledger:
    """The data dir's ledger with its keys, finishing a rotation a crash interrupted."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(config.data_dir, 0o700)
    paths = KeyPaths(config.key_path, config.pub_path)
    keys.settle(paths, current_keyid(config.ledger_path))
    signer, retired, created = keys.load_keys(paths)
    if created:
        log.info("created signing key %s (key id %s)", config.key_path, signer.keyid[:16])
    return Ledger(
        config.ledger_path,
        signer,
        origin=config.origin or f"jouled/{config.hostname}/{signer.keyid[:8]}",
        checkpoint_path=config.checkpoint_path,
        genesis={"version": __version__, "host": config.hostname},
        retired=retired,
    )


def rotate_key(config: Config, overlap_entries: int) -> Entry:
    """Introduce a new signing key (the daemon must be stopped: one DuckDB writer)."""
    ledger = open_ledger(config)
    paths = KeyPaths(config.key_path, config.pub_path)
    try:
        entry = ledger.rotate(keys.prepare_next(paths), overlap_entries)
        keys.finish_rotation(paths)
        return entry
    finally:
        ledger.close()


def abort_unfinished(ledger: Ledger, counts: metrics.Counts, refused_path: Path) -> None:
    """Close every attempt a crash cut off, so the log says what happened to it.

    Only journal rows this daemon wrote, within a request's bounds, are signed
    from; the others are reported and removed (`jouled.ledger.journal`).
    """
    review = ledger.journal_review()
    if review.refused:
        refuse_journal_rows(ledger, counts, review.refused, refused_path)
    pending = review.pending
    for p in pending:
        log.warning("attempt %s on %s never finished: recording abort", p.attempt_id, p.task_id)
    if pending:
        entries = ledger.append_many(
            [
                (
                    "abort",
                    AbortBody(
                        attempt_id=p.attempt_id,
                        idempotency_key=p.idempotency_key or "",
                        task_id=p.task_id,
                        suite=p.task_id.partition("/")[0],
                        solver=str(p.request.get("solver", "")),
                        reason="the daemon stopped before the attempt finished",
                        version=__version__,
                    ).to_dict(),
                )
                for p in pending
            ]
        )
        for entry in entries:
            counts.abort(entry.body)


def refuse_journal_rows(
    ledger: Ledger, counts: metrics.Counts, refused: list[RefusedRow], path: Path
) -> None:
    """Report journal rows nothing is signed from, then remove them from the journal."""
    for r in refused[:JOURNAL_REFUSALS_LOGGED]:
        log.warning(
            "journal row for attempt %s on %s refused, nothing signed from it: %s",
            r.attempt_id,
            r.task_id,
            r.reason,
        )
    log.warning(
        "%d journal row(s) refused at start (not written by this daemon, or out of "
        "bounds); they are listed in %s",
        len(refused),
        path,
    )
    counts.journal_refused(len(refused))
    now = datetime.now(UTC).isoformat()
    try:
        with path.open("a", encoding="utf-8") as fh:
            for r in refused:
                record = {"refused": now, "attempt_id": r.attempt_id, "task_id": r.task_id}
                fh.write(json.dumps({**record, "reason": r.reason}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as err:  # kept in the journal, to be refused and reported next start
        log.error("cannot list refused journal rows in %s: %s", path, err)
        return
    ledger.journal_discard(refused)


def container_images(name: str) -> swebench.Images | None:
    """The opt-in container runtime: None without one; refuses an engine the host lacks."""
    if not name:
        return None
    engine = container.find_engine(name)
    return swebench.Images(engine.name, lambda iid: container.find_image(engine, iid))
