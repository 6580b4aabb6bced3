"""Run output and long test-id lists, kept in the data dir by content hash.

A result signs the sha256 of each text; the text itself lives in
`<data>/logs/<sha256>`, written once (atomically, 0600) and read back only
after its hash is checked again, so a blob changed on disk is never served
as if it were the signed one.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

_HEX = frozenset("0123456789abcdef")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _is_digest(value: str) -> bool:
    return len(value) == 64 and set(value) <= _HEX


class LogStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, digest: str) -> Path | None:
        return self.root / digest if _is_digest(digest) else None

    def put(self, data: bytes) -> str:
        """Store `data` under its sha256 (once: an existing blob is kept); the digest."""
        digest = sha256_hex(data)
        path = self.root / digest
        if self.get(digest) is not None:
            return digest
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".put-", dir=self.root)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return digest

    def get(self, digest: str) -> bytes | None:
        """The blob stored under `digest`; None when absent, unreadable or changed."""
        path = self.path(digest)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError:
            return None
        return data if sha256_hex(data) == digest else None
