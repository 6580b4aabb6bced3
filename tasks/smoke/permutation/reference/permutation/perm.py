"""The :class:`Permutation` type."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import reduce
from math import lcm


class Permutation:
    """A bijection of ``range(n)`` onto itself.

    A permutation is stored in one-line notation: ``Permutation([2, 0, 1])``
    sends 0 to 2, 1 to 0 and 2 to 1. Calling it applies the map, so
    ``p(0) == 2``.

    Products follow the convention of function composition: ``p * q`` is the
    permutation that applies ``q`` first and then ``p``, that is
    ``(p * q)(i) == p(q(i))`` for every ``i``. Both factors must have the same
    degree.
    """

    __slots__ = ("_images",)

    def __init__(self, images: Iterable[int]) -> None:
        images = tuple(images)
        if sorted(images) != list(range(len(images))):
            raise ValueError(f"not a permutation of range({len(images)}): {list(images)}")
        self._images = images

    @classmethod
    def identity(cls, n: int) -> Permutation:
        """The identity permutation of degree ``n``."""
        return cls(range(n))

    @classmethod
    def from_cycles(cls, n: int, cycles: Iterable[Sequence[int]]) -> Permutation:
        """Build a permutation of degree ``n`` from disjoint cycles.

        ``from_cycles(4, [(0, 2), (1, 3)])`` swaps 0 with 2 and 1 with 3.
        Points that appear in no cycle are fixed.
        """
        images = list(range(n))
        seen: set[int] = set()
        for cycle in cycles:
            for point in cycle:
                if not 0 <= point < n:
                    raise ValueError(f"point {point} out of range for degree {n}")
                if point in seen:
                    raise ValueError(f"point {point} appears in more than one cycle")
                seen.add(point)
            for i, point in enumerate(cycle):
                images[point] = cycle[(i + 1) % len(cycle)]
        return cls(images)

    @property
    def degree(self) -> int:
        return len(self._images)

    def __call__(self, i: int) -> int:
        return self._images[i]

    def __len__(self) -> int:
        return len(self._images)

    def __iter__(self):
        return iter(self._images)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Permutation):
            return NotImplemented
        return self._images == other._images

    def __hash__(self) -> int:
        return hash(self._images)

    def __repr__(self) -> str:
        return f"Permutation({list(self._images)})"

    def __mul__(self, other: Permutation) -> Permutation:
        if not isinstance(other, Permutation):
            return NotImplemented
        if other.degree != self.degree:
            raise ValueError(f"degrees differ: {self.degree} and {other.degree}")
        return Permutation(self._images[j] for j in other._images)

    def __pow__(self, k: int) -> Permutation:
        if k < 0:
            return self.inverse() ** -k
        result = Permutation.identity(self.degree)
        base = self
        while k:
            if k & 1:
                result = result * base
            base = base * base
            k >>= 1
        return result

    def inverse(self) -> Permutation:
        """The permutation that undoes this one."""
        inv = [0] * self.degree
        for i, j in enumerate(self._images):
            inv[j] = i
        return Permutation(inv)

    def conjugate(self, by: Permutation) -> Permutation:
        """Return ``by * self * by.inverse()``, this permutation relabelled by ``by``."""
        return by * self * by.inverse()

    def cycles(self, *, include_fixed: bool = False) -> list[tuple[int, ...]]:
        """Disjoint cycle decomposition, each cycle starting at its smallest point."""
        seen = [False] * self.degree
        out = []
        for start in range(self.degree):
            if seen[start]:
                continue
            cycle = []
            i = start
            while not seen[i]:
                seen[i] = True
                cycle.append(i)
                i = self._images[i]
            if len(cycle) > 1 or include_fixed:
                out.append(tuple(cycle))
        return out

    def cycle_type(self) -> tuple[int, ...]:
        """The lengths of all cycles, fixed points included, largest first."""
        return tuple(sorted((len(c) for c in self.cycles(include_fixed=True)), reverse=True))

    def order(self) -> int:
        """The smallest ``k >= 1`` with ``self ** k`` equal to the identity."""
        return reduce(lcm, self.cycle_type(), 1)

    def sign(self) -> int:
        """+1 for an even permutation, -1 for an odd one."""
        transpositions = sum(len(c) - 1 for c in self.cycles())
        return -1 if transpositions % 2 else 1


def compose(*perms: Permutation) -> Permutation:
    """The product of ``perms``, rightmost applied first.

    ``compose(p, q, r)(i) == p(q(r(i)))``. At least one permutation is
    required.
    """
    if not perms:
        raise ValueError("compose() needs at least one permutation")
    return reduce(lambda acc, p: acc * p, perms)
