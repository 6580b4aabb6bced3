"""The test vectors docs/ledger.md prints, computed with the daemon's own code.

Ed25519 signatures are deterministic, so everything here follows from a fixed
seed: the page must print exactly these values.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from jouled.ledger import merkle
from jouled.ledger.checkpoint import Checkpoint, sign_note
from jouled.ledger.entry import make_entry
from jouled.ledger.signing import PAYLOAD_TYPE, Signer, pae, public_pem, raw_public

SEED = bytes(range(32))
ORIGIN = "example.org/jouled"


def entries_vector() -> dict[str, Any]:
    """A two-entry ledger (genesis, calibration), its tree and its checkpoint."""
    signer = Signer(Ed25519PrivateKey.from_private_bytes(SEED))
    raw = base64.b64encode(raw_public(signer.public)).decode("ascii")
    genesis = {
        "host": "example",
        "keyid": signer.keyid,
        "origin": ORIGIN,
        "public_key": raw,
        "version": "0.1.0",
    }
    calibration = {
        "domains": {"package-0": {"idle_mw": 4100, "stddev_mw": 120}},
        "seconds": 10,
        "source": "rapl",
    }
    times = ["2026-01-01T00:00:00.000Z", "2026-01-01T00:00:10.000Z"]
    first = make_entry(0, "genesis", b"", genesis, [signer], time=times[0])
    second = make_entry(1, "calibration", first.leaf_hash, calibration, [signer], time=times[1])
    tree = merkle.MerkleTree()
    for entry in (first, second):
        tree.append(entry.leaf_hash)
    note = sign_note(Checkpoint(ORIGIN, 2, tree.root()), [(ORIGIN, signer)])
    return {
        "seed_hex": SEED.hex(),
        "public_key_pem": public_pem(signer.public).decode("ascii"),
        "public_key_raw": raw,
        "keyid": signer.keyid,
        "entries": [
            {
                "payload_text": e.payload.decode("utf-8"),
                "pae_text": pae(PAYLOAD_TYPE, e.payload).decode("utf-8"),
                "leaf_hash": e.leaf_hash.hex(),
                "export_line": json.loads(e.export_line()),
            }
            for e in (first, second)
        ],
        "tree_size": 2,
        "root": tree.root().hex(),
        "inclusion_proof_of_seq_1": [h.hex() for h in tree.inclusion_proof(1, 2)],
        "checkpoint_note": note,
    }


if __name__ == "__main__":
    print(json.dumps(entries_vector(), indent=2, ensure_ascii=False))
