"""The usearch file is a cache of the vectors in SQLite: loaded when it matches, rebuilt when
it is missing, corrupt, from another vector space, or holds other chunks."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from actors.search.embed.embedding import DIMENSIONS
from actors.search.index.vectors import CUTOFF, SETTLE_SECONDS, SearchesFirst, VectorIndex


def unit_vectors(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, DIMENSIONS)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    path = tmp_path / "vectors.usearch"
    keys = np.arange(1, 21, dtype=np.uint64)
    vectors = unit_vectors(20)
    index = VectorIndex(path)
    assert index.load_or_rebuild("fp-1", keys, vectors) is True  # nothing saved yet
    return path, keys, vectors


def test_a_matching_file_is_loaded_not_rebuilt(saved: tuple[Path, np.ndarray, np.ndarray]) -> None:
    path, keys, vectors = saved
    again = VectorIndex(path)
    assert again.load_or_rebuild("fp-1", keys, vectors) is False
    assert [k for k, _ in again.search(vectors[3], 1)] == [4]


def test_another_vector_space_is_rebuilt(saved: tuple[Path, np.ndarray, np.ndarray]) -> None:
    path, keys, vectors = saved
    assert VectorIndex(path).load_or_rebuild("fp-2", keys, vectors) is True


def test_a_missing_or_corrupt_file_is_rebuilt(saved: tuple[Path, np.ndarray, np.ndarray]) -> None:
    path, keys, vectors = saved
    path.write_bytes(b"\x00garbage" * 10)
    assert VectorIndex(path).load_or_rebuild("fp-1", keys, vectors) is True
    path.unlink()
    rebuilt = VectorIndex(path)
    assert rebuilt.load_or_rebuild("fp-1", keys, vectors) is True
    assert [k for k, _ in rebuilt.search(vectors[7], 1)] == [8]


def test_same_count_but_other_chunks_is_stale(saved: tuple[Path, np.ndarray, np.ndarray]) -> None:
    path, keys, vectors = saved
    replaced = keys.copy()
    replaced[0] = 99  # chunk 1 replaced by chunk 99 while the file was not saved
    fresh = VectorIndex(path)
    assert fresh.load_or_rebuild("fp-1", replaced, vectors) is True
    assert [k for k, _ in fresh.search(vectors[0], 1)] == [99]


def test_scores_below_the_cut_off_are_dropped(tmp_path: Path) -> None:
    index = VectorIndex(tmp_path / "v.usearch")
    near = np.zeros(DIMENSIONS, dtype=np.float32)
    near[0] = 1.0
    far = np.zeros(DIMENSIONS, dtype=np.float32)
    far[1] = 1.0  # orthogonal: cosine 0
    index.load_or_rebuild("fp", np.array([1, 2], dtype=np.uint64), np.stack([near, far]))
    hits = index.search(near, 10)
    assert [k for k, _ in hits] == [1]
    assert all(score >= CUTOFF for _, score in hits)


def test_the_index_is_saved_once_its_changes_settle(tmp_path: Path) -> None:
    """Not while vectors keep arriving (a save holds the GIL and is stale at once), but
    `SETTLE_SECONDS` after the last change, and not again until something changes."""
    index = VectorIndex(tmp_path / "vectors.usearch")
    rng = np.random.default_rng(5)
    assert not index.settled()  # nothing to save
    index.add([1, 2], rng.standard_normal((2, DIMENSIONS)).astype(np.float32))
    now = time.monotonic()
    assert not index.settled(now)
    assert not index.settled(now + SETTLE_SECONDS - 1)
    assert index.settled(now + SETTLE_SECONDS + 0.01)
    index.save("space")
    assert not index.settled(now + 10 * SETTLE_SECONDS)
    index.remove([1])
    assert index.settled(time.monotonic() + SETTLE_SECONDS + 0.01)
    index.save("space")
    reloaded = VectorIndex(tmp_path / "vectors.usearch")
    rebuilt = reloaded.load_or_rebuild(
        "space", np.array([2], dtype=np.uint64), np.zeros((1, DIMENSIONS), np.float32)
    )
    assert not rebuilt and len(reloaded) == 1


def test_a_waiting_search_goes_before_a_waiting_change() -> None:
    """Adding vectors is a run of short changes: a search that waits gets the index as soon
    as the change in progress ends, not after the next ones."""
    lock = SearchesFirst()
    order: list[str] = []
    release = threading.Event()
    held = threading.Event()

    def first_change() -> None:
        with lock.change():
            held.set()
            release.wait(timeout=10)
            order.append("change 1")

    def search() -> None:
        with lock.search():
            order.append("search")

    def next_change() -> None:
        with lock.change():
            order.append("change 2")

    threads = [threading.Thread(target=first_change)]
    threads[0].start()
    assert held.wait(timeout=10)
    threads.append(threading.Thread(target=search))
    threads[1].start()
    deadline = time.monotonic() + 10
    while lock._searches_waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.001)  # until the search is queued behind the first change
    threads.append(threading.Thread(target=next_change))
    threads[2].start()
    release.set()
    for t in threads:
        t.join(timeout=10)
    assert order == ["change 1", "search", "change 2"]
