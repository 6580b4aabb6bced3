import pytest
from lrucache import LRUCache, memoize


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        LRUCache(0)


def test_evicts_oldest_insertion_when_unused():
    evicted = []
    cache = LRUCache(2, on_evict=lambda k, v: evicted.append((k, v)))
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert "a" not in cache
    assert list(cache.keys()) == ["c", "b"]
    assert evicted == [("a", 1)]
    assert len(cache) == 2


def test_put_existing_key_updates_value_and_recency():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert cache.peek("a") == 10
    assert "b" not in cache


def test_get_marks_entry_as_recently_used():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert "a" in cache
    assert "b" not in cache
    assert list(cache.keys()) == ["c", "a"]


def test_keys_follow_reads():
    cache = LRUCache(4)
    for key in "wxyz":
        cache.put(key, key.upper())
    cache.get("x")
    cache.get("w")
    assert list(cache) == ["w", "x", "z", "y"]


def test_peek_and_contains_do_not_change_recency():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1
    assert "a" in cache
    cache.put("c", 3)
    assert "a" not in cache
    assert cache.peek("missing", "dflt") == "dflt"


def test_hit_and_miss_counters():
    cache = LRUCache(1)
    cache.put("k", "v")
    assert cache.get("k") == "v"
    assert cache.get("nope") is None
    assert cache.get("nope", 0) == 0
    assert (cache.hits, cache.misses) == (1, 2)


def test_pop_and_clear():
    cache = LRUCache(3)
    cache.put(1, "one")
    cache.put(2, "two")
    assert cache.pop(1) == "one"
    assert cache.pop(1, None) is None
    with pytest.raises(KeyError):
        cache.pop(1)
    cache.clear()
    assert len(cache) == 0
    assert list(cache.keys()) == []
    cache.put(3, "three")
    assert repr(cache) == "LRUCache(3, {3: 'three'})"


def test_memoize_keeps_hot_arguments():
    calls = []

    @memoize(maxsize=2)
    def square(n):
        calls.append(n)
        return n * n

    assert [square(2), square(3), square(2), square(4), square(2)] == [4, 9, 4, 16, 4]
    assert calls == [2, 3, 4]
    assert square.cache.hits == 2


def test_memoize_caches_falsy_results():
    calls = []

    @memoize(maxsize=4)
    def nothing(x):
        calls.append(x)
        return None

    nothing(1)
    nothing(1)
    assert calls == [1]
