"""Offline verification catches each kind of tampering with a specific message."""

import base64
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from jouled.errors import VerificationError
from jouled.ledger.signing import Signer
from jouled.ledger.verify import Report, verify_export, verify_file

from .test_store import open_ledger


@pytest.fixture
def exported(tmp_path: Path) -> tuple[list[str], list, str]:
    ledger = open_ledger(tmp_path)
    for i in range(5):
        ledger.append("result", {"task_id": f"s/t{i}", "resolved": i % 2 == 0})
    lines = [e.export_line() for e in ledger.iter_export()]
    note = ledger.checkpoint_note()
    keys = [ledger.signer.public]
    ledger.close()
    return lines, keys, note


def fails(lines: list[str], keys: list, notes: list[str], message: str, seq: int | None) -> None:
    """The same failure in-process and when worker processes scan ranges of the file."""
    with pytest.raises(VerificationError, match=message) as info:
        verify_export(lines, keys, notes)
    assert info.value.seq == seq
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "export.jsonl"
        path.write_text("".join(line + "\n" for line in lines))
        # Ranges of about one line, and of several, so failures land at a range's
        # first record and inside one.
        for chunk in (1500, 6000):
            with (
                mock.patch("jouled.ledger.verify.CHUNK_BYTES", chunk),
                pytest.raises(VerificationError, match=message) as parallel,
            ):
                verify_file(path, keys, notes, workers=2)
            assert parallel.value.seq == seq and str(parallel.value) == str(info.value)


def test_an_untouched_export_verifies(exported: tuple) -> None:
    lines, keys, note = exported
    report = verify_export(lines, keys, [note])
    assert report.entries == 6 and report.kinds == {"genesis": 1, "result": 5}
    assert report.checkpoints == [{"size": 6, "root": report.root}]


def resign_payload(line: str, edit: dict) -> str:
    record = json.loads(line)
    doc = json.loads(base64.b64decode(record["payload"]))
    doc["body"].update(edit)
    record["payload"] = base64.b64encode(
        json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    ).decode()
    return json.dumps(record)


def test_edited_payload(exported: tuple) -> None:
    lines, keys, note = exported
    lines[3] = resign_payload(lines[3], {"task_id": "s/evil"})
    fails(lines, keys, [note], "leaf hash does not match", 3)


def test_edited_payload_with_recomputed_leaf_hash(exported: tuple) -> None:
    from jouled.ledger.merkle import leaf_hash

    lines, keys, note = exported
    record = json.loads(resign_payload(lines[2], {"task_id": "s/evil"}))
    record["leaf_hash"] = leaf_hash(base64.b64decode(record["payload"])).hex()
    lines[2] = json.dumps(record)
    fails(lines, keys, [note], "signature by key .* does not verify", 2)


def test_reordered_entries(exported: tuple) -> None:
    lines, keys, note = exported
    lines[2], lines[3] = lines[3], lines[2]
    fails(lines, keys, [note], "expected entry 2 next, found 3", 2)


def test_deleted_middle_entry(exported: tuple) -> None:
    lines, keys, note = exported
    del lines[2]
    fails(lines, keys, [note], "1 entry missing", 2)


def test_deleted_tail_against_a_saved_checkpoint(exported: tuple) -> None:
    lines, keys, note = exported
    fails(lines[:-2], keys, [note], "export was truncated", None)
    # Without a checkpoint, a cut tail is indistinguishable from a shorter log.
    assert verify_export(lines[:-2], keys).entries == 4


def test_unknown_key(exported: tuple) -> None:
    lines, _, _note = exported
    other = [Ed25519PrivateKey.generate().public_key()]
    fails(lines, other, [], "no signature by a pinned key", 0)


def test_a_checkpoint_from_another_history(exported: tuple, tmp_path: Path) -> None:
    lines, keys, _ = exported
    other = open_ledger(tmp_path / "other")
    with pytest.raises(VerificationError):
        verify_export(lines, keys, [other.checkpoint_note()])
    other.close()


def test_garbage_line(exported: tuple) -> None:
    lines, keys, note = exported
    fails(
        [*lines[:3], "{not json", *lines[3:]],
        keys,
        [note],
        "export line 4 is not a ledger entry",
        None,
    )


def test_signature_checks_find_the_first_bad_entry(exported: tuple, tmp_path: Path) -> None:
    lines, keys, note = exported
    path = tmp_path / "export.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    assert verify_file(path, keys, [note], workers=2).entries == 6
    record = json.loads(lines[4])
    record["signatures"][0]["sig"] = json.loads(lines[1])["signatures"][0]["sig"]
    lines[4] = json.dumps(record)
    fails(lines, keys, [note], "does not verify", 4)
    # Merkle-only verification does not look at entry signatures.
    assert verify_export(lines, keys, [note], signatures=False).entries == 6


def test_since_an_earlier_checkpoint(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path)
    ledger.append("result", {"task_id": "s/a"})
    earlier = ledger.checkpoint_note()
    ledger.append("result", {"task_id": "s/b"})
    lines = [e.export_line() for e in ledger.iter_export()]
    keys = [ledger.signer.public]
    ledger.close()
    assert verify_export(lines, keys, [earlier]).checkpoints[0]["size"] == 2


def test_two_checkpoints_of_one_size_with_different_roots(tmp_path: Path) -> None:
    from jouled.ledger.checkpoint import Checkpoint, sign_note

    ledger = open_ledger(tmp_path)
    ledger.append("result", {"task_id": "s/a"})
    lines = [e.export_line() for e in ledger.iter_export()]
    honest = ledger.checkpoint_note()
    cp = ledger.checkpoint()
    forked = sign_note(Checkpoint(cp.origin, cp.size, bytes(32)), [(cp.origin, ledger.signer)])
    keys = [ledger.signer.public]
    ledger.close()
    with pytest.raises(VerificationError, match="do not hash to the checkpoint's root"):
        verify_export(lines, keys, [honest, forked])


def test_checkpoint_history_roots_are_checked_and_a_disagreeing_note_is_attributed(
    tmp_path: Path,
) -> None:
    from jouled.ledger.checkpoint import Checkpoint, sign_note

    ledger = open_ledger(tmp_path)
    for i in range(4):
        ledger.append("result", {"task_id": f"s/{i}"})
    lines = [e.export_line() for e in ledger.iter_export()]
    history = ledger.checkpoint_history()
    keys = [ledger.signer.public]
    cp = ledger.checkpoint()
    assert verify_export(lines, keys, history=history).history == len(history) == 5

    signed_fork = sign_note(Checkpoint(cp.origin, 3, bytes(32)), [(cp.origin, ledger.signer)])
    with pytest.raises(VerificationError, match="history forked"):
        verify_export(lines, keys, history=[*history[:2], signed_fork, *history[2:]])

    stranger = Signer(Ed25519PrivateKey.generate())
    forged = sign_note(Checkpoint(cp.origin, 3, bytes(32)), [(cp.origin, stranger)])
    with pytest.raises(VerificationError, match="no signature by a trusted key"):
        verify_export(lines, keys, history=[*history[:2], forged, *history[2:]])
    ledger.close()


@pytest.mark.parametrize(
    "payload",
    [
        {
            "body": {"a": {"x": 1}, "kind": "fake", "note": '},"kind":"evil"'},
            "kind": "result",
            "prev": "ab",
            "seq": 7,
            "time": "t",
        },
        {"body": {}, "kind": "genesis", "prev": "", "seq": 0, "time": "t"},
    ],
)
def test_the_envelope_read_from_the_tail_equals_a_full_parse(payload: dict) -> None:
    from jouled.ledger import canonical
    from jouled.ledger.verify import _envelope

    raw = canonical.dumpb(payload)
    full = json.loads(raw)
    assert _envelope(raw) == {k: full[k] for k in ("kind", "prev", "seq", "time")}
    # A payload with other top-level fields is parsed whole.
    extra = raw[:-1] + b',"zzz":1}'
    assert _envelope(extra)["zzz"] == 1


def test_failures_inside_a_workers_range_match_the_sequential_scan(tmp_path: Path) -> None:
    from jouled.ledger.merkle import leaf_hash

    ledger = open_ledger(tmp_path / "data")
    ledger.append_many([("result", {"task_id": f"s/t{i}"}) for i in range(40)])
    lines = [e.export_line() for e in ledger.iter_export()]
    keys, note = [ledger.signer.public], ledger.checkpoint_note()
    ledger.close()
    path = tmp_path / "export.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    with mock.patch("jouled.ledger.verify.CHUNK_BYTES", path.stat().st_size // 4):
        assert (
            verify_file(path, keys, [note], workers=2).root
            == verify_export(lines, keys, [note]).root
        )

    forged = json.loads(resign_payload(lines[17], {"task_id": "s/evil"}))
    forged["leaf_hash"] = leaf_hash(base64.b64decode(forged["payload"])).hex()
    reordered = list(lines)
    reordered[25], reordered[26] = reordered[26], reordered[25]
    for case, seq in (([*lines[:17], json.dumps(forged), *lines[18:]], 17), (reordered, 25)):
        with pytest.raises(VerificationError) as sequential:
            verify_export(case, keys, [note])
        path.write_text("".join(line + "\n" for line in case))
        with (
            mock.patch("jouled.ledger.verify.CHUNK_BYTES", path.stat().st_size // 4),
            pytest.raises(VerificationError) as parallel,
        ):
            verify_file(path, keys, [note], workers=2)
        assert sequential.value.seq == parallel.value.seq == seq
        assert str(sequential.value) == str(parallel.value)


def _odd_signature(line: str, change: str) -> str:
    record = json.loads(line)
    sig = record["signatures"][0]
    if change == "extra field":
        sig["note"] = "ignored"
    elif change == "numeric keyid":
        sig["keyid"] = 7
    elif change == "no sig":
        del sig["sig"]
    return json.dumps(record)


@pytest.mark.parametrize("change", ["extra field", "numeric keyid", "no sig"])
@pytest.mark.parametrize("layout", ["blank lines", "no final newline"])
def test_a_worker_range_reads_like_the_sequential_scan(
    tmp_path: Path, change: str, layout: str
) -> None:
    """Odd lines and odd signatures get the same verdict, whichever way they are read."""
    ledger = open_ledger(tmp_path / "data")
    ledger.append_many([("result", {"task_id": f"s/t{i}"}) for i in range(30)])
    lines = [e.export_line() for e in ledger.iter_export()]
    keys, note = [ledger.signer.public], ledger.checkpoint_note()
    ledger.close()
    lines[20] = _odd_signature(lines[20], change)
    text = "\n".join(lines)
    text = (
        text.replace(lines[10] + "\n", lines[10] + "\n\n\n") + "\n"
        if layout == "blank lines"
        else text
    )
    path = tmp_path / "export.jsonl"
    path.write_text(text)

    def outcome(run: Callable[[], Report]) -> tuple[str, object]:
        try:
            return "ok", run().root
        except VerificationError as err:
            return str(err), err.seq

    sequential = outcome(lambda: verify_export(text.split("\n"), keys, [note]))
    with mock.patch("jouled.ledger.verify.CHUNK_BYTES", path.stat().st_size // 5):
        parallel = outcome(lambda: verify_file(path, keys, [note], workers=2))
    assert parallel == sequential
    assert (sequential[0] == "ok") == (change == "extra field")
