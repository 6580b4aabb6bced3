"""LRU cache on a hash map plus a circular doubly linked list."""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator
from typing import Any

_MISSING = object()


class _Node:
    __slots__ = ("key", "next", "prev", "value")

    def __init__(self, key: Any = None, value: Any = None) -> None:
        self.key = key
        self.value = value
        self.prev: _Node = self
        self.next: _Node = self


class LRUCache:
    """A mapping of at most ``capacity`` entries that evicts the least recently used one.

    An entry counts as *used* when it is stored with :meth:`put` or read with
    :meth:`get`. :meth:`peek`, ``in`` and iteration look at entries without
    using them. All operations are O(1) except iteration.
    """

    def __init__(self, capacity: int, on_evict: Callable[[Any, Any], None] | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.on_evict = on_evict
        self.hits = 0
        self.misses = 0
        self._map: dict[Hashable, _Node] = {}
        # _root.next is the most recently used entry, _root.prev the least.
        self._root = _Node()

    def _unlink(self, node: _Node) -> None:
        node.prev.next = node.next
        node.next.prev = node.prev

    def _push_front(self, node: _Node) -> None:
        root = self._root
        node.prev = root
        node.next = root.next
        root.next.prev = node
        root.next = node

    def get(self, key: Hashable, default: Any = None) -> Any:
        """Return the value for ``key`` and mark it most recently used, or ``default``."""
        node = self._map.get(key)
        if node is None:
            self.misses += 1
            return default
        self.hits += 1
        self._unlink(node)
        self._push_front(node)
        return node.value

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """Return the value for ``key`` without changing its recency."""
        node = self._map.get(key)
        return default if node is None else node.value

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` under ``key`` as the most recently used entry, evicting if full."""
        node = self._map.get(key)
        if node is not None:
            node.value = value
            self._unlink(node)
            self._push_front(node)
            return
        if len(self._map) >= self.capacity:
            oldest = self._root.prev
            self._unlink(oldest)
            del self._map[oldest.key]
            if self.on_evict is not None:
                self.on_evict(oldest.key, oldest.value)
        node = _Node(key, value)
        self._map[key] = node
        self._push_front(node)

    def pop(self, key: Hashable, default: Any = _MISSING) -> Any:
        """Remove ``key`` and return its value; raise ``KeyError`` if absent and no default."""
        node = self._map.pop(key, None)
        if node is None:
            if default is _MISSING:
                raise KeyError(key)
            return default
        self._unlink(node)
        return node.value

    def clear(self) -> None:
        self._map.clear()
        self._root.prev = self._root.next = self._root

    def keys(self) -> Iterator[Hashable]:
        """Keys from most to least recently used."""
        node = self._root.next
        while node is not self._root:
            yield node.key
            node = node.next

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[Hashable]:
        return self.keys()

    def __repr__(self) -> str:
        items = ", ".join(f"{k!r}: {self._map[k].value!r}" for k in self.keys())
        return f"LRUCache({self.capacity}, {{{items}}})"


def memoize(maxsize: int = 128) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Cache a function's results by its positional arguments in an :class:`LRUCache`.

    The wrapper exposes the cache as ``wrapper.cache``.
    """

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        cache = LRUCache(maxsize)

        @functools.wraps(func)
        def wrapper(*args: Hashable) -> Any:
            result = cache.get(args, _MISSING)
            if result is _MISSING:
                result = func(*args)
                cache.put(args, result)
            return result

        wrapper.cache = cache  # type: ignore[attr-defined]
        return wrapper

    return decorator
