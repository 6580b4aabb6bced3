"""RFC 9162 Merkle trees over the ledger's leaf hashes.

The ledger is an append-only log, so the tree is the one RFC 9162 §2.1 defines:
leaf hashes are SHA-256(0x00 || data), interior nodes SHA-256(0x01 || l || r),
and a tree of n > 1 leaves splits at the largest power of two below n. The
domain-separation prefixes stop a leaf from being passed off as a node.

Everything here takes leaf *hashes*, never entry payloads: the store hashes a
payload once, when it appends it, and keeps the hash next to it.

Proof verification follows the RFC's algorithms step by step and answers with a
bool, never an exception: a verifier has to treat malformed input and a failed
proof alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from jouled.errors import UsageError

HASH_SIZE = 32
_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"

# MTH({}) is the hash of the empty string (RFC 9162 §2.1.1).
EMPTY_ROOT: bytes = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(_LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below n (n >= 2): where the RFC splits."""
    return 1 << ((n - 1).bit_length() - 1)


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _check_leaves(leaves: Sequence[bytes]) -> None:
    # Handing payloads in place of leaf hashes would still produce a root,
    # just one no verifier can reproduce; refuse it here instead.
    for i, leaf in enumerate(leaves):
        if not _is_hash(leaf):
            raise UsageError(f"leaf {i} is not a {HASH_SIZE}-byte leaf hash")


def _root(level: list[bytes]) -> bytes:
    """MTH of a non-empty list of leaf hashes, one level at a time.

    Pairing neighbours and carrying an odd last node up unchanged builds the
    same tree as the RFC's recursive split (the left part of every split is a
    perfect subtree with an even number of leaves), without recursion and
    with one list comprehension per level, which keeps a million leaves fast.
    """
    sha256 = hashlib.sha256
    prefix = _NODE_PREFIX
    while len(level) > 1:
        carry = level[-1] if len(level) % 2 else None
        # strict=False: an odd level's last node has no partner and is carried.
        pairs = zip(level[0::2], level[1::2], strict=False)
        level = [sha256(prefix + a + b).digest() for a, b in pairs]
        if carry is not None:
            level.append(carry)
    return level[0]


def root_from_leaves(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]) for the given leaf hashes, in O(n) time and O(n) memory."""
    _check_leaves(leaves)
    if not leaves:
        return EMPTY_ROOT
    return _root(list(leaves))


def _subtree(leaves: Sequence[bytes], start: int, end: int) -> bytes:
    return _root(list(leaves[start:end]))


def inclusion_proof(leaves: Sequence[bytes], index: int, size: int) -> list[bytes]:
    """PATH(index, D[size]) from RFC 9162 §2.1.3.1, over the first `size` leaves.

    Costs about `size` hashes; `MerkleTree` answers from cached subtrees.
    """
    if not 0 <= index < size <= len(leaves):
        raise UsageError(
            f"no inclusion proof for leaf {index} in a tree of size {size} "
            f"({len(leaves)} leaves known)"
        )
    _check_leaves(leaves[:size])
    return _inclusion_path(lambda a, b: _subtree(leaves, a, b), index, size)


SubtreeHash = Callable[[int, int], bytes]


def _inclusion_path(subtree: SubtreeHash, index: int, size: int) -> list[bytes]:
    # Walk down from the root; each step records the sibling of the subtree
    # that holds the leaf. The RFC lists siblings leaf-first, hence the reverse.
    path: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index - start < k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            start += k
    path.reverse()
    return path


def consistency_proof(leaves: Sequence[bytes], old_size: int, new_size: int) -> list[bytes]:
    """PROOF(old_size, D[new_size]) from RFC 9162 §2.1.4.1.

    Empty when old_size is 0 or equals new_size: there is nothing to prove.
    """
    if not 0 <= old_size <= new_size <= len(leaves):
        raise UsageError(
            f"no consistency proof from size {old_size} to size {new_size} "
            f"({len(leaves)} leaves known)"
        )
    _check_leaves(leaves[:new_size])
    return _consistency_path(lambda a, b: _subtree(leaves, a, b), old_size, new_size)


def _consistency_path(subtree: SubtreeHash, old_size: int, new_size: int) -> list[bytes]:
    if old_size in (0, new_size):
        return []
    # SUBPROOF(m, D[start:end], whole) unrolled: `whole` stays true while the
    # old tree is the left edge of the current subtree, in which case the
    # verifier already knows its hash and it is left out.
    path: list[bytes] = []
    start, end, whole = 0, new_size, True
    while True:
        n, m = end - start, old_size - start
        if m == n:
            if not whole:
                path.append(subtree(start, end))
            break
        k = _split(n)
        if m <= k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            start += k
            whole = False
    path.reverse()
    return path


def _shift_while_even(fn: int, sn: int) -> tuple[int, int]:
    while fn and not fn & 1:
        fn >>= 1
        sn >>= 1
    return fn, sn


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """Whether `leaf` (a leaf hash) is at `index` in the tree of `size` with `root`.

    RFC 9162 §2.1.3.2.
    """
    if not 0 <= index < size:
        return False
    if not (_is_hash(leaf) and _is_hash(root) and all(_is_hash(p) for p in proof)):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            fn, sn = _shift_while_even(fn, sn)
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Whether the tree (new_size, new_root) extends the tree (old_size, old_root).

    RFC 9162 §2.1.4.2 for 0 < old_size < new_size. The RFC leaves the edges
    to the caller: a tree is consistent with itself (empty proof, equal
    roots), and the empty tree with every tree (empty proof, old root
    MTH({})); the new root is then unchecked, as nothing links it to the old.
    """
    if not 0 <= old_size <= new_size:
        return False
    if not (_is_hash(old_root) and _is_hash(new_root) and all(_is_hash(p) for p in proof)):
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof and old_root == EMPTY_ROOT
    if not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        # The old tree is a perfect left subtree of the new one, so its root is
        # a node of the new tree and the proof does not repeat it.
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            fn, sn = _shift_while_even(fn, sn)
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


class MerkleAccumulator:
    """The right edge of a growing tree: the roots of its perfect subtrees.

    A tree of n leaves decomposes into one perfect subtree per set bit of n,
    largest first; those `peaks` are all an append needs, so appending and
    reading the root both take O(log n) hashes and memory.
    """

    def __init__(self) -> None:
        self._size = 0
        self._peaks: list[bytes] = []

    @classmethod
    def from_leaves(cls, leaves: Sequence[bytes]) -> MerkleAccumulator:
        acc = cls()
        for leaf in leaves:
            acc.append(leaf)
        return acc

    @classmethod
    def from_peaks(cls, size: int, peaks: Sequence[bytes]) -> MerkleAccumulator:
        """Restore a saved right edge (`size`, `peaks`) without replaying the leaves."""
        if size < 0 or len(peaks) != size.bit_count():
            raise UsageError(
                f"a tree of size {size} has {max(size, 0).bit_count()} peaks, not {len(peaks)}"
            )
        if not all(_is_hash(p) for p in peaks):
            raise UsageError(f"every peak must be a {HASH_SIZE}-byte hash")
        acc = cls()
        acc._size = size
        acc._peaks = list(peaks)
        return acc

    @property
    def size(self) -> int:
        return self._size

    @property
    def peaks(self) -> tuple[bytes, ...]:
        """Perfect-subtree roots, left to right; save them with `size`."""
        return tuple(self._peaks)

    def append(self, leaf: bytes) -> None:
        if not _is_hash(leaf):
            raise UsageError(f"a leaf must be a {HASH_SIZE}-byte leaf hash")
        # Each trailing one bit of the old size is a peak of the same height
        # as the node being carried; merge until the carry finds an empty slot.
        node, n = leaf, self._size
        while n & 1:
            node = node_hash(self._peaks.pop(), node)
            n >>= 1
        self._peaks.append(node)
        self._size += 1

    def root(self) -> bytes:
        if not self._peaks:
            return EMPTY_ROOT
        node = self._peaks[-1]
        for peak in reversed(self._peaks[:-1]):
            node = node_hash(peak, node)
        return node


# Perfect subtrees of at least 2**CACHE_FROM leaves are kept; smaller ones are
# rehashed from the leaves on demand (at most 2**CACHE_FROM - 1 hashes).
CACHE_FROM = 4


class MerkleTree:
    """An append-only tree that keeps its leaves and its larger perfect subtrees.

    Roots and proofs for any size cost O(log n) cached lookups plus a few
    small rehashes, instead of rehashing every leaf; the cache holds about
    n / 2**CACHE_FROM extra hashes.
    """

    def __init__(self) -> None:
        self.leaves: list[bytes] = []
        # levels[k][i]: root of the perfect subtree of 2**k leaves starting at i * 2**k
        self._levels: dict[int, list[bytes]] = {}
        self._acc = MerkleAccumulator()

    @property
    def size(self) -> int:
        return len(self.leaves)

    def append(self, leaf: bytes) -> None:
        if not _is_hash(leaf):
            raise UsageError(f"a leaf must be a {HASH_SIZE}-byte leaf hash")
        self.leaves.append(leaf)
        self._acc.append(leaf)
        # The subtrees this leaf completes are the accumulator's merged peaks.
        n, k = len(self.leaves), 0
        while n % 2 == 0:
            n //= 2
            k += 1
            if k >= CACHE_FROM:
                self._levels.setdefault(k, []).append(self._perfect_from_below(k, n - 1))

    def extend(self, leaves: Sequence[bytes]) -> None:
        """Append many leaves: the same tree as appending each in turn, built a level at a time.

        Each level's new nodes are hashed in one list comprehension from the
        level below, as `_root` does, so a million leaves cost about a
        million hashes and no per-leaf Python calls beyond them.
        """
        leaves = list(leaves)
        # Checked with C-level maps: a Python call per leaf would cost as much as its hash.
        if set(map(type, leaves)) - {bytes} or set(map(len, leaves)) - {HASH_SIZE}:
            raise UsageError(f"a leaf must be a {HASH_SIZE}-byte leaf hash")
        if not leaves:
            return
        old = len(self.leaves)
        self.leaves.extend(leaves)
        new = len(self.leaves)
        sha256, prefix = hashlib.sha256, _NODE_PREFIX
        # below[i - offset] is node (k - 1, i); it holds every node completed this call.
        below: list[bytes] = self.leaves
        offset = 0
        k = 1
        while True:
            first, count = old >> k, new >> k  # nodes of level k before and after
            if count == first:
                break  # no new node here, so none above either
            lo = 2 * first  # the left child of the first new node
            children = below[lo - offset : 2 * count - offset] if lo >= offset else []
            if lo < offset:
                # The left child completed before this call: the level below's last old node.
                children = [self._perfect(k - 1, lo << (k - 1)), *below[: 2 * count - offset]]
            level = [
                sha256(prefix + a + b).digest()
                for a, b in zip(children[0::2], children[1::2], strict=True)
            ]
            if k >= CACHE_FROM:
                self._levels.setdefault(k, []).extend(level)
            below, offset = level, first
            k += 1
        # The right edge: one perfect subtree per set bit of the size, largest first.
        peaks: list[bytes] = []
        start = 0
        for bit in range(new.bit_length() - 1, -1, -1):
            if new >> bit & 1:
                peaks.append(self._perfect(bit, start))
                start += 1 << bit
        self._acc = MerkleAccumulator.from_peaks(new, peaks)

    def _perfect_from_below(self, k: int, i: int) -> bytes:
        half = 1 << (k - 1)
        start = i << k
        return node_hash(self._perfect(k - 1, start), self._perfect(k - 1, start + half))

    def _perfect(self, k: int, start: int) -> bytes:
        if k == 0:
            return self.leaves[start]
        if k >= CACHE_FROM:
            return self._levels[k][start >> k]
        return _root(self.leaves[start : start + (1 << k)])

    def subtree(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) for a range the RFC's splitting produces."""
        n = end - start
        if n == 1:
            return self.leaves[start]
        if n & (n - 1) == 0 and start % n == 0:
            return self._perfect(n.bit_length() - 1, start)
        k = _split(n)
        return node_hash(self.subtree(start, start + k), self.subtree(start + k, end))

    def root(self, size: int | None = None) -> bytes:
        size = self.size if size is None else size
        if size == self.size:
            return self._acc.root()
        if not 0 <= size <= self.size:
            raise UsageError(f"no tree of size {size}: {self.size} leaves known")
        return EMPTY_ROOT if size == 0 else self.subtree(0, size)

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        if not 0 <= index < size <= self.size:
            raise UsageError(
                f"no inclusion proof for leaf {index} in a tree of size {size} "
                f"({self.size} leaves known)"
            )
        return _inclusion_path(self.subtree, index, size)

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]:
        if not 0 <= old_size <= new_size <= self.size:
            raise UsageError(
                f"no consistency proof from size {old_size} to size {new_size} "
                f"({self.size} leaves known)"
            )
        return _consistency_path(self.subtree, old_size, new_size)

    def truncate(self, size: int) -> None:
        """Drop leaves past `size` (an append whose commit failed)."""
        if size >= self.size:
            return
        del self.leaves[size:]
        for k, level in self._levels.items():
            del level[size >> k :]
        self._acc = MerkleAccumulator.from_leaves(self.leaves) if size else MerkleAccumulator()
