"""Sliding windows and fixed-size chunks over sequences.

>>> list(windows("abcd", 2))
[('a', 'b'), ('b', 'c'), ('c', 'd')]
"""

from slidingwindow.windows import chunked, moving_average, windows

__all__ = ["chunked", "moving_average", "windows"]
