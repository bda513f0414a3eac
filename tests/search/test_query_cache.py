"""The persistent query-embedding cache: bounded, least recently used evicted, across restarts."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from actors.search.embed.query_cache import QueryCache

FP = "provider-a"


def vec(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(512).astype(np.float32)


def held(cache: QueryCache, names: list[str]) -> list[str]:
    return [n for n in names if cache.get(FP, n) is not None]


def test_size_bound_holds_on_every_put(tmp_path: Path) -> None:
    cache = QueryCache(tmp_path / "cache.sqlite", max_entries=3)
    for i in range(20):
        cache.put(FP, f"q{i}", vec(i))
        assert len(cache) == min(i + 1, 3)
    cache.close()
    reopened = QueryCache(tmp_path / "cache.sqlite", max_entries=3)
    assert len(reopened) == 3
    assert held(reopened, [f"q{i}" for i in range(20)]) == ["q17", "q18", "q19"]
    reopened.close()


def test_reads_count_as_use_also_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = QueryCache(path, max_entries=3)
    for name in ("a", "b", "c"):
        cache.put(FP, name, vec(ord(name)))
    assert cache.get(FP, "a") is not None  # `a` is now the most recently used
    cache.put(FP, "d", vec(4))  # evicts `b`, the least recently used
    assert held(cache, ["a", "b", "c", "d"]) == ["a", "c", "d"]
    cache.close()

    reopened = QueryCache(path, max_entries=3)
    assert held(reopened, ["a", "b", "c", "d"]) == ["a", "c", "d"]
    np.testing.assert_array_equal(reopened.get(FP, "a"), vec(ord("a")))
    reopened.close()


def test_a_smaller_bound_at_restart_trims_on_the_next_put(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = QueryCache(path, max_entries=10)
    for i in range(10):
        cache.put(FP, f"q{i}", vec(i))
    cache.close()
    smaller = QueryCache(path, max_entries=4)
    smaller.put(FP, "new", vec(99))
    assert len(smaller) == 4
    assert held(smaller, ["q7", "q8", "q9", "new"]) == ["q7", "q8", "q9", "new"]
    smaller.close()


def test_vectors_of_another_provider_are_never_returned(tmp_path: Path) -> None:
    cache = QueryCache(tmp_path / "cache.sqlite", max_entries=10)
    cache.put(FP, "cat", vec(1))
    assert cache.get("provider-b", "cat") is None
    np.testing.assert_array_equal(cache.get(FP, "cat"), vec(1))
    cache.close()


def test_a_query_put_again_is_replaced_not_counted_twice(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cache = QueryCache(path, max_entries=3)
    for name in ("a", "b", "a", "c", "a", "d"):
        cache.put(FP, name, vec(ord(name)))
    # `a` was put three times and is the second most recent: `b`, the oldest, went.
    assert len(cache) == 3
    assert held(cache, ["a", "b", "c", "d"]) == ["a", "c", "d"]
    cache.close()
    reopened = QueryCache(path, max_entries=3)  # counts the table itself
    assert len(reopened) == 3
    reopened.close()
