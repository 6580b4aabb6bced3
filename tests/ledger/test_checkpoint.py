"""Checkpoints as C2SP signed notes: format, signatures, strict parsing, atomic writes."""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from jouled.errors import LedgerError, LedgerFullError, UsageError, VerificationError
from jouled.ledger import checkpoint as cp
from jouled.ledger.checkpoint import (
    Checkpoint,
    key_hash,
    parse_note,
    sign_note,
    verify_note,
    vkey,
    write_atomic,
)
from jouled.ledger.merkle import leaf_hash, root_from_leaves
from jouled.ledger.signing import Signer

# golang.org/x/mod/sumdb/note's documented example (note.go package doc): a
# private key, its verifier key, and the note it signs. Ed25519 is
# deterministic, so matching it byte for byte shows Go tooling reads our keys
# and signatures.
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_SIG = (
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
)

# The example checkpoint in c2sp.org/tlog-checkpoint.
SPEC_NOTE = (
    "example.com/behind-the-sofa\n"
    "20852163\n"
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    "\n"
    "— example.com/behind-the-sofa "
    "Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
)

ORIGIN = "jouled/host-a/1a2b3c4d"
ROOT = root_from_leaves([leaf_hash(b"entry %d" % i) for i in range(5)])
CHECKPOINT = Checkpoint(ORIGIN, 5, ROOT)


def signer(seed: int) -> Signer:
    return Signer(Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32))


OLD, NEW, STRANGER = signer(1), signer(2), signer(3)


def go_signer() -> tuple[str, Signer]:
    # The key material is the last field and may itself contain '+'.
    _, _, name, _, material = GO_SKEY.split("+", 4)
    raw = base64.b64decode(material)
    assert raw[0] == 0x01
    return name, Signer(Ed25519PrivateKey.from_private_bytes(raw[1:]))


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


# -- format --------------------------------------------------------------------------------


def test_body_is_origin_size_and_base64_root() -> None:
    assert CHECKPOINT.body() == f"{ORIGIN}\n5\n{b64(ROOT)}\n".encode()


def test_note_layout_is_body_blank_line_and_signature_lines() -> None:
    note = sign_note(CHECKPOINT, [(ORIGIN, OLD)])
    blob = b64(key_hash(ORIGIN, OLD.public) + OLD.sign_raw(CHECKPOINT.body()))
    assert note == CHECKPOINT.body().decode() + "\n" + f"— {ORIGIN} {blob}\n"


def test_key_hash_and_vkey_match_go_note_package() -> None:
    name, go = go_signer()
    assert key_hash(name, go.public).hex() == "c74f20a3"
    assert vkey(name, go.public) == GO_VKEY


def test_signature_bytes_match_go_note_package() -> None:
    name, go = go_signer()
    blob = b64(key_hash(name, go.public) + go.sign_raw(GO_TEXT.encode()))
    assert blob == GO_SIG


def test_spec_example_parses() -> None:
    checkpoint, sigs = parse_note(SPEC_NOTE)
    assert checkpoint.origin == "example.com/behind-the-sofa"
    assert checkpoint.size == 20852163
    assert checkpoint.root == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
    assert [(s.name, len(s.key_hash), len(s.signature)) for s in sigs] == [
        ("example.com/behind-the-sofa", 4, 64)
    ]
    assert checkpoint.body() == SPEC_NOTE.split("\n\n")[0].encode() + b"\n"


def test_empty_tree_checkpoint_round_trips() -> None:
    empty = Checkpoint(ORIGIN, 0, root_from_leaves([]))
    note = sign_note(empty, [(ORIGIN, OLD)])
    assert "\n0\n" in note
    assert verify_note(note, {ORIGIN: OLD.public}) == empty


# -- signatures ----------------------------------------------------------------------------


def test_round_trip() -> None:
    note = sign_note(CHECKPOINT, [(ORIGIN, OLD)])
    assert verify_note(note, {ORIGIN: OLD.public}) == CHECKPOINT
    assert verify_note(note.encode(), [(ORIGIN, OLD.public)]) == CHECKPOINT
    checkpoint, sigs = parse_note(note)
    assert checkpoint == CHECKPOINT
    assert [(s.name, s.key_hash) for s in sigs] == [(ORIGIN, key_hash(ORIGIN, OLD.public))]


def test_dual_signed_note_verifies_with_either_key() -> None:
    note = sign_note(CHECKPOINT, [(ORIGIN, OLD), (ORIGIN, NEW)])
    assert len(parse_note(note)[1]) == 2
    assert verify_note(note, [(ORIGIN, OLD.public)]) == CHECKPOINT
    assert verify_note(note, [(ORIGIN, NEW.public)]) == CHECKPOINT
    assert verify_note(note, [(ORIGIN, OLD.public), (ORIGIN, NEW.public)]) == CHECKPOINT


def edit(note: str, old: str, new: str) -> str:
    assert note.count(old) == 1
    return note.replace(old, new)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda n: edit(n, "\n5\n", "\n6\n"),
        lambda n: edit(n, b64(ROOT), b64(bytes(32))),
        lambda n: edit(n, ORIGIN + "\n", "jouled/host-b/1a2b3c4d\n"),
    ],
    ids=["size", "root", "origin"],
)
def test_edited_checkpoint_fails(tamper: Callable[[str], str]) -> None:
    note = tamper(sign_note(CHECKPOINT, [(ORIGIN, OLD)]))
    with pytest.raises(VerificationError, match=r"trusted key .* does not verify"):
        verify_note(note, {ORIGIN: OLD.public})


def test_unknown_signatures_are_ignored() -> None:
    note = sign_note(CHECKPOINT, [("witness.example/w1", STRANGER), (ORIGIN, OLD)])
    assert verify_note(note, {ORIGIN: OLD.public}) == CHECKPOINT


def test_same_name_other_key_is_an_unknown_signature() -> None:
    # The spec identifies a key by name and key hash together; sharing only
    # the name makes it someone else's key, to be skipped, not failed.
    note = sign_note(CHECKPOINT, [(ORIGIN, STRANGER), (ORIGIN, OLD)])
    assert verify_note(note, {ORIGIN: OLD.public}) == CHECKPOINT


def test_note_without_a_trusted_signature_fails() -> None:
    note = sign_note(CHECKPOINT, [("witness.example/w1", STRANGER)])
    with pytest.raises(VerificationError, match="no signature by a trusted key") as info:
        verify_note(note, {ORIGIN: OLD.public})
    assert "witness.example/w1+" in info.value.message
    assert f"{ORIGIN}+{key_hash(ORIGIN, OLD.public).hex()}" in info.value.message


def test_trusted_key_under_another_name_does_not_count() -> None:
    note = sign_note(CHECKPOINT, [(ORIGIN, OLD)])
    with pytest.raises(VerificationError, match="no signature by a trusted key"):
        verify_note(note, {"jouled/elsewhere": OLD.public})


def test_forged_signature_under_a_trusted_key_id_fails() -> None:
    kh = key_hash(ORIGIN, OLD.public)
    forged = b64(kh + STRANGER.sign_raw(CHECKPOINT.body()))
    note = CHECKPOINT.body().decode() + f"\n— {ORIGIN} {forged}\n"
    with pytest.raises(VerificationError, match="does not verify"):
        verify_note(note, {ORIGIN: OLD.public})


def test_truncated_signature_under_a_trusted_key_id_fails() -> None:
    kh = key_hash(ORIGIN, OLD.public)
    short = b64(kh + OLD.sign_raw(CHECKPOINT.body())[:63])
    note = CHECKPOINT.body().decode() + f"\n— {ORIGIN} {short}\n"
    with pytest.raises(VerificationError, match="does not verify"):
        verify_note(note, {ORIGIN: OLD.public})


def test_signing_needs_valid_signers() -> None:
    with pytest.raises(UsageError, match="at least one signer"):
        sign_note(CHECKPOINT, [])
    for name in ["", "has space", "has+plus", "tab\there"]:
        with pytest.raises(UsageError, match="key name"):
            sign_note(CHECKPOINT, [(name, OLD)])
    with pytest.raises(UsageError, match="listed twice"):
        sign_note(CHECKPOINT, [(ORIGIN, OLD), (ORIGIN, OLD)])


def test_verifying_needs_trusted_keys() -> None:
    note = sign_note(CHECKPOINT, [(ORIGIN, OLD)])
    with pytest.raises(UsageError, match="no trusted keys"):
        verify_note(note, {})


@pytest.mark.parametrize(
    ("origin", "size", "root"),
    [
        ("", 1, ROOT),
        ("two\nlines", 1, ROOT),
        ("carriage\rreturn", 1, ROOT),
        (ORIGIN, -1, ROOT),
        (ORIGIN, 2**64, ROOT),
        (ORIGIN, True, ROOT),
        (ORIGIN, 1, ROOT[:31]),
    ],
    ids=["empty-origin", "newline", "control", "negative", "huge", "bool", "short-root"],
)
def test_checkpoint_refuses_values_it_cannot_encode(origin: str, size: int, root: bytes) -> None:
    with pytest.raises(UsageError):
        Checkpoint(origin, size, root)


# -- strict parsing ------------------------------------------------------------------------

BODY = CHECKPOINT.body().decode()


def good_note() -> str:
    return sign_note(CHECKPOINT, [(ORIGIN, OLD)])


def sig_line() -> str:
    return good_note().split("\n\n")[1]


def with_body(body: str) -> str:
    return body + "\n" + sig_line()


def non_canonical(encoded: str) -> str:
    # Before one '=' of padding, the last character's two low bits are
    # padding too; setting one still decodes, to the same bytes.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    assert encoded.endswith("=") and not encoded.endswith("==")
    last = alphabet[alphabet.index(encoded[-2]) ^ 1]
    return encoded[:-2] + last + "="


MALFORMED: dict[str, tuple[Callable[[], str | bytes], str]] = {
    "no-blank-line": (lambda: BODY + sig_line(), "no blank line separates"),
    "no-trailing-newline": (lambda: good_note()[:-1], "does not end with a newline"),
    "no-signatures": (lambda: BODY + "\n", "no signature lines"),
    "size-letters": (lambda: with_body(edit(BODY, "\n5\n", "\n5a\n")), "not a decimal number"),
    "size-leading-zero": (lambda: with_body(edit(BODY, "\n5\n", "\n05\n")), "leading zeros"),
    "size-sign": (lambda: with_body(edit(BODY, "\n5\n", "\n+5\n")), "not a decimal number"),
    "size-unicode-digit": (lambda: with_body(edit(BODY, "\n5\n", "\n٥\n")), "not a decimal"),
    "size-overflow": (lambda: with_body(edit(BODY, "\n5\n", f"\n{2**64}\n")), "64 bits"),
    "root-bad-base64": (
        lambda: with_body(edit(BODY, b64(ROOT), "not*base64")),
        "root hash is not valid base64",
    ),
    "root-non-canonical": (
        lambda: with_body(edit(BODY, b64(ROOT), non_canonical(b64(ROOT)))),
        "root hash is not canonical base64",
    ),
    "root-31-bytes": (
        lambda: with_body(edit(BODY, b64(ROOT), b64(ROOT[:31]))),
        "root hash is 31 bytes, not 32",
    ),
    "root-33-bytes": (
        lambda: with_body(edit(BODY, b64(ROOT), b64(ROOT + b"\x00"))),
        "root hash is 33 bytes, not 32",
    ),
    "two-lines": (lambda: with_body(f"{ORIGIN}\n5\n"), "has 2 lines"),
    "empty-origin": (lambda: with_body(BODY[len(ORIGIN) :]), "origin line is empty"),
    "extension-line": (lambda: with_body(BODY + "extra\n"), "extension lines"),
    "hyphen-not-em-dash": (lambda: BODY + "\n-" + sig_line()[1:], "em dash"),
    "no-key-name": (lambda: BODY + "\n— " + sig_line().split(" ")[2], "no valid key name"),
    "plus-in-key-name": (
        lambda: BODY + "\n" + sig_line().replace(ORIGIN, "a+b"),
        "no valid key name",
    ),
    "signature-bad-base64": (
        lambda: BODY + f"\n— {ORIGIN} !!!!\n",
        "signature on signature line 1 is not valid base64",
    ),
    "signature-too-short": (
        lambda: BODY + f"\n— {ORIGIN} {b64(b'abcd')}\n",
        "signature on signature line 1 is only 4 bytes",
    ),
    "crlf": (lambda: good_note().replace("\n", "\r\n"), "control character"),
    "nul": (lambda: good_note().replace(ORIGIN, ORIGIN + "\x00"), "control character"),
    "invalid-utf8": (lambda: good_note().encode().replace(b"\xe2\x80\x94", b"\xe2\x80"), "UTF-8"),
    "lone-surrogate": (lambda: good_note().replace(ORIGIN, ORIGIN + "\ud800"), "UTF-8"),
    "too-many-signatures": (
        lambda: BODY + "\n" + sig_line() * (cp.MAX_SIGNATURES + 1),
        "more than 100 signatures",
    ),
    "too-long": (lambda: BODY + "\n" + "x" * cp.MAX_NOTE_BYTES, "longer than"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_malformed_notes_are_refused_with_the_reason(case: str) -> None:
    make, reason = MALFORMED[case]
    note = make()
    with pytest.raises(VerificationError, match="malformed checkpoint note") as info:
        parse_note(note)
    assert reason in info.value.message
    with pytest.raises(VerificationError, match="malformed checkpoint note"):
        verify_note(note, {ORIGIN: OLD.public})


def test_note_read_back_as_bytes_verifies(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.note"
    write_atomic(path, good_note())
    assert verify_note(path.read_bytes(), {ORIGIN: OLD.public}) == CHECKPOINT


# -- atomic writes -------------------------------------------------------------------------


def test_write_atomic_writes_exact_content_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.note"
    first = sign_note(CHECKPOINT, [(ORIGIN, OLD)])
    write_atomic(path, first)
    assert path.read_bytes() == first.encode()
    second = sign_note(Checkpoint(ORIGIN, 6, bytes(32)), [(ORIGIN, OLD), (ORIGIN, NEW)])
    write_atomic(path, second)
    assert path.read_bytes() == second.encode()
    assert os.listdir(tmp_path) == ["checkpoint.note"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_failed_write_keeps_the_old_file_and_no_temp_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "checkpoint.note"
    write_atomic(path, "old\n")

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cp.os, "replace", refuse)
    with pytest.raises(LedgerFullError, match="the data dir ran out of space: cannot write"):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["checkpoint.note"]


def test_write_into_a_missing_directory_is_a_ledger_error(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="cannot write"):
        write_atomic(tmp_path / "missing" / "checkpoint.note", "x\n")
