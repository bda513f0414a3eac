"""What keeps the service's idle memory down (ops/bench/footprint.py measures it): after
start-up cairn hands the heap it freed back to the system."""

from __future__ import annotations

import gc
from pathlib import Path

from gateway.main import trim_heap


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_freed_heap_goes_back_to_the_system() -> None:
    # ~150 MB of small objects (malloc's heap, not mmap), one in a hundred kept: the heap's
    # top stays in use, so free() alone returns nothing, as after the model's build and check.
    blocks = [bytearray(1500) for _ in range(100_000)]
    kept = blocks[::100]
    del blocks
    gc.collect()
    before = rss_mb()
    trim_heap()
    after = rss_mb()
    assert before - after > 50, (before, after)
    assert len(kept) == 1000
