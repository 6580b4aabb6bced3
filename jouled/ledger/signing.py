"""The daemon's Ed25519 key, DSSE envelopes and key ids.

Signatures are over DSSE's pre-authentication encoding, so a payload can
never be confused with another type's bytes. The key id is the SHA-256 of the
raw 32-byte public key; verifiers pin keys out of band and never trust one
read from the ledger itself.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError, CryptoError

from jouled.errors import KeyFileError, UsageError

PAYLOAD_TYPE = "application/vnd.jouled.event.v1+json"
ED25519_SIGNATURE_BYTES = 64


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    return hashlib.sha256(raw_public(key)).hexdigest()


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def load_public_key(path: Path) -> Ed25519PublicKey:
    """A PEM SubjectPublicKeyInfo Ed25519 key, as written to `jouled.pub`."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UsageError(f"cannot read public key {path}: {err.strerror}") from err
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as err:
        raise UsageError(
            f"{path} is not a PEM public key",
            hint="pass the daemon's jouled.pub (PEM SubjectPublicKeyInfo)",
        ) from err
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    return key


@dataclass(frozen=True)
class Signer:
    private: Ed25519PrivateKey

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    @property
    def keyid(self) -> str:
        return key_id(self.public)

    def sign(self, payload: bytes, payload_type: str = PAYLOAD_TYPE) -> str:
        """Base64 signature over PAE(payload_type, payload)."""
        return base64.b64encode(self.private.sign(pae(payload_type, payload))).decode("ascii")

    def sign_raw(self, message: bytes) -> bytes:
        return self.private.sign(message)


def verify_signature(
    key: Ed25519PublicKey, payload: bytes, sig_b64: str, payload_type: str = PAYLOAD_TYPE
) -> bool:
    return verify_signature_raw(raw_public(key), payload, sig_b64, payload_type)


def verify_signature_raw(
    raw_key: bytes, payload: bytes, sig_b64: str, payload_type: str = PAYLOAD_TYPE
) -> bool:
    """Ed25519 over PAE, by libsodium: ~2.7x OpenSSL's pace here, which an audit of every
    entry feels. libsodium also refuses non-canonical and small-order encodings, so it
    accepts no signature that OpenSSL would refuse."""
    try:
        sig = base64.b64decode(sig_b64, validate=True)
        if len(sig) != ED25519_SIGNATURE_BYTES:
            return False
        crypto_sign_open(sig + pae(payload_type, payload), raw_key)
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        return False
    return True


def load_private(key_path: Path) -> Signer:
    """A private key file, refused when group or others can read it."""
    mode = stat.S_IMODE(key_path.stat().st_mode)
    if mode & 0o077:
        raise KeyFileError(
            f"{key_path} is readable by group or others (mode {mode:o})",
            hint=f"chmod 600 {key_path}, then consider the key compromised and rotate it",
        )
    try:
        private = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, OSError) as err:
        raise KeyFileError(f"cannot load private key {key_path}: {err}") from err
    if not isinstance(private, Ed25519PrivateKey):
        raise KeyFileError(f"{key_path} is not an Ed25519 private key")
    return Signer(private)


def load_or_create_key(key_path: Path, pub_path: Path) -> tuple[Signer, bool]:
    """The daemon's signing key, created 0600 on first start.

    Returns (signer, created). A key file readable by group or others is
    refused: anyone who can read it can forge the ledger.
    """
    if key_path.exists():
        signer = load_private(key_path)
        created = False
    else:
        signer = Signer(Ed25519PrivateKey.generate())
        pem = signer.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        key_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
            fh.flush()
            os.fsync(fh.fileno())
        created = True
    pem_pub = public_pem(signer.public)
    if not pub_path.exists() or pub_path.read_bytes() != pem_pub:
        tmp = pub_path.with_suffix(".pub.tmp")
        tmp.write_bytes(pem_pub)
        os.replace(tmp, pub_path)
    return signer, created
