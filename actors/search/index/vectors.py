"""A database's semantic index: usearch, 512 dimensions, cosine, keyed by chunk id.

The vectors themselves are stored in the SQLite file (`vectors` table), so the usearch file is a
cache of them: it is loaded if its sidecar says it reflects the same vector space and it holds
exactly the active chunks' keys, and rebuilt from SQLite otherwise (missing, corrupt or
stale). Scores below `CUTOFF` are dropped before any limit is applied.
"""

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from usearch.index import Index

from actors.search.embed.embedding import DIMENSIONS

CUTOFF = 0.3
ADD_STEP = 16
# Seconds without a change before the index is worth saving. usearch holds the GIL while it
# saves (80,000 vectors: 70-280 ms in which no other thread of the service runs, measured), and
# a file saved mid-drain is stale at once: its keys no longer match SQLite's, so a restart
# rebuilds anyway. Saving once the vectors settle pays that pause once per burst of changes.
SETTLE_SECONDS = 10.0


def _new_index() -> Index:
    return Index(ndim=DIMENSIONS, metric="cos", dtype="f16")


def _same_keys(index: Index, keys: np.ndarray) -> bool:
    """The saved index holds exactly the active chunks: a count alone would miss one chunk
    replaced by another while the file was not saved."""
    if len(index) != len(keys):
        return False
    saved = np.sort(np.asarray(index.keys, dtype=np.uint64))
    return bool(np.array_equal(saved, np.sort(np.asarray(keys, dtype=np.uint64))))


class SearchesFirst:
    """One holder at a time, and a waiting search goes before any waiting change.

    A plain lock goes to whoever takes it first: the thread adding vectors step by step took
    it back at once after each step while a woken search was still getting scheduled, so a
    search could wait through several steps. In the ingest benchmark uncached semantic
    queries took 110-150 ms now and then late in a drain, all of it waiting here; beside an
    adder a search waited p99 63.7 ms with a plain lock and 14.7 ms with this one (measured).
    Here a change waits while any search waits, so a search waits for at most the one step in
    progress (`ADD_STEP` vectors, ~12 ms on an index of 60,000)."""

    def __init__(self) -> None:
        self._turn = threading.Condition(threading.Lock())
        self._held = False
        self._searches_waiting = 0

    @contextlib.contextmanager
    def search(self) -> Iterator[None]:
        with self._turn:
            self._searches_waiting += 1
            try:
                self._turn.wait_for(lambda: not self._held)
            finally:
                self._searches_waiting -= 1
            self._held = True
        try:
            yield
        finally:
            self._release()

    @contextlib.contextmanager
    def change(self) -> Iterator[None]:
        with self._turn:
            self._turn.wait_for(lambda: not self._held and not self._searches_waiting)
            self._held = True
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self._turn:
            self._held = False
            self._turn.notify_all()


class VectorIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sidecar = path.with_suffix(".json")
        self._index = _new_index()
        # usearch's Python object is not documented as safe for search during remove/add.
        self._lock = SearchesFirst()
        self.dirty = False
        self._changed_at = time.monotonic()

    def __len__(self) -> int:
        return len(self._index)

    def load_or_rebuild(self, fingerprint: str, keys: np.ndarray, vectors: np.ndarray) -> bool:
        """Load the saved index if it matches, else rebuild it; True when rebuilt."""
        if self.path.exists() and self.sidecar.exists():
            try:
                meta = json.loads(self.sidecar.read_text())
                index = _new_index()
                index.load(str(self.path))
                if meta.get("fingerprint") == fingerprint and _same_keys(index, keys):
                    with self._lock.change():
                        self._index = index
                    return False
            except (OSError, ValueError, RuntimeError):
                pass
        index = _new_index()
        if len(keys):
            index.add(keys, vectors)
        with self._lock.change():
            self._index = index
        self.save(fingerprint)
        return True

    def add(self, keys: list[int], vectors: np.ndarray) -> None:
        # A few vectors per hold of the lock: adding is slow on an HNSW graph (1.7k-15k/s
        # here), and a search waits for the lock, so a whole embedding batch at once kept
        # uncached semantic queries waiting tens of milliseconds.
        for start in range(0, len(keys), ADD_STEP):
            part = keys[start : start + ADD_STEP]
            with self._lock.change():
                for key in part:
                    if self._index.contains(key):
                        self._index.remove(key)
                part_vectors = vectors[start : start + ADD_STEP]
                self._index.add(np.asarray(part, dtype=np.uint64), part_vectors)
                self._changed()

    def remove(self, keys: list[int]) -> None:
        with self._lock.change():
            for key in keys:
                if self._index.contains(key):
                    self._index.remove(key)
                    self._changed()

    def _changed(self) -> None:
        self.dirty = True
        self._changed_at = time.monotonic()

    def settled(self, now: float | None = None) -> bool:
        """Changed since the last save, and not for `SETTLE_SECONDS`."""
        now = time.monotonic() if now is None else now
        return self.dirty and now - self._changed_at >= SETTLE_SECONDS

    def search(self, vector: np.ndarray, count: int) -> list[tuple[int, float]]:
        """Up to `count` (key, cosine) pairs with cosine >= CUTOFF, best first."""
        with self._lock.search():
            size = len(self._index)
            if size == 0:
                return []
            matches = self._index.search(vector, min(count, size))
        out = []
        for key, distance in zip(matches.keys, matches.distances, strict=True):
            score = 1.0 - float(distance)
            if score >= CUTOFF:
                out.append((int(key), score))
        return out

    def nearest(self, vector: np.ndarray) -> float | None:
        """The best cosine of any vector, below CUTOFF too; None when there is none."""
        with self._lock.search():
            if len(self._index) == 0:
                return None
            matches = self._index.search(vector, 1)
        return 1.0 - float(matches.distances[0]) if len(matches.keys) else None

    def save(self, fingerprint: str) -> None:
        with self._lock.change():
            tmp = self.path.with_suffix(".tmp")
            self._index.save(str(tmp))
            tmp.replace(self.path)
            count = len(self._index)
            self.dirty = False
        self.sidecar.write_text(json.dumps({"fingerprint": fingerprint, "count": count}))
