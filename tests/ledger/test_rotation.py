"""Key rotation: the old key names the new one, auditors pin each key for its range."""

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from jouled.config import Config
from jouled.errors import VerificationError
from jouled.ledger import keys
from jouled.ledger.checkpoint import parse_note
from jouled.ledger.signing import Signer
from jouled.ledger.trust import PinnedKey, load_trust_file
from jouled.ledger.verify import verify_export
from jouled.startup import open_ledger, rotate_key


def config(d: Path) -> Config:
    return Config.from_env({}, data_dir=d)


def export(d: Path) -> tuple[list[str], str]:
    ledger = open_ledger(config(d))
    try:
        return [e.export_line() for e in ledger.iter_export()], ledger.checkpoint_note()
    finally:
        ledger.close()


@pytest.fixture
def rotated(tmp_path: Path) -> dict:
    ledger = open_ledger(config(tmp_path))
    ledger.append("result", {"task_id": "s/a"})
    old = ledger.signer
    ledger.close()
    entry = rotate_key(config(tmp_path), overlap_entries=2)
    ledger = open_ledger(config(tmp_path))
    new = ledger.signer
    for i in range(4):
        ledger.append("result", {"task_id": f"s/b{i}"})
    ledger.close()
    return {"dir": tmp_path, "old": old, "new": new, "seq": entry.seq}


def test_rotation_entry_is_signed_by_the_old_key_and_names_the_new(rotated: dict) -> None:
    lines, _ = export(rotated["dir"])
    rotation = json.loads(lines[rotated["seq"]])
    assert [s["keyid"] for s in rotation["signatures"]] == [rotated["old"].keyid]
    after = json.loads(lines[rotated["seq"] + 1])
    assert [s["keyid"] for s in after["signatures"]] == [rotated["new"].keyid]
    assert not (rotated["dir"] / "jouled.key.next").exists()
    assert (rotated["dir"] / "jouled.key.retired").exists()


def test_checkpoints_are_dual_signed_for_the_overlap(rotated: dict) -> None:
    ledger = open_ledger(config(rotated["dir"]))
    history = ledger.checkpoint_history()
    ledger.close()
    signers = {parse_note(n)[0].size: len(parse_note(n)[1]) for n in history}
    seq = rotated["seq"]
    assert signers[seq] == 1  # before the rotation
    assert signers[seq + 1] == 2 and signers[seq + 3] == 2  # rotation entry + overlap
    assert signers[seq + 4] == 1


def test_ranged_trust_verifies_and_an_open_ended_old_key_does_not(rotated: dict) -> None:
    lines, note = export(rotated["dir"])
    seq = rotated["seq"]
    trust = [PinnedKey(rotated["old"].public, 0, seq), PinnedKey(rotated["new"].public, seq + 1)]
    assert verify_export(lines, trust, [note]).entries == len(lines)
    with pytest.raises(VerificationError, match="no signature by a pinned key") as info:
        verify_export(lines, [rotated["old"].public], [note])
    assert info.value.seq == seq + 1


def test_a_key_used_outside_its_range_is_revoked(rotated: dict) -> None:
    lines, note = export(rotated["dir"])
    seq = rotated["seq"]
    trust = [
        PinnedKey(rotated["old"].public, 0, seq - 1),
        PinnedKey(rotated["new"].public, seq + 1),
    ]
    with pytest.raises(VerificationError, match="not trusted for this entry") as info:
        verify_export(lines, trust, [note])
    assert info.value.seq == seq


def test_trust_file(rotated: dict, tmp_path: Path) -> None:
    import base64

    from jouled.ledger.signing import public_pem, raw_public

    seq = rotated["seq"]
    path = tmp_path / "trust.json"
    path.write_text(
        json.dumps(
            {
                "keys": [
                    {"public_key": public_pem(rotated["old"].public).decode(), "to_seq": seq},
                    {
                        "public_key": base64.b64encode(raw_public(rotated["new"].public)).decode(),
                        "from_seq": seq + 1,
                    },
                ]
            }
        )
    )
    pinned = load_trust_file(path)
    assert [(p.from_seq, p.to_seq) for p in pinned] == [(0, seq), (seq + 1, None)]
    lines, note = export(rotated["dir"])
    assert verify_export(lines, pinned, [note]).entries == len(lines)


def test_a_crash_after_the_rotation_entry_is_finished_at_start(tmp_path: Path) -> None:
    ledger = open_ledger(config(tmp_path))
    paths = keys.KeyPaths(tmp_path / "jouled.key", tmp_path / "jouled.pub")
    new = keys.prepare_next(paths)
    ledger.rotate(new, 0)
    ledger.close()  # crash before the key files moved
    ledger = open_ledger(config(tmp_path))
    assert ledger.signer.keyid == new.keyid
    ledger.close()


def test_a_crash_before_the_rotation_entry_discards_the_new_key(tmp_path: Path) -> None:
    ledger = open_ledger(config(tmp_path))
    current = ledger.signer.keyid
    ledger.close()
    paths = keys.KeyPaths(tmp_path / "jouled.key", tmp_path / "jouled.pub")
    keys.prepare_next(paths)
    ledger = open_ledger(config(tmp_path))
    assert ledger.signer.keyid == current and not paths.next.exists()
    ledger.close()


def test_a_pinned_range_is_inclusive() -> None:
    other = Signer(Ed25519PrivateKey.generate())
    assert PinnedKey(other.public, 5, 9).covers(7) and not PinnedKey(other.public, 5, 9).covers(10)
