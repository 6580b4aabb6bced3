"""Permutations of ``range(n)`` in one-line notation.

>>> p = Permutation.from_cycles(4, [(0, 1, 2)])
>>> p
Permutation([1, 2, 0, 3])
>>> p.cycles()
[(0, 1, 2)]
"""

from permutation.perm import Permutation, compose

__all__ = ["Permutation", "compose"]
