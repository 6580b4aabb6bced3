"""The daemon's key files: the current key, a retired one, and rotation between them.

Rotation writes the new key to `jouled.key.next` before the ledger names it,
and only then moves files into place, so a crash at any point leaves a state
the next start can finish: a `key_rotation` entry whose new key is in
`jouled.key.next` completes the rename.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from jouled.ledger.signing import Signer, load_or_create_key, load_private, public_pem


@dataclass(frozen=True)
class KeyPaths:
    key: Path
    pub: Path

    @property
    def next(self) -> Path:
        return self.key.with_name(self.key.name + ".next")

    @property
    def retired(self) -> Path:
        return self.key.with_name(self.key.name + ".retired")


def _write_private(path: Path, signer: Signer) -> None:
    pem = signer.private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
        fh.flush()
        os.fsync(fh.fileno())


def load_keys(paths: KeyPaths) -> tuple[Signer, Signer | None, bool]:
    """(current, retired or None, created now)."""
    signer, created = load_or_create_key(paths.key, paths.pub)
    retired = load_private(paths.retired) if paths.retired.exists() else None
    return signer, retired, created


def prepare_next(paths: KeyPaths) -> Signer:
    """A fresh key written to jouled.key.next (0600), not yet in use."""
    signer = Signer(Ed25519PrivateKey.generate())
    _write_private(paths.next, signer)
    return signer


def settle(paths: KeyPaths, ledger_keyid: str | None) -> None:
    """Finish or undo a rotation a crash interrupted, given the key the ledger names."""
    if not paths.next.exists():
        return
    if ledger_keyid is not None and load_private(paths.next).keyid == ledger_keyid:
        finish_rotation(paths)
    else:
        paths.next.unlink()  # the ledger never named it: the rotation did not happen


def finish_rotation(paths: KeyPaths) -> None:
    """Move jouled.key.next into place; the current key becomes jouled.key.retired."""
    pending = load_private(paths.next)
    os.replace(paths.key, paths.retired)
    os.replace(paths.next, paths.key)
    tmp = paths.pub.with_name(paths.pub.name + ".tmp")
    tmp.write_bytes(public_pem(pending.public))
    os.replace(tmp, paths.pub)
