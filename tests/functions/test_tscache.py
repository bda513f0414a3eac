"""The transpile cache stays bounded however many distinct bodies arrive, and drops the least
recently used first (real files on disk)."""

import os
from pathlib import Path

from actors.functions.tscache import MEMORY_ENTRIES, DiskCache, MemoryCache


def body(n: int) -> str:
    return f"(async function(event) {{ return {n}; }})\n" + "// pad\n" * (n % 50)


def test_a_thousand_distinct_bodies_leave_the_memory_cache_within_its_bounds() -> None:
    cache = MemoryCache()
    for n in range(1000):
        cache.put(f"k{n}", body(n))
        assert len(cache) <= MEMORY_ENTRIES
    assert len(cache) == MEMORY_ENTRIES
    assert cache.get("k0") is None and cache.get("k999") == body(999)
    assert cache.bytes == sum(len(body(n)) for n in range(1000 - MEMORY_ENTRIES, 1000))

    by_bytes = MemoryCache(max_entries=10_000, max_bytes=20_000)
    for n in range(1000):
        by_bytes.put(f"k{n}", body(n))
        assert by_bytes.bytes <= 20_000
    assert 0 < len(by_bytes) < 1000


def test_the_least_recently_used_goes_first() -> None:
    cache = MemoryCache(max_entries=3, max_bytes=1 << 20)
    for key in "abc":
        cache.put(key, key)
    assert cache.get("a") == "a"  # a is now the most recent
    cache.put("d", "d")
    assert [cache.get(k) for k in "abcd"] == ["a", None, "c", "d"]
    cache.put("huge", "x" * (2 << 20))  # larger than the whole cache: not kept
    assert cache.get("huge") is None and len(cache) == 3


def files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.js"))


def test_a_thousand_distinct_bodies_leave_the_disk_cache_within_its_bounds(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_entries=100, max_bytes=40_000)
    for n in range(1000):
        cache.put(f"{n:064x}", body(n))
    on_disk = files(tmp_path)
    assert len(on_disk) == len(cache) <= 100
    assert sum(p.stat().st_size for p in on_disk) == cache.bytes <= 40_000
    assert not list(tmp_path.rglob("*.tmp"))
    assert cache.get(f"{999:064x}") == body(999) and cache.get(f"{0:064x}") is None


def test_the_disk_cache_keeps_its_order_across_a_restart(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, max_entries=3, max_bytes=1 << 20)
    for n in range(3):
        cache.put(f"{n:064x}", body(n))
        path = tmp_path / f"{n:064x}"[:2] / f"{n:064x}.js"
        os.utime(path, (1000 + n, 1000 + n))  # oldest first, whatever the clock's grain
    assert cache.get(f"{0:064x}") == body(0)  # used: now the most recent (mtime now)
    again = DiskCache(tmp_path, max_entries=3, max_bytes=1 << 20)  # a restart
    again.put(f"{3:064x}", body(3))
    assert again.get(f"{1:064x}") is None  # the least recently used went
    assert [again.get(f"{n:064x}") for n in (0, 2, 3)] == [body(0), body(2), body(3)]
    assert len(files(tmp_path)) == 3

    smaller = DiskCache(tmp_path, max_entries=1, max_bytes=1 << 20)  # bounds lowered
    assert len(smaller) == 1 and len(files(tmp_path)) == 1
