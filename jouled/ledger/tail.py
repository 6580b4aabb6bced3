"""The ledger's tail: entries that are durable but not yet moved into DuckDB.

An append is acknowledged once its entry is written here and `fdatasync`ed:
one small write and one sync, where a DuckDB transaction costs several
milliseconds of CPU. The store moves the tail into DuckDB in batches and then
empties it; opening the ledger moves whatever a crash left here first.

The file (`ledger.duckdb.tail`, mode 0600) is a sequence of lines, one per
entry: the entry's export record (`seq`, `payload`, `payloadType`,
`signatures`, `leaf_hash`, as in an export line) plus `note`, the checkpoint
signed for the tree that ends with this entry, and `noted`, when it was
signed. Only the last line of a batch carries a note. A crash in the middle
of a write leaves at most one incomplete last line; it was never
acknowledged and is dropped. Any other line that does not read is damage.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jouled.errors import NO_SPACE, LedgerError, LedgerFullError, LedgerIntegrityError
from jouled.ledger.entry import Entry, parse_export_record


@dataclass(frozen=True)
class TailRecord:
    entry: Entry
    note: str | None = None  # the checkpoint signed after this entry, on a batch's last
    noted: str = ""  # when that checkpoint was signed

    def line(self) -> bytes:
        record = self.entry.export_record()
        if self.note is not None:
            record |= {"note": self.note, "noted": self.noted}
        return json.dumps(record, separators=(",", ":")).encode("ascii") + b"\n"


def tail_path(ledger_path: Path) -> Path:
    return ledger_path.with_name(ledger_path.name + ".tail")


def read_records(path: Path) -> tuple[list[TailRecord], int]:
    """The tail's whole records, and the bytes of an incomplete last line (0 if none)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    except OSError as err:
        raise LedgerError(f"cannot read {path}: {err.strerror}") from err
    lines = data.split(b"\n")
    torn = lines.pop()  # empty when the last write was whole
    records = []
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            note = record.get("note")
            records.append(
                TailRecord(
                    parse_export_record(record),
                    None if note is None else str(note),
                    str(record.get("noted", "")),
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise LedgerIntegrityError(
                f"{path}: line {n} is not a tail record ({err})",
                hint="the file was edited or damaged; restore the data dir from a backup",
            ) from err
    return records, len(torn)


class Tail:
    """The open tail file: appended to, synced, and emptied once DuckDB holds its entries."""

    def __init__(self, path: Path) -> None:
        self.path = path
        created = not path.exists()
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            if created:  # the file's name must survive a crash as well as its records
                directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
            self._size = os.fstat(self._fd).st_size
        except OSError as err:
            raise LedgerError(f"cannot open {path}: {err.strerror}") from err

    @property
    def empty(self) -> bool:
        return self._size == 0

    def write(self, records: Sequence[TailRecord]) -> None:
        """Append the records with one write and make them durable; on failure, none is kept."""
        data = b"".join(r.line() for r in records)
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(0, f"short write ({written} of {len(data)} bytes)")
            os.fdatasync(self._fd)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            if err.errno in NO_SPACE:
                raise LedgerFullError(
                    f"the data dir ran out of space: cannot write the ledger's tail {self.path}",
                    hint="free space on that file system; nothing was recorded",
                ) from err
            raise LedgerError(
                f"cannot write the ledger's tail {self.path}: {err.strerror}",
                hint="is the data dir's disk failing? nothing was recorded",
            ) from err
        self._size += len(data)

    def clear(self) -> None:
        """Empty the file: DuckDB now holds (and has synced) everything it held.

        The truncation is synced too, so that no crash can leave the next
        batch's records written over this one's in a file of the old size.
        """
        try:
            os.ftruncate(self._fd, 0)
            os.fdatasync(self._fd)
        except OSError as err:
            raise LedgerError(f"cannot empty {self.path}: {err.strerror}") from err
        self._size = 0

    def close(self) -> None:
        os.close(self._fd)
