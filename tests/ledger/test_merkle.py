"""RFC 9162 Merkle trees: published vectors, a recursive reference, proof round trips."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pytest

from jouled.errors import UsageError
from jouled.ledger.merkle import (
    EMPTY_ROOT,
    MerkleAccumulator,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_leaves,
    verify_consistency,
    verify_inclusion,
)

# Certificate Transparency's reference data, as carried by
# github.com/transparency-dev/merkle: testonly/constants.go (LeafInputs,
# NodeHashes, RootHashes, CompactTrees) and proof/verify_test.go (the inclusion
# and consistency vectors, whose leaf numbers there are 1-based).
CT_LEAF_INPUTS = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    b"\x50\x51\x52\x53\x54\x55\x56\x57",
    b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
]
CT_ROOTS = {
    0: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    2: "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    3: "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    4: "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    5: "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    6: "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    7: "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
}
CT_LEAF_HASHES = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
    "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
    "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
    "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
    "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
]
# Perfect subtrees [start, end) that the vectors below refer to.
CT_NODES = {
    (0, 2): "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    (2, 4): "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
    (4, 6): "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
    (6, 8): "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    (0, 4): "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    (4, 8): "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
}
CT_INCLUSION = [  # (0-based index, size, proof)
    (0, 8, [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ]),
    (5, 8, [
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ]),
]  # fmt: skip
CT_CONSISTENCY = [  # (old size, new size, proof)
    (1, 1, []),
    (1, 8, [
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ]),
    (6, 8, [
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ]),
    (2, 5, [
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    ]),
    (6, 7, [
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    ]),
]  # fmt: skip

MAX_SIZE = 64
LEAVES = [leaf_hash(b"entry %d" % i) for i in range(MAX_SIZE)]
OTHER = hashlib.sha256(b"not in the tree").digest()


def ct_leaves() -> list[bytes]:
    return [leaf_hash(data) for data in CT_LEAF_INPUTS]


def hexes(proof: Sequence[bytes]) -> list[str]:
    return [h.hex() for h in proof]


def flipped(proof: Sequence[bytes], i: int) -> list[bytes]:
    out = list(proof)
    out[i] = bytes([out[i][0] ^ 0x10]) + out[i][1:]
    return out


# -- reference: RFC 9162 §2.1 written out recursively -------------------------------------


def largest_power_of_two_below(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_root(d: Sequence[bytes]) -> bytes:
    n = len(d)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return d[0]
    k = largest_power_of_two_below(n)
    return hashlib.sha256(b"\x01" + ref_root(d[:k]) + ref_root(d[k:])).digest()


def ref_path(m: int, d: Sequence[bytes]) -> list[bytes]:
    n = len(d)
    if n == 1:
        return []
    k = largest_power_of_two_below(n)
    if m < k:
        return [*ref_path(m, d[:k]), ref_root(d[k:])]
    return [*ref_path(m - k, d[k:]), ref_root(d[:k])]


def ref_subproof(m: int, d: Sequence[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [ref_root(d)]
    k = largest_power_of_two_below(n)
    if m <= k:
        return [*ref_subproof(m, d[:k], b), ref_root(d[k:])]
    return [*ref_subproof(m - k, d[k:], False), ref_root(d[:k])]


REF_ROOTS = [ref_root(LEAVES[:n]) for n in range(MAX_SIZE + 1)]


# -- published vectors --------------------------------------------------------------------


def test_leaf_hashes_match_ct_vectors() -> None:
    assert hexes(ct_leaves()) == CT_LEAF_HASHES


def test_roots_match_ct_vectors_for_every_size() -> None:
    leaves = ct_leaves()
    for size, expected in CT_ROOTS.items():
        assert root_from_leaves(leaves[:size]).hex() == expected, size
        assert MerkleAccumulator.from_leaves(leaves[:size]).root().hex() == expected, size
        assert ref_root(leaves[:size]).hex() == expected, size


def test_empty_root_is_sha256_of_nothing() -> None:
    assert EMPTY_ROOT.hex() == CT_ROOTS[0]
    assert root_from_leaves([]) == EMPTY_ROOT


def test_node_hash_matches_ct_vectors() -> None:
    leaves = ct_leaves()
    for (start, end), expected in CT_NODES.items():
        assert root_from_leaves(leaves[start:end]).hex() == expected
    assert node_hash(leaves[0], leaves[1]).hex() == CT_NODES[(0, 2)]


@pytest.mark.parametrize(("index", "size", "proof"), CT_INCLUSION)
def test_inclusion_matches_ct_vectors(index: int, size: int, proof: list[str]) -> None:
    leaves = ct_leaves()
    assert hexes(inclusion_proof(leaves, index, size)) == proof
    root = bytes.fromhex(CT_ROOTS[size])
    assert verify_inclusion(leaves[index], index, size, [bytes.fromhex(p) for p in proof], root)


@pytest.mark.parametrize(("old", "new", "proof"), CT_CONSISTENCY)
def test_consistency_matches_ct_vectors(old: int, new: int, proof: list[str]) -> None:
    assert hexes(consistency_proof(ct_leaves(), old, new)) == proof
    old_root, new_root = bytes.fromhex(CT_ROOTS[old]), bytes.fromhex(CT_ROOTS[new])
    assert verify_consistency(old, new, old_root, new_root, [bytes.fromhex(p) for p in proof])


def test_accumulator_peaks_match_ct_compact_trees() -> None:
    leaves = ct_leaves()
    level0 = CT_LEAF_HASHES
    expected = {
        1: [level0[0]],
        2: [CT_NODES[(0, 2)]],
        3: [CT_NODES[(0, 2)], level0[2]],
        4: [CT_NODES[(0, 4)]],
        5: [CT_NODES[(0, 4)], level0[4]],
        6: [CT_NODES[(0, 4)], CT_NODES[(4, 6)]],
        7: [CT_NODES[(0, 4)], CT_NODES[(4, 6)], level0[6]],
        8: [CT_ROOTS[8]],
    }
    acc = MerkleAccumulator()
    for size in range(1, 9):
        acc.append(leaves[size - 1])
        assert hexes(acc.peaks) == expected[size], size


# -- against the recursive reference ------------------------------------------------------


def test_root_and_accumulator_agree_with_reference_for_every_size() -> None:
    acc = MerkleAccumulator()
    assert acc.size == 0 and acc.root() == REF_ROOTS[0]
    for size in range(MAX_SIZE + 1):
        assert root_from_leaves(LEAVES[:size]) == REF_ROOTS[size], size
        assert MerkleAccumulator.from_leaves(LEAVES[:size]).root() == REF_ROOTS[size], size
        if size:
            acc.append(LEAVES[size - 1])
            assert acc.size == size
            assert acc.root() == REF_ROOTS[size], size


def test_accumulator_restores_from_peaks() -> None:
    for size in range(MAX_SIZE):
        saved = MerkleAccumulator.from_leaves(LEAVES[:size])
        restored = MerkleAccumulator.from_peaks(saved.size, saved.peaks)
        assert restored.root() == REF_ROOTS[size]
        restored.append(LEAVES[size])
        assert restored.root() == REF_ROOTS[size + 1]


def test_from_peaks_rejects_a_shape_that_cannot_be() -> None:
    with pytest.raises(UsageError, match="has 2 peaks, not 1"):
        MerkleAccumulator.from_peaks(3, [OTHER])
    with pytest.raises(UsageError, match="32-byte"):
        MerkleAccumulator.from_peaks(1, [b"short"])


def test_payloads_are_refused_where_leaf_hashes_belong() -> None:
    with pytest.raises(UsageError, match="leaf 1 is not a 32-byte leaf hash"):
        root_from_leaves([LEAVES[0], b"a payload, not its hash"])
    with pytest.raises(UsageError, match="32-byte"):
        MerkleAccumulator().append(b"payload")


def test_inclusion_proofs_match_reference() -> None:
    for size in range(1, MAX_SIZE):
        for index in range(size):
            assert inclusion_proof(LEAVES, index, size) == ref_path(index, LEAVES[:size])


def test_consistency_proofs_match_reference() -> None:
    for new in range(1, MAX_SIZE):
        for old in range(1, new + 1):
            expected = ref_subproof(old, LEAVES[:new], True)
            assert consistency_proof(LEAVES, old, new) == expected, (old, new)


# -- round trips and tampering ------------------------------------------------------------


def test_every_inclusion_proof_verifies_and_tampering_fails() -> None:
    for size in range(1, MAX_SIZE):
        root = REF_ROOTS[size]
        for index in range(size):
            leaf = LEAVES[index]
            proof = inclusion_proof(LEAVES, index, size)
            assert verify_inclusion(leaf, index, size, proof, root), (index, size)
            where = (index, size)
            if size > 1:
                other = (index + 1) % size
                assert not verify_inclusion(leaf, other, size, proof, root), where
                assert not verify_inclusion(LEAVES[other], index, size, proof, root), where
            assert not verify_inclusion(OTHER, index, size, proof, root), where
            assert not verify_inclusion(leaf, index, size, [*proof, OTHER], root), where
            assert not verify_inclusion(leaf, index, size, [*proof, root], root), where
            assert not verify_inclusion(leaf, index, size, [OTHER, *proof], root), where
            if proof:
                assert not verify_inclusion(leaf, index, size, proof[:-1], root), where
            for i in range(len(proof)):
                assert not verify_inclusion(leaf, index, size, flipped(proof, i), root), where


@pytest.mark.parametrize(
    ("index", "size"), [(0, 0), (1, 1), (-1, 4), (4, 4), (5, 4)], ids=lambda v: str(v)
)
def test_inclusion_outside_the_tree_fails(index: int, size: int) -> None:
    assert not verify_inclusion(LEAVES[0], index, size, [], REF_ROOTS[1])


def test_inclusion_with_malformed_hashes_fails() -> None:
    proof = inclusion_proof(LEAVES, 0, 2)
    assert not verify_inclusion(LEAVES[0][:31], 0, 2, proof, REF_ROOTS[2])
    assert not verify_inclusion(LEAVES[0], 0, 2, proof, REF_ROOTS[2] + b"\x00")
    assert not verify_inclusion(LEAVES[0], 0, 2, [proof[0][:16]], REF_ROOTS[2])
    assert not verify_inclusion(LEAVES[0], 0, 1, [], b"")


def test_every_consistency_proof_verifies_and_tampering_fails() -> None:
    for new in range(1, MAX_SIZE):
        new_root = REF_ROOTS[new]
        for old in range(1, new + 1):
            old_root = REF_ROOTS[old]
            proof = consistency_proof(LEAVES, old, new)
            where = (old, new)
            assert verify_consistency(old, new, old_root, new_root, proof), where
            for i in range(len(proof)):
                bad = flipped(proof, i)
                assert not verify_consistency(old, new, old_root, new_root, bad), (where, i)
            assert not verify_consistency(old, new, OTHER, new_root, proof), where
            assert not verify_consistency(old, new, old_root, OTHER, proof), where
            assert not verify_consistency(old, new, old_root, new_root, [*proof, OTHER]), where
            if proof:
                assert not verify_consistency(old, new, old_root, new_root, proof[:-1]), where
                assert not verify_consistency(old, new, new_root, old_root, proof), where
            if old < new:
                assert not verify_consistency(old + 1, new, old_root, new_root, proof), where
                assert not verify_consistency(old - 1, new, old_root, new_root, proof), where


def test_consistency_from_the_empty_tree() -> None:
    assert consistency_proof(LEAVES, 0, 5) == []
    assert verify_consistency(0, 5, EMPTY_ROOT, REF_ROOTS[5], [])
    assert verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    assert not verify_consistency(0, 5, OTHER, REF_ROOTS[5], [])
    assert not verify_consistency(0, 5, EMPTY_ROOT, REF_ROOTS[5], [OTHER])


def test_consistency_never_goes_back_in_time() -> None:
    proof = consistency_proof(LEAVES, 3, 5)
    assert not verify_consistency(5, 3, REF_ROOTS[5], REF_ROOTS[3], proof)
    assert not verify_consistency(-1, 3, REF_ROOTS[1], REF_ROOTS[3], [])


def test_same_size_needs_equal_roots_and_no_proof() -> None:
    assert verify_consistency(4, 4, REF_ROOTS[4], REF_ROOTS[4], [])
    assert not verify_consistency(4, 4, REF_ROOTS[4], REF_ROOTS[3], [])
    assert not verify_consistency(4, 4, REF_ROOTS[4], REF_ROOTS[4], [REF_ROOTS[4]])


@pytest.mark.parametrize(("index", "size"), [(0, 0), (3, 3), (-1, 2), (0, MAX_SIZE + 1)])
def test_inclusion_proof_refuses_leaves_it_does_not_have(index: int, size: int) -> None:
    with pytest.raises(UsageError, match="no inclusion proof"):
        inclusion_proof(LEAVES, index, size)


@pytest.mark.parametrize(("old", "new"), [(4, 3), (-1, 3), (1, MAX_SIZE + 1)])
def test_consistency_proof_refuses_sizes_it_cannot_prove(old: int, new: int) -> None:
    with pytest.raises(UsageError, match="no consistency proof"):
        consistency_proof(LEAVES, old, new)


def test_merkle_tree_cache_agrees_with_the_reference_functions() -> None:
    import hashlib

    from jouled.ledger.merkle import (
        MerkleTree,
        consistency_proof,
        inclusion_proof,
        leaf_hash,
        root_from_leaves,
    )

    leaves = [leaf_hash(hashlib.sha256(str(i).encode()).digest()) for i in range(140)]
    tree = MerkleTree()
    for leaf in leaves:
        tree.append(leaf)
    for size in range(1, 141):
        assert tree.root(size) == root_from_leaves(leaves[:size])
        for index in (0, size // 3, size - 1):
            assert tree.inclusion_proof(index, size) == inclusion_proof(leaves, index, size)
        for old in (1, size // 2, size - 1):
            if old:
                assert tree.consistency_proof(old, size) == consistency_proof(leaves, old, size)
    tree.truncate(70)
    assert tree.size == 70 and tree.root() == root_from_leaves(leaves[:70])
    for leaf in leaves[70:]:
        tree.append(leaf)
    assert tree.root() == root_from_leaves(leaves)
    assert tree.inclusion_proof(100, 140) == inclusion_proof(leaves, 100, 140)


def test_extending_in_bulk_builds_the_tree_appending_builds() -> None:
    import hashlib
    import random

    from jouled.ledger.merkle import MerkleTree, leaf_hash

    leaves = [leaf_hash(hashlib.sha256(str(i).encode()).digest()) for i in range(300)]
    one_by_one = MerkleTree()
    for leaf in leaves:
        one_by_one.append(leaf)
    rng = random.Random(7)
    for _ in range(40):
        bulk, done = MerkleTree(), 0
        while done < len(leaves):
            step = rng.choice([0, 1, 2, 3, 15, 16, 17, 33, 64, 100])
            if rng.random() < 0.3:
                for leaf in leaves[done : done + step]:
                    bulk.append(leaf)
            else:
                bulk.extend(leaves[done : done + step])
            done = min(len(leaves), done + step)
            assert bulk.size == done
            assert bulk.root() == one_by_one.root(done)
        assert bulk._levels == one_by_one._levels
        for size in (1, 2, 17, 128, 129, 300):
            assert bulk.root(size) == one_by_one.root(size)
            last = size - 1
            assert bulk.inclusion_proof(last, size) == one_by_one.inclusion_proof(last, size)
            assert bulk.consistency_proof(1, size) == one_by_one.consistency_proof(1, size)


def test_extend_refuses_what_is_not_a_leaf_hash() -> None:
    from jouled.errors import UsageError
    from jouled.ledger.merkle import MerkleTree

    tree = MerkleTree()
    with pytest.raises(UsageError, match="leaf hash"):
        tree.extend([b"\x00" * 32, b"payload"])
    assert tree.size == 0
