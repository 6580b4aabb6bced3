"""A bounded least-recently-used cache and a memoizing decorator built on it.

>>> cache = LRUCache(2)
>>> cache.put("a", 1)
>>> cache.put("b", 2)
>>> cache.get("a")
1
>>> cache.put("c", 3)   # "b" is now the least recently used entry
>>> list(cache.keys())
['c', 'a']
"""

from lrucache.cache import LRUCache, memoize

__all__ = ["LRUCache", "memoize"]
