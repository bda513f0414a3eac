"""The keyword inverted index, kept in the database's SQLite file.

Ranking is by number of matched tokens, then by row id. Counting matches needs every posting of
every query token, and a word like "the" is in nearly every chunk, so the postings of a token are
read as compact blocks and counted with numpy instead of row by row (FTS5 was measured here at
7 ms just to walk one such list, and its boolean queries blow up with long queries).

Chunk ids only grow. One SQLite row per posting capped indexing near 600 chunks/s here (random
B-tree inserts rewrite megabytes of pages per commit), so postings are packed per block of
`BLOCK` ids:
- the tail: postings of active chunks at or above the last `BLOCK` boundary live in memory only;
  they are rebuilt from the chunks' text when the database opens (at most `BLOCK` chunks, about
  0.1 s), so nothing is lost in a crash;
- `kw_block(start, token, ids)`: when a chunk id crosses a `BLOCK` boundary, the tail below it
  is written as one row per block and token holding sorted little-endian uint16 offsets from
  `start` (at most 8 KiB); keyed by start first, so writing appends at the end of the B-tree.
A search probes (start, token) for every block start and counts with numpy.
Postings of retired chunks are deleted, so every posting belongs to an active chunk.

Readers must see the SQLite snapshot and the tail of the same moment: `KeywordIndex.lock` is held
by the writer while it commits and applies its staged tail changes, and by a reader while it
opens its snapshot and copies the tail postings it needs.
"""

import sqlite3
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

BLOCK = 4096

SCHEMA = """
CREATE TABLE IF NOT EXISTS kw_block (
    start INTEGER NOT NULL,
    token TEXT NOT NULL,
    ids BLOB NOT NULL,
    PRIMARY KEY (start, token)
) WITHOUT ROWID;
"""

_OFFSET = np.dtype("<u2")

Postings = Sequence[tuple[int, Sequence[str]]]


def sealed_below(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'kw_sealed_below'").fetchone()
    return int(row[0]) if row else 0


def _pack(offsets: list[int] | np.ndarray) -> bytes:
    return np.asarray(offsets, dtype=_OFFSET).tobytes()


def _unpack(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=_OFFSET)


class Staged:
    """Tail changes of one write transaction, applied to memory only once it commits."""

    def __init__(self) -> None:
        self.added: dict[int, tuple[str, ...]] = {}
        self.removed: set[int] = set()
        self.sealed_below: int | None = None


class KeywordIndex:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._tail: dict[int, tuple[str, ...]] = {}
        self._tail_postings: dict[str, set[int]] = defaultdict(set)

    def load(self, conn: sqlite3.Connection, tokens_of: Callable[[str], Sequence[str]]) -> None:
        """Rebuild the in-memory tail from the stored chunk text."""
        rows = conn.execute(
            "SELECT id, content FROM chunks WHERE active = 1 AND id >= ?", (sealed_below(conn),)
        ).fetchall()
        with self.lock:
            self._tail.clear()
            self._tail_postings.clear()
            for chunk_id, content in rows:
                self._put(chunk_id, tuple(tokens_of(content)))

    def _put(self, chunk_id: int, tokens: tuple[str, ...]) -> None:
        self._tail[chunk_id] = tokens
        for token in tokens:
            self._tail_postings[token].add(chunk_id)

    def _drop(self, chunk_id: int) -> None:
        for token in self._tail.pop(chunk_id, ()):
            ids = self._tail_postings.get(token)
            if ids is not None:
                ids.discard(chunk_id)
                if not ids:
                    del self._tail_postings[token]

    # -- writes, inside the writer's transaction -------------------------------------------------

    def add(self, conn: sqlite3.Connection, staged: Staged, postings: Postings) -> None:
        """Index new chunks (ids above every earlier id), sealing segments they complete."""
        for chunk_id, tokens in postings:
            staged.added[chunk_id] = tuple(tokens)
        if not postings:
            return
        newest = max(chunk_id for chunk_id, _ in postings)
        boundary = newest - newest % BLOCK
        if boundary <= sealed_below(conn):
            return
        tail = {**self._tail, **staged.added}
        for chunk_id in staged.removed:
            tail.pop(chunk_id, None)
        _seal(conn, {cid: toks for cid, toks in tail.items() if cid < boundary}, boundary)
        staged.sealed_below = boundary

    def remove(self, conn: sqlite3.Connection, staged: Staged, postings: Postings) -> None:
        """Drop the postings of retired chunks, given with the tokens they were indexed under."""
        below = sealed_below(conn)
        in_blocks: dict[tuple[int, str], set[int]] = defaultdict(set)
        for chunk_id, tokens in postings:
            if chunk_id >= below:
                staged.removed.add(chunk_id)
                staged.added.pop(chunk_id, None)
                continue
            start = chunk_id - chunk_id % BLOCK
            for token in tokens:
                in_blocks[(start, token)].add(chunk_id - start)
        _remove_packed(conn, in_blocks)

    def apply(self, staged: Staged) -> None:
        """Make a committed transaction's tail changes visible; the caller holds `lock`."""
        for chunk_id in staged.removed:
            self._drop(chunk_id)
        for chunk_id, tokens in staged.added.items():
            self._put(chunk_id, tokens)
        if staged.sealed_below is not None:
            kept = {c: t for c, t in self._tail.items() if c >= staged.sealed_below}
            self._tail.clear()
            self._tail_postings.clear()
            for chunk_id, tokens in kept.items():
                self._put(chunk_id, tokens)

    # -- reads -----------------------------------------------------------------------------------

    def tail_ids(self, tokens: Sequence[str]) -> list[tuple[int, np.ndarray]]:
        """Tail postings of `tokens` as rank() pieces; the caller holds `lock`."""
        pieces = []
        for token in tokens:
            ids = self._tail_postings.get(token)
            if not ids:
                continue
            # Usually one block; a single huge transaction can leave the tail across several.
            array = np.fromiter(ids, dtype=np.int64, count=len(ids))
            for start in np.unique(array - array % BLOCK):
                in_block = array[(array >= start) & (array < start + BLOCK)]
                pieces.append((int(start), in_block - start))
        return pieces

    def search(
        self,
        conn: sqlite3.Connection,
        tail: list[tuple[int, np.ndarray]],
        tokens: Sequence[str],
        limit: int,
    ) -> list[int]:
        """Chunk ids matching any token, by number of matched tokens (desc), then id (asc)."""
        if not tokens or limit <= 0:
            return []
        marks = ",".join(f"?{i + 2}" for i in range(len(tokens)))
        sql = _PACKED_QUERY.format(block=BLOCK, marks=marks)
        pieces = conn.execute(sql, [sealed_below(conn), *tokens]).fetchall()
        return rank([(start, _unpack(blob)) for start, blob in pieces] + tail, limit)


def rank(pieces: Sequence[tuple[int, np.ndarray]], limit: int) -> list[int]:
    """Ids by how many pieces hold them (desc), then by id (asc), at most `limit`.

    A piece is (start, offsets): the ids `start + offsets` of one token, unique within the piece.
    """
    if not pieces:
        return []
    # Count on a compact axis where only blocks holding a posting get BLOCK slots, in id order;
    # offsets within a piece are unique, so plain fancy-index increments count correctly.
    blocks = sorted({start // BLOCK for start, _ in pieces})
    slot_of = {block: i * BLOCK for i, block in enumerate(blocks)}
    counts = np.zeros(len(blocks) * BLOCK, dtype=np.uint16)
    for start, offsets in pieces:
        counts[slot_of[start // BLOCK] + start % BLOCK + offsets.astype(np.intp)] += 1
    hit = np.flatnonzero(counts)
    hit_counts = counts[hit]
    found: list[np.ndarray] = []
    remaining = limit
    for level in range(int(hit_counts.max()), 0, -1):
        at_level = hit[hit_counts == level][:remaining]
        found.append(at_level)
        remaining -= len(at_level)
        if remaining == 0:
            break
    chosen = np.concatenate(found)
    block_starts = np.array(blocks, dtype=np.int64) * BLOCK
    return [int(x) for x in block_starts[chosen // BLOCK] + chosen % BLOCK]


def _seal(conn: sqlite3.Connection, chunks: dict[int, tuple[str, ...]], below: int) -> None:
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    for chunk_id in sorted(chunks):
        start = chunk_id - chunk_id % BLOCK
        for token in chunks[chunk_id]:
            groups[(start, token)].append(chunk_id - start)
    # Blocks under `below` never get new ids, so each is written once, in key order.
    conn.executemany(
        "INSERT INTO kw_block (start, token, ids) VALUES (?, ?, ?)",
        ((start, token, _pack(offsets)) for (start, token), offsets in sorted(groups.items())),
    )
    conn.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('kw_sealed_below', ?)", (str(below),)
    )


def _remove_packed(conn: sqlite3.Connection, gone: dict[tuple[int, str], set[int]]) -> None:
    for (start, token), offsets in gone.items():
        row = conn.execute(
            "SELECT ids FROM kw_block WHERE start = ? AND token = ?", (start, token)
        ).fetchone()
        if row is None:
            continue
        current = _unpack(row[0])
        kept = current[~np.isin(current, np.fromiter(offsets, dtype=_OFFSET, count=len(offsets)))]
        if len(kept):
            conn.execute(
                "UPDATE kw_block SET ids = ? WHERE start = ? AND token = ?",
                (kept.tobytes(), start, token),
            )
        else:
            conn.execute("DELETE FROM kw_block WHERE start = ? AND token = ?", (start, token))


_PACKED_QUERY = """
WITH RECURSIVE blocks(start) AS (
    SELECT 0 WHERE ?1 > 0
    UNION ALL SELECT start + {block} FROM blocks WHERE start + {block} < ?1
)
SELECT b.start, k.ids FROM blocks b JOIN kw_block k ON k.start = b.start AND k.token IN ({marks})
"""
