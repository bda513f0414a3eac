"""The keyword inverted index, kept in the database's SQLite file.

Ranking is by number of matched tokens, then by row id. Counting matches needs every posting of
every query token, and a word like "the" is in nearly every chunk, so the postings of a token are
read as compact pieces and counted with numpy instead of row by row (FTS5 was measured here at
7 ms just to walk one such list, and its boolean queries blow up with long queries).

Chunk ids only grow. Postings are packed per block of `BLOCK` ids into pieces:
`kw_piece(start, token, first, ids)` holds sorted little-endian uint16 offsets from `start` (the
block's first id), `first` being the smallest. Each write transaction adds, for every block and
token it touches, one piece: a batch of 2,000 chunks is ~15,000 rows appended at the end of the
B-tree (keys start with the block), never a read-modify-write. Pieces of one token in one block
are disjoint, so a search simply counts every piece it reads.

A block written by several transactions holds several pieces per token; `compact` merges them
into one when the block is complete after three or more writes, or has gathered
`FRAGMENT_LIMIT` writes, so a search reads at most a few pieces per block and token whatever the
history. Postings of retired chunks are
deleted from their pieces, so every posting belongs to an active chunk. Everything is in SQLite,
so a reader's snapshot (WAL) always sees the index and the chunks of the same moment.

An earlier layout kept the open block's postings in Python sets; building them capped indexing
near 3,000 chunks/s, most of it in set insertions.

Beside the postings, each write keeps what `rank=bm25` needs (`bm25.py`), in the same
transaction: every chunk's length in words (`kw_length`, uint16 per id),
the number of active chunks and their total length (`kw_stats`), and the stem of every word
the index holds (`kw_vocab`, only words not seen before are stemmed and inserted). Lengths are
appended as a row per write and block (`kw_length`), never rewritten: a retired chunk's
length stays but no posting points at it. A word's
document frequency is not stored: BM25 reads the word's pieces anyway and counts them.
"""

import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from itertools import groupby, islice, pairwise
from operator import itemgetter

import attrs
import numpy as np

from actors.search.index import stemming
from actors.search.index.tokenize import Postings, document_postings

BLOCK = 16384
# Writes a block takes before its pieces are merged (a live inbox adds one file per write).
FRAGMENT_LIMIT = 8
# Bump when the layout changes: the index is then rebuilt from the chunks' text.
# 5: chunk lengths, vocabulary stems, totals and term frequencies (`tfs`) for BM25.
FORMAT_VERSION = 5

SCHEMA = """
DROP TABLE IF EXISTS kw_block;
CREATE TABLE IF NOT EXISTS kw_piece (
    start INTEGER NOT NULL,
    token TEXT NOT NULL,
    first INTEGER NOT NULL,
    ids BLOB NOT NULL,
    tfs BLOB,
    PRIMARY KEY (start, token, first)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kw_vocab (
    stem TEXT NOT NULL,
    token TEXT NOT NULL,
    PRIMARY KEY (stem, token)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kw_length (
    start INTEGER NOT NULL,
    first INTEGER NOT NULL,
    lengths BLOB NOT NULL,
    PRIMARY KEY (start, first)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kw_stats (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    chunks INTEGER NOT NULL,
    length INTEGER NOT NULL
);
INSERT OR IGNORE INTO kw_stats (id, chunks, length) VALUES (0, 0, 0);
"""
# Tables `rebuild` makes anew (an older layout may lack a column).
TABLES = ("kw_piece", "kw_vocab", "kw_length", "kw_stats")
_TF = np.dtype(np.uint8)

_OFFSET = np.dtype("<u2")

# (start, token, first, ids, tfs): one kw_piece row; `tfs` is None when every term frequency
# is 1 (most pieces: a rare word once in a chunk).
Piece = tuple[int, str, int, bytes, bytes | None]
# Chunks tokenised and grouped at a time (`_counted`).
ADD_SLICE = 16384


def _unpack(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=_OFFSET)


def _counted(chunks: Iterable[tuple[int, str]]) -> Iterator[tuple[np.ndarray, Postings]]:
    """Chunks (id, text) as (ids, their postings), `ADD_SLICE` at a time, so re-indexing a
    whole database keeps a bounded working set."""
    chunks = iter(chunks)
    while part := list(islice(chunks, ADD_SLICE)):
        ids = np.fromiter((chunk_id for chunk_id, _ in part), dtype=np.int64, count=len(part))
        yield ids, document_postings([text for _, text in part])


def _pieces(ids: np.ndarray, postings: Postings) -> list[Piece]:
    """The rows `add` writes for `postings` of the chunks `ids` (the texts' ids, in order),
    possibly repeated: one piece per block and token, in key order (start, token), so they
    append to the B-tree in order.

    Postings are grouped by sorting one integer key per posting with numpy rather than by
    appending them to per-token lists in Python (that loop capped this stage near 13,000
    chunks/s).
    """
    owners, tokens, vocabulary = postings
    if not vocabulary:
        return []
    first_block = int(ids.min()) // BLOCK
    # (block, token, offset) in one int64, so one sort groups and orders every posting; a
    # repeated posting is stored once, how many times it came being its term frequency.
    per_chunk = (ids // BLOCK - first_block) * (len(vocabulary) * BLOCK) + ids % BLOCK
    key = tokens * BLOCK + per_chunk[owners]
    key.sort()  # np.unique (hashing) was measured 5x slower than sorting here
    runs = np.flatnonzero(np.diff(key, prepend=-1))
    tf = np.minimum(np.diff(runs, append=len(key)), np.iinfo(_TF).max).astype(_TF)
    key = key[runs]
    group, offsets = np.divmod(key, BLOCK)
    offsets = offsets.astype(_OFFSET)
    starts = np.flatnonzero(np.diff(group, prepend=-1))
    block, token = np.divmod(group[starts], len(vocabulary))
    packed = offsets.tobytes()
    edges = (np.append(starts, len(key)) * _OFFSET.itemsize).tolist()
    return list(
        zip(
            ((block + first_block) * BLOCK).tolist(),
            map(vocabulary.__getitem__, token.tolist()),
            offsets[starts].tolist(),
            map(packed.__getitem__, map(slice, edges[:-1], edges[1:])),
            _tf_blobs(tf, starts),
            strict=True,
        )
    )


def _tf_blobs(tf: np.ndarray, starts: np.ndarray) -> list[bytes | None]:
    """Each piece's term frequencies (pieces begin at `starts`), None where all are 1."""
    repeated = (np.maximum.reduceat(tf, starts) > 1).tolist()
    packed = tf.tobytes()
    edges = np.append(starts, len(tf)).tolist()
    return [
        packed[a:b] if r else None for a, b, r in zip(edges[:-1], edges[1:], repeated, strict=True)
    ]


def _tfs(blob: bytes | None, count: int) -> np.ndarray:
    return np.ones(count, dtype=_TF) if blob is None else np.frombuffer(blob, dtype=_TF)


def _joined_tfs(tfs: Sequence[bytes | None], blobs: Sequence[bytes]) -> bytes:
    """The term frequencies of pieces (`tfs` of pieces `blobs`) one after the other, 1 for
    each posting of a piece without them (bytes, not arrays: a merge joins thousands)."""
    return b"".join(
        tf if tf is not None else b"\x01" * (len(blob) // _OFFSET.itemsize)
        for tf, blob in zip(tfs, blobs, strict=True)
    )


def _tf_blob(tf: np.ndarray) -> bytes | None:
    return tf.tobytes() if len(tf) and int(tf.max()) > 1 else None


class KeywordIndex:
    """The writes run inside the caller's transaction; `writes` counts, per block, the writes
    since its pieces were last merged (unknown blocks count as merged: a restart at worst
    delays one merge)."""

    def __init__(self, language: str = stemming.DEFAULT_LANGUAGE) -> None:
        self.writes: dict[int, int] = defaultdict(int)
        self.language = language
        # Words this process has put in `kw_vocab` (a rolled-back write may leave a few out:
        # BM25 then misses them until the next rebuild, the spec's ranking never does).
        self._stemmed: set[str] = set()

    def add(self, conn: sqlite3.Connection, chunks: Iterable[tuple[int, str]]) -> None:
        """Index new chunks (id, text), ids above every earlier one."""
        blocks: set[int] = set()
        for ids, postings in _counted(chunks):
            blocks |= _insert(conn, _pieces(ids, postings))
            self._note(conn, ids, postings)
        self._added(conn, blocks)

    def add_postings(self, conn: sqlite3.Connection, ids: np.ndarray, postings: Postings) -> None:
        """Index new chunks `ids` (above every earlier one) whose tokens were worked out ahead:
        `postings` of the texts, as `document_postings` numbers them."""
        self._added(conn, _insert(conn, _pieces(ids, postings)))
        self._note(conn, ids, postings)

    def reset(self, conn: sqlite3.Connection) -> None:
        """Empty the index, its tables made anew in the caller's transaction (an older layout
        may lack a column; SQLite's schema changes are transactional). Call it before any
        statement of the transaction is left open: a table being read cannot be dropped."""
        for table in TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        self._stemmed.clear()

    def rolled_back(self) -> None:
        """The transaction was rolled back: words noted in it are not in `kw_vocab`."""
        self._stemmed.clear()

    def _note(self, conn: sqlite3.Connection, ids: np.ndarray, postings: Postings) -> None:
        """Keep BM25's statistics for new chunks: their lengths, the totals, new words' stems."""
        lengths = _lengths(ids, postings)
        _store_lengths(conn, ids, lengths)
        conn.execute(
            "UPDATE kw_stats SET chunks = chunks + ?, length = length + ? WHERE id = 0",
            (len(ids), int(lengths.sum())),
        )
        new = list(set(postings.vocabulary).difference(self._stemmed))
        if new:
            # In key order: the rows then append to the B-tree's pages in turn.
            rows = sorted(zip(stemming.stems(new, self.language), new, strict=True))
            conn.executemany("INSERT OR IGNORE INTO kw_vocab (stem, token) VALUES (?, ?)", rows)
            self._stemmed.update(new)

    def _added(self, conn: sqlite3.Connection, blocks: set[int]) -> None:
        """Count a write in each block it touched; merge the blocks it completed or that
        gathered too many pieces."""
        if not blocks:
            return
        last = max(blocks)
        for start in blocks:
            self.writes[start] += 1
        for start in sorted(self.writes):
            # Blocks below the newest one are complete: nothing will be added to them. Two
            # pieces per token (a bulk batch ending mid-block) cost a search nothing worth a
            # rewrite; a live inbox's many small writes do.
            complete = start < last
            if self.writes[start] >= (3 if complete else FRAGMENT_LIMIT):
                compact(conn, start)
                self.writes[start] = 1
            if complete:
                del self.writes[start]

    def remove(self, conn: sqlite3.Connection, chunks: Iterable[tuple[int, str]]) -> None:
        """Drop the postings of retired chunks (id, text), tokenised again from their text.

        Call it once per transaction with every chunk it retires: each (block, token) piece
        they touch is then read and rewritten once. Called per file, a batch that changed
        2,000 files of 10 chunks rewrote the pieces of common words 2,000 times (370 chunks/s
        against 16,000 for new files)."""
        for ids, postings in _counted(chunks):
            conn.execute(
                "UPDATE kw_stats SET chunks = chunks - ?, length = length - ? WHERE id = 0",
                (len(ids), int(_lengths(ids, postings).sum())),
            )
            dropped: list[tuple[int, str, int]] = []
            kept: list[Piece] = []
            # The same grouping as `add`: one piece of offsets to drop per block and token.
            for start, drops in groupby(_pieces(ids, postings), key=itemgetter(0)):
                _drop_in_block(conn, start, list(drops), dropped, kept)
            # Written per slice: the next slice reads the pieces this one rewrote.
            conn.executemany(
                "DELETE FROM kw_piece WHERE start = ? AND token = ? AND first = ?", dropped
            )
            conn.executemany(
                "INSERT INTO kw_piece (start, token, first, ids, tfs) VALUES (?, ?, ?, ?, ?)",
                kept,
            )

    def search(self, conn: sqlite3.Connection, tokens: Sequence[str], limit: int) -> list[int]:
        """Chunk ids matching any token, by number of matched tokens (desc), then id (asc)."""
        if not tokens or limit <= 0:
            return []
        marks = ",".join(f"?{i + 1}" for i in range(len(tokens)))
        pieces = conn.execute(_QUERY.format(block=BLOCK, marks=marks), list(tokens)).fetchall()
        return rank([(start, _unpack(blob)) for start, blob in pieces], limit)


@attrs.frozen
class Bm25Inputs:
    """What BM25 reads for a query: each matched word's pieces (numbered by stem), the chunk
    lengths of the blocks they are in, and the totals."""

    pieces: list[tuple[int, int, int, np.ndarray, np.ndarray]]  # start, stem, word, ids, tfs
    lengths: dict[int, np.ndarray]  # block start -> uint16 length of each of its ids
    chunks: int
    total_length: int


def known_stems(conn: sqlite3.Connection, stems: Sequence[str]) -> set[str]:
    """Those of `stems` that some indexed word has (one indexed lookup each)."""
    rows = conn.execute(
        "SELECT DISTINCT stem FROM kw_vocab WHERE stem IN (SELECT value FROM json_each(?))",
        (json.dumps(list(stems)),),
    )
    return {stem for (stem,) in rows}


def bm25_inputs(conn: sqlite3.Connection, stems: Sequence[str]) -> Bm25Inputs:
    """Read, in the caller's snapshot, every piece of every word whose stem is in `stems`."""
    number = {stem: i for i, stem in enumerate(stems)}
    words = conn.execute(
        "SELECT token, stem FROM kw_vocab WHERE stem IN (SELECT value FROM json_each(?))",
        (json.dumps(list(number)),),
    ).fetchall()
    chunks, total = conn.execute("SELECT chunks, length FROM kw_stats WHERE id = 0").fetchone()
    if not words:
        return Bm25Inputs([], {}, chunks, total)
    stem_of = {token: number[stem] for token, stem in words}
    word_of = {token: i for i, token in enumerate(stem_of)}
    rows = conn.execute(_WORDS_QUERY.format(block=BLOCK), (json.dumps(list(stem_of)),))
    pieces = []
    for start, token, blob, tfs in rows:
        offsets = _unpack(blob)
        pieces.append((start, stem_of[token], word_of[token], offsets, _tfs(tfs, len(offsets))))
    starts = sorted({piece[0] // BLOCK * BLOCK for piece in pieces})
    lengths: dict[int, np.ndarray] = {}
    rows = conn.execute(
        "SELECT start, first, lengths FROM kw_length"
        " WHERE start IN (SELECT value FROM json_each(?))",
        (json.dumps(starts),),
    )
    for start, first, blob in rows:
        values = lengths.get(start)
        if values is None:
            values = lengths[start] = np.zeros(BLOCK, dtype=_OFFSET)
        part = _unpack(blob)
        values[first - start : first - start + len(part)] = part
    return Bm25Inputs(pieces, lengths, chunks, total)


def _lengths(ids: np.ndarray, postings: Postings) -> np.ndarray:
    """Each text's length in words (its postings; CJK text counts its bigrams and characters),
    at most 65,535."""
    counts = np.bincount(postings.owners, minlength=len(ids))
    return np.minimum(counts, np.iinfo(_OFFSET).max).astype(_OFFSET)


def _store_lengths(conn: sqlite3.Connection, ids: np.ndarray, lengths: np.ndarray) -> None:
    """Record the lengths of chunks `ids` (consecutive, as a write's are): one row per block
    they are in, keyed by its first id, so a write appends and never rewrites."""
    blocks = ids // BLOCK
    edges = [*np.flatnonzero(np.diff(blocks, prepend=-1)).tolist(), len(ids)]
    conn.executemany(
        "INSERT OR REPLACE INTO kw_length (start, first, lengths) VALUES (?, ?, ?)",
        ((int(blocks[a]) * BLOCK, int(ids[a]), lengths[a:b].tobytes()) for a, b in pairwise(edges)),
    )


def _insert(conn: sqlite3.Connection, rows: list[Piece]) -> set[int]:
    """Insert pieces; the blocks they are in."""
    conn.executemany(
        "INSERT INTO kw_piece (start, token, first, ids, tfs) VALUES (?, ?, ?, ?, ?)", rows
    )
    return {row[0] for row in rows}


def _drop_in_block(
    conn: sqlite3.Connection,
    start: int,
    drops: list[Piece],
    dropped: list[tuple[int, str, int]],
    kept: list[Piece],
) -> None:
    """Take the offsets of `drops` (one piece per token, in token order) out of block `start`:
    the keys of the pieces that lose postings go on `dropped`, what is left of them on `kept`.

    One statement reads every piece of the tokens concerned (SQLite seeks each token in C), and
    the postings are matched with one sorted search over all of them, as `add` groups them:
    per piece, Python only cuts the result."""
    tokens = [drop[1] for drop in drops]
    rows = conn.execute(
        "SELECT token, first, ids, tfs FROM kw_piece"
        " WHERE start = ? AND token IN (SELECT value FROM json_each(?))",
        (start, json.dumps(tokens)),
    ).fetchall()
    if not rows:
        return
    # Keys (token's place in `drops`, offset): ascending, as `drops` is in token order.
    number = {token: i for i, token in enumerate(tokens)}
    gone_keys = np.repeat(
        np.arange(len(drops)), [len(drop[3]) // _OFFSET.itemsize for drop in drops]
    ) * BLOCK + _unpack(b"".join(drop[3] for drop in drops))
    lengths = np.array([len(blob) // _OFFSET.itemsize for _, _, blob, _ in rows])
    current = _unpack(b"".join(blob for _, _, blob, _ in rows))
    tf = np.frombuffer(_joined_tfs([row[3] for row in rows], [row[2] for row in rows]), _TF)
    owners = np.fromiter((number[token] for token, *_ in rows), dtype=np.int64, count=len(rows))
    keys = np.repeat(owners, lengths) * BLOCK + current
    at = np.minimum(np.searchsorted(gone_keys, keys), len(gone_keys) - 1)
    gone = gone_keys[at] == keys
    # Pieces are never empty, so each piece's postings start where the previous one's end.
    removed = np.add.reduceat(gone, np.cumsum(lengths) - lengths, dtype=np.int64)
    left = current[~gone]
    left_tf = tf[~gone]
    left_ends = np.cumsum(lengths - removed)
    packed = left.tobytes()
    for i in np.flatnonzero(removed).tolist():
        token, first, _, _ = rows[i]
        dropped.append((start, token, first))
        end = int(left_ends[i])
        begin = end - (int(lengths[i]) - int(removed[i]))
        if end > begin:
            # The smallest offset left is in no other piece of this token: no key collides.
            kept.append(
                (
                    start,
                    token,
                    int(left[begin]),
                    packed[begin * _OFFSET.itemsize : end * _OFFSET.itemsize],
                    _tf_blob(left_tf[begin:end]),
                )
            )


def compact(conn: sqlite3.Connection, start: int) -> None:
    """Merge each token's pieces in block `start` into one: SQLite finds the tokens that have
    several pieces (a scan in C), and only theirs are read into Python and rewritten (reading
    every piece of the block was most of a live inbox's merges)."""
    merged: list[Piece] = []
    token: str | None = None
    blobs: list[bytes] = []
    tfs: list[bytes | None] = []
    rows = conn.execute(
        "SELECT token, ids, tfs FROM kw_piece WHERE start = ?1 AND token IN"
        " (SELECT token FROM kw_piece WHERE start = ?1 GROUP BY token HAVING count(*) > 1)"
        " ORDER BY token, first",
        (start,),
    )
    for row_token, blob, tf in [*rows.fetchall(), (None, b"", None)]:
        if row_token != token:
            if len(blobs) > 1:
                joined = b"".join(blobs)
                tf_blob = None
                if any(t is not None for t in tfs):
                    tf_blob = _joined_tfs(tfs, blobs)
                merged.append((start, token, int(_unpack(joined)[0]), joined, tf_blob))  # type: ignore[arg-type]
            token, blobs, tfs = row_token, [], []
        blobs.append(blob)
        tfs.append(tf)
    conn.executemany(
        "DELETE FROM kw_piece WHERE start = ? AND token = ?", ((m[0], m[1]) for m in merged)
    )
    conn.executemany(
        "INSERT INTO kw_piece (start, token, first, ids, tfs) VALUES (?, ?, ?, ?, ?)", merged
    )


def rank(pieces: Sequence[tuple[int, np.ndarray]], limit: int) -> list[int]:
    """Ids by how many pieces hold them (desc), then by id (asc), at most `limit`.

    A piece is (start, offsets): ids `start + offsets` of one token, unique within the piece;
    pieces of the same token never share an id.
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


# Every block start up to the newest, probed for each token: (start, token) is the key's
# prefix, so each probe is a B-tree seek.
_QUERY = """
WITH RECURSIVE blocks(start) AS (
    SELECT 0 WHERE (SELECT max(start) FROM kw_piece) IS NOT NULL
    UNION ALL SELECT start + {block} FROM blocks
    WHERE start + {block} <= (SELECT max(start) FROM kw_piece)
)
SELECT b.start, k.ids FROM blocks b JOIN kw_piece k ON k.start = b.start AND k.token IN ({marks})
"""

# The same probes for the words of BM25's stems, named in a JSON array (a stem may have many
# words).
_WORDS_QUERY = """
WITH RECURSIVE blocks(start) AS (
    SELECT 0 WHERE (SELECT max(start) FROM kw_piece) IS NOT NULL
    UNION ALL SELECT start + {block} FROM blocks
    WHERE start + {block} <= (SELECT max(start) FROM kw_piece)
)
SELECT b.start, k.token, k.ids, k.tfs FROM blocks b
JOIN kw_piece k ON k.start = b.start AND k.token IN (SELECT value FROM json_each(?1))
"""
