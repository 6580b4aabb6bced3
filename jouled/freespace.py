"""The data dir's free space: new attempts are refused below a floor, and a full disk
met while preparing one is reported as such."""

from __future__ import annotations

import shutil
from pathlib import Path

from jouled.errors import NO_SPACE, DiskFullError


class FreeSpace:
    def __init__(self, data_dir: Path, min_free_mb: int) -> None:
        self.data_dir = data_dir
        self.min_free_mb = min_free_mb

    def check(self) -> None:
        """Refuse new attempts while the data dir is below its free-space floor."""
        floor = self.min_free_mb << 20
        free = self.free_bytes()
        if free is not None and free < floor:
            raise DiskFullError(
                f"only {free >> 20} MiB free in the data dir {self.data_dir}; new "
                f"attempts are refused below {self.min_free_mb} MiB so the ledger "
                "cannot run out of space",
                hint="free space on that file system, or move the data dir",
            )

    def free_bytes(self) -> int | None:
        try:
            return shutil.disk_usage(self.data_dir).free
        except OSError:
            return None

    def full(self, err: BaseException) -> DiskFullError | None:
        """A full file system, however the copy reported it, as one clear error."""
        full = isinstance(err, OSError) and err.errno in NO_SPACE
        if isinstance(err, shutil.Error):
            full = "No space left" in str(err) or "quota exceeded" in str(err).lower()
        if not full:
            return None
        free = self.free_bytes()
        return DiskFullError(
            f"the data dir {self.data_dir} ran out of space while preparing the "
            f"attempt ({'unknown' if free is None else free >> 20} MiB left)",
            hint="free space on that file system, or raise --min-free-mb so attempts are "
            "refused before it fills",
        )
