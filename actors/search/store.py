"""One search database's SQLite file: documents, chunks, their vectors and the keyword index.

Only the indexer writes (one connection, one transaction per file); searches read through
per-thread connections and see a consistent snapshot thanks to WAL. Chunks are never deleted:
a replaced or removed file's chunks are marked inactive (soft deletion) and their postings and
vectors dropped, so nothing a search returns is stale.
"""

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import attrs
import numpy as np

from actors.search import keyword
from actors.search.tokenize import TOKENIZER_VERSION, document_tokens, query_tokens

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
CREATE TABLE IF NOT EXISTS vectors (chunk_id INTEGER PRIMARY KEY, vector BLOB NOT NULL);
"""

VECTOR_DTYPE = np.dtype("<f2")


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


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    # The open keyword block takes random inserts; a 2 MiB default cache made them page-bound.
    conn.execute("PRAGMA cache_size = -65536")
    return conn


class Database:
    """A search database file; safe to share between the indexer and searching threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer = _connect(path)
        self._write_lock = threading.Lock()
        self.keywords = keyword.KeywordIndex()
        self._staged = keyword.Staged()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        with self._write_lock:
            self._writer.executescript(SCHEMA + keyword.SCHEMA)
        self._check_tokenizer()
        with self.snapshot() as conn:
            self.keywords.load(conn, document_tokens)

    def close(self) -> None:
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        self._writer.close()

    # -- plumbing -------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock:
            self._staged = keyword.Staged()
            self._writer.execute("BEGIN IMMEDIATE")
            try:
                yield self._writer
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            with self.keywords.lock:
                self._writer.execute("COMMIT")
                self.keywords.apply(self._staged)

    @contextmanager
    def snapshot(self, keyword_tokens: Sequence[str] = ()) -> Iterator[sqlite3.Connection]:
        """A read transaction on this thread's own connection.

        With `keyword_tokens`, the keyword tail postings of the same moment are copied to
        `self._tail` (thread-local) while the snapshot is pinned by its first read.
        """
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self.path)
            conn.execute("PRAGMA query_only = 1")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        if keyword_tokens:
            with self.keywords.lock:
                conn.execute("BEGIN")
                conn.execute("SELECT 1 FROM meta LIMIT 1").fetchall()
                self._local.tail = self.keywords.tail_ids(keyword_tokens)
        else:
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
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def _check_tokenizer(self) -> None:
        """Re-index keywords from the stored chunk text if the tokeniser changed."""
        stored = self.get_meta("tokenizer_version")
        if stored == str(TOKENIZER_VERSION):
            return
        with self.transaction() as conn:
            conn.execute("DELETE FROM kw_block")
            conn.execute("DELETE FROM meta WHERE key = 'kw_sealed_below'")
            rows = conn.execute("SELECT id, content FROM chunks WHERE active = 1 ORDER BY id")
            # Everything goes through the tail and is sealed segment by segment on the way.
            self.keywords.add(
                conn, self._staged, [(cid, document_tokens(text)) for cid, text in rows.fetchall()]
            )
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('tokenizer_version', ?)",
                (str(TOKENIZER_VERSION),),
            )

    # -- writes (indexer only) ------------------------------------------------------------------

    def _retire(self, conn: sqlite3.Connection, source: str) -> list[int]:
        old = conn.execute(
            "SELECT id, content FROM chunks WHERE source = ? AND active = 1", (source,)
        ).fetchall()
        if old:
            self.keywords.remove(
                conn, self._staged, [(cid, document_tokens(text)) for cid, text in old]
            )
            ids = [(cid,) for cid, _ in old]
            conn.executemany("UPDATE chunks SET active = 0 WHERE id = ?", ids)
            conn.executemany("DELETE FROM vectors WHERE chunk_id = ?", ids)
        return [cid for cid, _ in old]

    def replace_document(
        self, source: str, state: DocumentState, chunks: Sequence[str]
    ) -> tuple[list[int], list[int]]:
        """Swap a file's chunks for new ones in one transaction: (new ids, retired ids)."""
        with self.transaction() as conn:
            retired = self._retire(conn, source)
            new_ids = []
            for number, content in enumerate(chunks):
                cursor = conn.execute(
                    "INSERT INTO chunks (source, chunk, content) VALUES (?, ?, ?)",
                    (source, number, content),
                )
                assert cursor.lastrowid is not None
                new_ids.append(cursor.lastrowid)
            self.keywords.add(
                conn,
                self._staged,
                [(cid, document_tokens(text)) for cid, text in zip(new_ids, chunks, strict=True)],
            )
            conn.execute(
                "INSERT OR REPLACE INTO documents (source, size, mtime_ns, sha256)"
                " VALUES (?, ?, ?, ?)",
                (source, state.size, state.mtime_ns, state.sha256),
            )
        return new_ids, retired

    def touch_document(self, source: str, state: DocumentState) -> None:
        """Record a new size or mtime for a file whose content did not change."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE documents SET size = ?, mtime_ns = ? WHERE source = ?",
                (state.size, state.mtime_ns, source),
            )

    def remove_document(self, source: str) -> list[int]:
        with self.transaction() as conn:
            retired = self._retire(conn, source)
            conn.execute("DELETE FROM documents WHERE source = ?", (source,))
        return retired

    def store_vectors(self, vectors: Sequence[tuple[int, np.ndarray]]) -> list[int]:
        """Store vectors of chunks that are still active; returns the ids stored."""
        with self.transaction() as conn:
            stored = []
            for chunk_id, vector in vectors:
                active = conn.execute(
                    "SELECT 1 FROM chunks WHERE id = ? AND active = 1", (chunk_id,)
                ).fetchone()
                if active:
                    conn.execute(
                        "INSERT OR REPLACE INTO vectors (chunk_id, vector) VALUES (?, ?)",
                        (chunk_id, np.asarray(vector, dtype=VECTOR_DTYPE).tobytes()),
                    )
                    stored.append(chunk_id)
        return stored

    def clear_vectors(self) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM vectors")

    # -- reads ----------------------------------------------------------------------------------

    def documents(self) -> dict[str, DocumentState]:
        with self.snapshot() as conn:
            rows = conn.execute("SELECT source, size, mtime_ns, sha256 FROM documents").fetchall()
        return {source: DocumentState(size, mtime, sha) for source, size, mtime, sha in rows}

    def unembedded(self) -> list[tuple[int, str]]:
        """Active chunks that have no vector yet (after a failure, or a provider change)."""
        with self.snapshot() as conn:
            return conn.execute(
                "SELECT c.id, c.content FROM chunks c LEFT JOIN vectors v ON v.chunk_id = c.id "
                "WHERE c.active = 1 AND v.chunk_id IS NULL ORDER BY c.id"
            ).fetchall()

    def all_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, vectors) of every stored vector, for rebuilding the vector index."""
        with self.snapshot() as conn:
            rows = conn.execute("SELECT chunk_id, vector FROM vectors ORDER BY chunk_id").fetchall()
        keys = np.array([r[0] for r in rows], dtype=np.uint64)
        if not rows:
            return keys, np.zeros((0, 0), dtype=np.float32)
        vectors = np.stack([np.frombuffer(r[1], dtype=VECTOR_DTYPE) for r in rows])
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

    @property
    def _tail(self) -> list[tuple[int, np.ndarray]]:
        return list(getattr(self._local, "tail", []))

    def keyword_search(self, query: str, limit: int) -> list[ChunkRow]:
        tokens = query_tokens(query)
        with self.snapshot(keyword_tokens=tokens) as conn:
            ids = self.keywords.search(conn, self._tail, tokens, limit)
            return self._fetch_active(conn, ids)

    def stats(self) -> tuple[int, int]:
        """(documents, active chunks)."""
        with self.snapshot() as conn:
            docs = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
            chunks = conn.execute("SELECT count(*) FROM chunks WHERE active = 1").fetchone()[0]
        return int(docs), int(chunks)
