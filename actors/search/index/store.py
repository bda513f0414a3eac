"""One search database's SQLite file: documents, chunks, their vectors, the embedding queue and
the keyword index.

Only the indexer writes (one connection; one transaction per batch of files, or per batch of
vectors); searches read through per-thread connections and see a consistent snapshot thanks to
WAL. Chunks are never deleted: a replaced or removed file's chunks are marked inactive (soft
deletion) and their postings, vectors and queue entries dropped in the same transaction, so
nothing a search returns is stale.

Two stages fill a database. A batch of files is parsed and written with its keyword postings in
one transaction (keyword-searchable at commit); each new chunk also enters `embed_queue`. The
embedder then takes queued chunks, newest first, and stores their vectors, one per window of
the model (`window`), only if the chunk is still active when the vectors are written.
"""

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import attrs
import numpy as np

from actors.search.index import bm25, keyword, stemming
from actors.search.index.stemming import DEFAULT_LANGUAGE
from actors.search.index.tokenize import (
    TOKENIZER_VERSION,
    Postings,
    query_token_stream,
    query_tokens,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    source TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    indexed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    chunk INTEGER NOT NULL,
    content TEXT NOT NULL,
    active INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS chunks_active_source ON chunks (source) WHERE active = 1;
CREATE TABLE IF NOT EXISTS embed_queue (
    chunk_id INTEGER PRIMARY KEY,
    failed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS embed_queue_ready ON embed_queue (chunk_id) WHERE failed = 0;
-- Few rows (chunks whose embedding failed): counting them is then a seek, not a scan.
CREATE INDEX IF NOT EXISTS embed_queue_failed ON embed_queue (chunk_id) WHERE failed = 1;
"""
# Version 2: vectors per window, and the embedding queue.
SCHEMA_VERSION = 2
VECTORS = """
CREATE TABLE IF NOT EXISTS vectors (
    chunk_id INTEGER NOT NULL,
    window INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (chunk_id, window)
);
"""

VECTOR_DTYPE = np.dtype("<f2")
# A vector's key in the vector index: chunk id and window packed in one integer.
WINDOW_BITS = 5
MAX_WINDOWS = 1 << WINDOW_BITS


def vector_key(chunk_id: int, window: int) -> int:
    return (chunk_id << WINDOW_BITS) | window


def chunk_of(key: int) -> int:
    return key >> WINDOW_BITS


@attrs.frozen
class DocumentState:
    size: int
    mtime_ns: int
    sha256: str


@attrs.frozen
class ChunkRow:
    id: int
    source: str
    chunk: int
    content: str


@attrs.frozen
class Replace:
    """Give `source` these chunks (indexing it, or re-indexing a changed file)."""

    source: str
    state: DocumentState
    chunks: Sequence[str]


@attrs.frozen
class Remove:
    """Forget `source` (it left the inbox, or can no longer be indexed)."""

    source: str


@attrs.frozen
class Touch:
    """Record a new size or mtime for a file whose content did not change."""

    source: str
    state: DocumentState


Change = Replace | Remove | Touch


@attrs.frozen
class Written:
    """What one change did: chunk ids created and retired, and vector keys dropped."""

    new_ids: list[int]
    retired: list[int]
    dropped_keys: list[int]
    known: bool  # the source was indexed before this change


@attrs.frozen
class Progress:
    """Counts of one snapshot: `embedded + pending + failed == chunks`."""

    documents: int
    chunks: int
    embedded: int
    pending: int
    failed: int


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    # Bulk writes touch many B-tree pages; a 2 MiB default cache made them page-bound.
    conn.execute("PRAGMA cache_size = -65536")
    return conn


class Database:
    """A search database file; safe to share between the indexer and searching threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer = _connect(path)
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        with self._write_lock:
            self._writer.executescript(SCHEMA + keyword.SCHEMA)
        self.keywords = keyword.KeywordIndex(self.get_meta("language") or DEFAULT_LANGUAGE)
        self._migrate()
        self._check_keywords()

    @property
    def language(self) -> str:
        """The language BM25 stems this database's words in (`stemming`)."""
        return self.keywords.language

    def set_language(self, language: str) -> None:
        """Stem this database's words in `language` from now on (every known word is stemmed
        again at once; the postings do not change)."""
        if language == self.language and self.get_meta("language") == language:
            return
        with self.transaction() as conn:
            words = [row[0] for row in conn.execute("SELECT token FROM kw_vocab")]
            conn.execute("DELETE FROM kw_vocab")
            conn.executemany(
                "INSERT OR IGNORE INTO kw_vocab (stem, token) VALUES (?, ?)",
                sorted(zip(stemming.stems(words, language), words, strict=True)),
            )
            _set_meta(conn, "language", language)
            self.keywords.language = language

    def close(self) -> None:
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        self._writer.close()

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def write_lock(self) -> threading.RLock:
        """Held by every write transaction; hold it around a transaction and the matching
        change of the vector index so the two never disagree about a chunk."""
        return self._write_lock

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock:
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                yield self._writer
            except BaseException:
                self._writer.execute("ROLLBACK")
                self.keywords.rolled_back()
                raise
            self._writer.execute("COMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction on this thread's own connection."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self.path)
            conn.execute("PRAGMA query_only = 1")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def get_meta(self, key: str) -> str | None:
        with self.snapshot() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as conn:
            _set_meta(conn, key, value)

    def _migrate(self) -> None:
        with self.transaction() as conn:
            version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if version is not None and int(version[0]) >= SCHEMA_VERSION:
                return
            # Version 1 kept one truncated vector per chunk: they are all embedded again.
            conn.execute("DROP TABLE IF EXISTS vectors")
            conn.execute(VECTORS)
            conn.execute(
                "INSERT OR IGNORE INTO embed_queue (chunk_id)"
                " SELECT id FROM chunks WHERE active = 1"
            )
            _set_meta(conn, "schema_version", str(SCHEMA_VERSION))

    def _check_keywords(self) -> None:
        """Re-index keywords from the stored chunk text if the tokeniser or layout changed."""
        wanted = f"{TOKENIZER_VERSION}.{keyword.FORMAT_VERSION}"
        if self.get_meta("keyword_index") == wanted:
            return
        with self.transaction() as conn:
            self.keywords.reset(conn)
            rows = conn.execute("SELECT id, content FROM chunks WHERE active = 1 ORDER BY id")
            self.keywords.add(conn, rows)
            _set_meta(conn, "keyword_index", wanted)

    # -- writes (indexer only) ------------------------------------------------------------------

    @staticmethod
    def _retire(
        conn: sqlite3.Connection, source: str, retiring: list[tuple[int, str]]
    ) -> tuple[list[int], list[int]]:
        """Soft-delete `source`'s chunks: (chunk ids, vector keys dropped). Their (id, text)
        go on `retiring`, whose keyword postings the caller drops once for the batch."""
        old = conn.execute(
            "SELECT id, content FROM chunks WHERE source = ? AND active = 1", (source,)
        ).fetchall()
        if not old:
            return [], []
        retiring += old
        ids = [(cid,) for cid, _ in old]
        marks = ",".join("?" * len(ids))
        flat = [cid for cid, _ in old]
        keys = [
            vector_key(cid, window)
            for cid, window in conn.execute(
                f"SELECT chunk_id, window FROM vectors WHERE chunk_id IN ({marks})", flat
            )
        ]
        conn.executemany("UPDATE chunks SET active = 0 WHERE id = ?", ids)
        conn.execute(f"DELETE FROM vectors WHERE chunk_id IN ({marks})", flat)
        conn.execute(f"DELETE FROM embed_queue WHERE chunk_id IN ({marks})", flat)
        return flat, keys

    def write(self, changes: Sequence[Change], postings: Postings | None = None) -> list[Written]:
        """Apply a batch of changes in one transaction, in order.

        New chunks, their queue entries, documents and keyword postings are written with one
        statement each per batch (per-file statements were a fifth of the keyword stage's
        time), and the postings of the chunks it retires are dropped in one pass at the end; a
        source changed twice in one batch flushes them first, so order holds.

        `postings`, when given, are the new chunks' tokens, worked out ahead (the keyword
        preparer): posting owners number the chunks of the `Replace` changes in order. Their
        sources must then be distinct (one flush)."""
        out: list[Written] = []
        retiring: list[tuple[int, str]] = []
        with self.transaction() as conn:
            known = self._known_sources(conn, [change.source for change in changes])
            pending = _PendingChunks(_next_chunk_id(conn))
            for change in changes:
                if change.source in pending.sources:
                    if postings is not None:
                        raise ValueError(f"{change.source} twice in a batch with postings")
                    pending.flush(conn, self.keywords)
                was_known = change.source in known
                if isinstance(change, Touch):
                    conn.execute(
                        "UPDATE documents SET size = ?, mtime_ns = ? WHERE source = ?",
                        (change.state.size, change.state.mtime_ns, change.source),
                    )
                    out.append(Written([], [], [], was_known))
                    continue
                retired, keys = (
                    self._retire(conn, change.source, retiring) if was_known else ([], [])
                )
                if isinstance(change, Remove):
                    conn.execute("DELETE FROM documents WHERE source = ?", (change.source,))
                    known.discard(change.source)
                    out.append(Written([], retired, keys, was_known))
                    continue
                new_ids = pending.add(change)
                known.add(change.source)
                out.append(Written(new_ids, retired, keys, was_known))
            pending.flush(conn, self.keywords, postings)
            # After the last flush: a source changed twice in the batch retires chunks that
            # only that flush indexed.
            self.keywords.remove(conn, retiring)
        return out

    @staticmethod
    def _known_sources(conn: sqlite3.Connection, sources: Sequence[str]) -> set[str]:
        known: set[str] = set()
        for i in range(0, len(sources), 500):
            part = sources[i : i + 500]
            marks = ",".join("?" * len(part))
            known.update(
                row[0]
                for row in conn.execute(
                    f"SELECT source FROM documents WHERE source IN ({marks})", part
                )
            )
        return known

    def next_chunk_id(self) -> int:
        """The id the next chunk written will get (ids only grow)."""
        with self.snapshot() as conn:
            return _next_chunk_id(conn)

    def replace_document(
        self, source: str, state: DocumentState, chunks: Sequence[str]
    ) -> tuple[list[int], list[int]]:
        """Swap a file's chunks for new ones in one transaction: (new ids, retired ids)."""
        (written,) = self.write([Replace(source, state, chunks)])
        return written.new_ids, written.retired

    def touch_document(self, source: str, state: DocumentState) -> None:
        self.write([Touch(source, state)])

    def remove_document(self, source: str) -> list[int]:
        (written,) = self.write([Remove(source)])
        return written.retired

    def store_vectors(self, vectors: Sequence[tuple[int, np.ndarray]]) -> list[int]:
        """Store each chunk's window vectors (windows x dims) if the chunk is still active, and
        take it off the queue; returns the chunk ids stored. The caller holds `write_lock` to
        add the same vectors to the vector index before anyone can retire them."""
        with self.transaction() as conn:
            stored = []
            for chunk_id, windows in vectors:
                active = conn.execute(
                    "SELECT 1 FROM chunks WHERE id = ? AND active = 1", (chunk_id,)
                ).fetchone()
                if not active:
                    continue
                conn.executemany(
                    "INSERT OR REPLACE INTO vectors (chunk_id, window, vector) VALUES (?, ?, ?)",
                    (
                        (chunk_id, window, np.asarray(v, dtype=VECTOR_DTYPE).tobytes())
                        for window, v in enumerate(windows)
                    ),
                )
                conn.execute("DELETE FROM embed_queue WHERE chunk_id = ?", (chunk_id,))
                stored.append(chunk_id)
        return stored

    def mark_failed(self, chunk_ids: Sequence[int]) -> None:
        """Leave these chunks without a vector until `retry_failed` (the next start)."""
        with self.transaction() as conn:
            conn.executemany(
                "UPDATE embed_queue SET failed = 1 WHERE chunk_id = ?", ((i,) for i in chunk_ids)
            )

    def retry_failed(self) -> None:
        with self.transaction() as conn:
            conn.execute("UPDATE embed_queue SET failed = 0 WHERE failed = 1")

    def requeue_all(self) -> None:
        """Forget every vector and queue every active chunk (another embedding provider)."""
        with self.transaction() as conn:
            conn.execute("DELETE FROM vectors")
            conn.execute("DELETE FROM embed_queue")
            conn.execute(
                "INSERT INTO embed_queue (chunk_id) SELECT id FROM chunks WHERE active = 1"
            )

    def forget_all_documents(self) -> None:
        """Make every indexed file look changed, so the next reconciliation indexes it again
        (the chunker changed)."""
        with self.transaction() as conn:
            conn.execute("UPDATE documents SET size = -1, sha256 = ''")

    # -- reads ----------------------------------------------------------------------------------

    def documents(self) -> dict[str, DocumentState]:
        with self.snapshot() as conn:
            rows = conn.execute("SELECT source, size, mtime_ns, sha256 FROM documents").fetchall()
        return {source: DocumentState(size, mtime, sha) for source, size, mtime, sha in rows}

    def indexed(self) -> dict[str, tuple[str, int]]:
        """Every indexed document: its SHA-256 and its number of active chunks."""
        with self.snapshot() as conn:
            rows = conn.execute(
                "SELECT d.source, d.sha256, count(c.id) FROM documents d"
                " LEFT JOIN chunks c ON c.source = d.source AND c.active = 1 GROUP BY d.source"
            ).fetchall()
        return {source: (sha256, chunks) for source, sha256, chunks in rows}

    def documents_of(self, sources: Sequence[str]) -> dict[str, DocumentState]:
        """The indexed state of those of `sources` that are indexed."""
        with self.snapshot() as conn:
            return _documents_of(conn, sources)

    def document(self, source: str) -> DocumentState | None:
        with self.snapshot() as conn:
            row = conn.execute(
                "SELECT size, mtime_ns, sha256 FROM documents WHERE source = ?", (source,)
            ).fetchone()
        return None if row is None else DocumentState(*row)

    def pending(self, limit: int) -> list[tuple[int, str]]:
        """Up to `limit` queued chunks (id, text), newest first; failed ones are skipped."""
        with self.snapshot() as conn:
            return conn.execute(
                "SELECT q.chunk_id, c.content FROM embed_queue q JOIN chunks c ON c.id = q.chunk_id"
                " WHERE q.failed = 0 ORDER BY q.chunk_id DESC LIMIT ?",
                (limit,),
            ).fetchall()

    def all_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, vectors) of every stored vector, for rebuilding the vector index."""
        with self.snapshot() as conn:
            rows = conn.execute(
                "SELECT chunk_id, window, vector FROM vectors ORDER BY chunk_id, window"
            ).fetchall()
        keys = np.array([vector_key(r[0], r[1]) for r in rows], dtype=np.uint64)
        if not rows:
            return keys, np.zeros((0, 0), dtype=np.float32)
        vectors = np.stack([np.frombuffer(r[2], dtype=VECTOR_DTYPE) for r in rows])
        return keys, vectors.astype(np.float32)

    def vector_count(self) -> int:
        with self.snapshot() as conn:
            return int(conn.execute("SELECT count(*) FROM vectors").fetchone()[0])

    def fetch_active(self, ids: Sequence[int]) -> list[ChunkRow]:
        """Active chunks among `ids`, in the order of `ids`."""
        if not ids:
            return []
        with self.snapshot() as conn:
            return self._fetch_active(conn, ids)

    @staticmethod
    def _fetch_active(conn: sqlite3.Connection, ids: Sequence[int]) -> list[ChunkRow]:
        marks = ",".join("?" * len(ids))
        rows = conn.execute(
            f"SELECT id, source, chunk, content FROM chunks WHERE active = 1 AND id IN ({marks})",
            list(ids),
        ).fetchall()
        by_id = {r[0]: ChunkRow(*r) for r in rows}
        return [by_id[i] for i in ids if i in by_id]

    def keyword_search(self, query: str, limit: int) -> list[ChunkRow]:
        tokens = query_tokens(query)
        with self.snapshot() as conn:
            ids = self.keywords.search(conn, tokens, limit)
            return self._fetch_active(conn, ids)

    def bm25_search(
        self, query: str, limit: int, params: bm25.Params = bm25.DEFAULT, *, typo: bool = False
    ) -> list[tuple[ChunkRow, float]]:
        """Active chunks by BM25 score (desc), ties by their place in their file, then id: at
        most `limit` (chunk, score). With `typo`, a query word of `TYPO_MIN_LENGTH` letters or
        more that no indexed word shares a stem with is searched as the indexed words one edit
        away from it (`typo_terms`)."""
        tokens = query_token_stream(query)
        terms = stemming.query_terms(tokens, self.language)
        if not terms:
            return []
        with self.snapshot() as conn:
            if typo:
                terms = self._typo_terms(conn, tokens, terms)
            found = keyword.bm25_inputs(conn, list(terms))
            scored = bm25.rank(
                found.pieces,
                list(terms.values()),
                found.lengths,
                found.chunks,
                found.total_length,
                limit,
                params,
            )
            rows = self._fetch_active(conn, [chunk_id for chunk_id, _ in scored])
        score = dict(scored)
        ranked = sorted(rows, key=lambda row: (-score[row.id], row.chunk, row.id))
        return [(row, score[row.id]) for row in ranked[:limit]]

    def _typo_terms(
        self, conn: sqlite3.Connection, tokens: list[str], terms: dict[str, int]
    ) -> dict[str, int]:
        """`terms` with each stem no indexed word has, of a query word long enough, replaced by
        the stems of the indexed words one edit from that word ("backpus" -> "backup"), each
        with the word's weight. Words that match as they are never look further."""
        language = self.language
        missing = set(terms) - keyword.known_stems(conn, list(terms))
        words = {
            stem: token
            for token, stem in zip(tokens, stemming.stems(tokens, language), strict=True)
            if stem in missing and len(token) >= stemming.TYPO_MIN_LENGTH
        }
        if not words:
            return terms
        out = {stem: weight for stem, weight in terms.items() if stem not in words}
        for stem, token in words.items():
            nearby = sorted(stemming.one_edit(token))
            for found in sorted(keyword.known_stems(conn, stemming.stems(nearby, language))):
                out[found] = out.get(found, 0) + terms[stem]
        return out

    def stats(self) -> tuple[int, int]:
        """(documents, active chunks)."""
        progress = self.progress()
        return progress.documents, progress.chunks

    def progress(self) -> Progress:
        """The counts of one snapshot. Every status request and job report reads them: 5 ms
        at 100,000 chunks, most of it counting active chunks (13 ms when the queue's two
        counts were a scan each; a bare count(*) is a page count in SQLite)."""
        with self.snapshot() as conn:
            documents, chunks, embedded, queued, failed = conn.execute(
                "SELECT (SELECT count(*) FROM documents),"
                " (SELECT count(*) FROM chunks WHERE active = 1),"
                " (SELECT count(*) FROM vectors WHERE window = 0),"
                " (SELECT count(*) FROM embed_queue),"
                " (SELECT count(*) FROM embed_queue WHERE failed = 1)"
            ).fetchone()
        return Progress(documents, chunks, embedded, queued - failed, failed)


class _PendingChunks:
    """New chunks of a write batch, held until one statement per table writes them all."""

    def __init__(self, next_id: int) -> None:
        self.next_id = next_id
        self.sources: set[str] = set()
        self.chunks: list[tuple[int, str, int, str]] = []
        self.documents: list[tuple[str, int, int, str]] = []

    def add(self, change: Replace) -> list[int]:
        first = self.next_id
        self.next_id += len(change.chunks)
        self.chunks += [
            (first + number, change.source, number, content)
            for number, content in enumerate(change.chunks)
        ]
        self.documents.append(
            (change.source, change.state.size, change.state.mtime_ns, change.state.sha256)
        )
        self.sources.add(change.source)
        return list(range(first, self.next_id))

    def flush(
        self,
        conn: sqlite3.Connection,
        keywords: keyword.KeywordIndex,
        postings: Postings | None = None,
    ) -> None:
        # Explicit ids: AUTOINCREMENT still records the largest in sqlite_sequence.
        conn.executemany(
            "INSERT INTO chunks (id, source, chunk, content) VALUES (?, ?, ?, ?)", self.chunks
        )
        if self.chunks:
            # The new ids are consecutive: one statement makes the range, in half the time
            # of a row per chunk bound from Python.
            conn.execute(_QUEUE_RANGE, (self.chunks[0][0], self.chunks[-1][0]))
        conn.executemany(
            "INSERT OR REPLACE INTO documents (source, size, mtime_ns, sha256) VALUES (?, ?, ?, ?)",
            self.documents,
        )
        if postings is None:
            keywords.add(conn, ((c[0], c[3]) for c in self.chunks))
        elif self.chunks:
            ids = np.fromiter((c[0] for c in self.chunks), dtype=np.int64, count=len(self.chunks))
            keywords.add_postings(conn, ids, postings)
        self.sources.clear()
        self.chunks.clear()
        self.documents.clear()


_QUEUE_RANGE = """
INSERT INTO embed_queue (chunk_id)
WITH RECURSIVE ids(id) AS (SELECT ?1 UNION ALL SELECT id + 1 FROM ids WHERE id < ?2)
SELECT id FROM ids
"""


class Reader:
    """A read-only view of a search database for another process (the keyword preparer): it
    never writes, migrates or locks the file."""

    def __init__(self, path: Path) -> None:
        # as_uri quotes what a URI would misread in a path ("?", "#", "%").
        uri = f"{path.absolute().as_uri()}?mode=ro"
        self._conn = sqlite3.connect(uri, uri=True, isolation_level=None)

    def close(self) -> None:
        self._conn.close()

    def documents_of(self, sources: Sequence[str]) -> dict[str, DocumentState]:
        self._conn.execute("BEGIN")
        try:
            return _documents_of(self._conn, sources)
        finally:
            self._conn.execute("COMMIT")

    def next_chunk_id(self) -> int:
        return _next_chunk_id(self._conn)


def _documents_of(conn: sqlite3.Connection, sources: Sequence[str]) -> dict[str, DocumentState]:
    out: dict[str, DocumentState] = {}
    for i in range(0, len(sources), 500):
        part = list(sources[i : i + 500])
        marks = ",".join("?" * len(part))
        rows = conn.execute(
            f"SELECT source, size, mtime_ns, sha256 FROM documents WHERE source IN ({marks})",
            part,
        ).fetchall()
        out.update((source, DocumentState(*state)) for source, *state in rows)
    return out


def _next_chunk_id(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT max(seq) FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
    return int(row[0] or 0) + 1


def _set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
