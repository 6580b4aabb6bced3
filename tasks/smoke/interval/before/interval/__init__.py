"""Half-open intervals ``[start, end)`` over any ordered type.

>>> Interval(9, 12).overlaps(Interval(11, 13))
True
>>> Interval(9, 12).intersection(Interval(11, 13))
Interval(11, 12)
"""

from interval.core import Interval, merge

__all__ = ["Interval", "merge"]
