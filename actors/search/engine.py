"""The work on one search database: reconcile, index or remove a file, embed, search.

The indexer actor decides what to do next; the methods here are the jobs it starts (blocking
parts run in worker threads) and the read paths the HTTP service uses.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import attrs
import numpy as np

from actors.search import parsers
from actors.search.chunker import chunk_text
from actors.search.embedding import EmbeddingError, Provider
from actors.search.query_cache import QueryCache
from actors.search.store import ChunkRow, Database, DocumentState
from actors.search.vectors import VectorIndex

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 50 * 1024 * 1024
EMBED_BATCH = 16


@attrs.frozen
class Indexed:
    source: str
    sha256: str
    chunks: int
    embedded: int
    retired: int
    embedding_error: str | None = None


@attrs.frozen
class Removed:
    source: str
    retired: int


@attrs.frozen
class Dismissed:
    source: str
    reason: str


@attrs.frozen
class Unchanged:
    source: str


Outcome = Indexed | Removed | Dismissed | Unchanged


class Engine:
    def __init__(
        self,
        name: str,
        directory: Path,
        inbox: Path,
        provider: Provider | None,
        cache: QueryCache | None,
    ) -> None:
        self.name = name
        self.inbox = inbox
        self.provider = provider
        self.cache = cache
        directory.mkdir(parents=True, exist_ok=True)
        self.db = Database(directory / "index.sqlite")
        self.vectors = VectorIndex(directory / "vectors.usearch")

    @property
    def fingerprint(self) -> str:
        return self.provider.fingerprint if self.provider else "none"

    def open_vectors(self) -> None:
        """Load or rebuild the vector index; forget vectors of another provider."""
        if self.db.get_meta("embedding_fingerprint") != self.fingerprint:
            self.db.clear_vectors()
            self.db.set_meta("embedding_fingerprint", self.fingerprint)
        keys, vectors = self.db.all_vectors()
        if self.vectors.load_or_rebuild(self.fingerprint, keys, vectors):
            log.info("search %s: vector index rebuilt (%d vectors)", self.name, len(keys))

    def close(self) -> None:
        if self.vectors.dirty:
            self.vectors.save(self.fingerprint)
        self.db.close()

    # -- indexing -------------------------------------------------------------------------------

    def source_path(self, source: str) -> Path:
        return self.inbox / source

    def reconcile(self) -> list[str]:
        """Sources whose file changed, appeared or vanished since they were indexed."""
        known = self.db.documents()
        todo: list[str] = []
        seen: set[str] = set()
        for relative, path in parsers.iter_inbox(self.inbox):
            source = str(relative)
            seen.add(source)
            stat = path.stat()
            state = known.get(source)
            if state is None or (state.size, state.mtime_ns) != (stat.st_size, stat.st_mtime_ns):
                todo.append(source)
        todo.extend(sorted(set(known) - seen))
        return todo

    def _prepare(self, source: str) -> Outcome | tuple[DocumentState, list[str]]:
        relative = PurePosixPath(source)
        path = self.source_path(source)
        if parsers.is_ignored(relative) or path.is_symlink() or not path.is_file():
            retired = self.db.remove_document(source)
            self.vectors.remove(retired)
            return (
                Removed(source, len(retired))
                if retired or source in self.db.documents()
                else Unchanged(source)
            )
        stat = path.stat()
        if stat.st_size > MAX_FILE_BYTES:
            self._forget(source)
            return Dismissed(source, f"larger than {MAX_FILE_BYTES} bytes")
        data = path.read_bytes()
        state = DocumentState(stat.st_size, stat.st_mtime_ns, hashlib.sha256(data).hexdigest())
        known = self.db.documents().get(source)
        if known is not None and known.sha256 == state.sha256:
            self.db.touch_document(source, state)
            return Unchanged(source)
        try:
            text = parsers.parse(path, data)
        except (parsers.UnsupportedFormat, parsers.ParseError) as exc:
            self._forget(source)
            return Dismissed(source, str(exc))
        return state, chunk_text(text)

    def _forget(self, source: str) -> None:
        self.vectors.remove(self.db.remove_document(source))

    async def process(self, source: str) -> Outcome:
        """Bring one source up to date: index, re-index, remove or dismiss it."""
        prepared = await asyncio.to_thread(self._prepare, source)
        if not isinstance(prepared, tuple):
            if isinstance(prepared, Dismissed):
                log.info("search %s: skipped %s: %s", self.name, source, prepared.reason)
            return prepared
        state, chunks = prepared
        new_ids, retired = await asyncio.to_thread(self.db.replace_document, source, state, chunks)
        self.vectors.remove(retired)
        embedded, error = await self.embed(list(zip(new_ids, chunks, strict=True)))
        return Indexed(source, state.sha256, len(chunks), embedded, len(retired), error)

    async def embed(self, chunks: Sequence[tuple[int, str]]) -> tuple[int, str | None]:
        """Embed and store vectors; a failing batch is retried chunk by chunk so one bad chunk
        costs only itself. Returns (vectors stored, last error)."""
        if self.provider is None or not chunks:
            return 0, None
        stored = 0
        error: str | None = None
        for start in range(0, len(chunks), EMBED_BATCH):
            batch = list(chunks[start : start + EMBED_BATCH])
            try:
                pairs = await self._embed_batch(batch)
            except EmbeddingError as exc:
                pairs = []
                for one in batch:
                    try:
                        pairs.extend(await self._embed_batch([one]))
                    except EmbeddingError as single:
                        error = str(single)
                        log.warning(
                            "search %s: chunk %d not embedded: %s", self.name, one[0], single
                        )
                if not pairs:
                    error = str(exc)
            ids = await asyncio.to_thread(self.db.store_vectors, pairs)
            keep = set(ids)
            kept = [(i, v) for i, v in pairs if i in keep]
            if kept:
                self.vectors.add([i for i, _ in kept], np.stack([v for _, v in kept]))
            stored += len(kept)
        return stored, error

    async def _embed_batch(self, batch: Sequence[tuple[int, str]]) -> list[tuple[int, np.ndarray]]:
        assert self.provider is not None
        vectors = await self.provider.embed_documents([text for _, text in batch])
        return [(chunk_id, vectors[i]) for i, (chunk_id, _) in enumerate(batch)]

    async def embed_missing(self) -> int:
        """Embed active chunks without a vector (earlier failures, a new provider)."""
        missing = await asyncio.to_thread(self.db.unembedded)
        stored, _ = await self.embed(missing)
        return stored

    def save_vectors_if_dirty(self) -> None:
        if self.vectors.dirty:
            self.vectors.save(self.fingerprint)

    # -- reads ----------------------------------------------------------------------------------

    async def keyword(self, query: str, limit: int) -> list[ChunkRow]:
        return await asyncio.to_thread(self.db.keyword_search, query, limit)

    async def query_vector(self, query: str) -> np.ndarray:
        if self.provider is None:
            raise EmbeddingError("no embedding provider is configured (EMBEDDING_PROVIDER=none)")
        if self.cache is not None:
            cached = self.cache.get(self.fingerprint, query)
            if cached is not None:
                return cached
        vector = await self.provider.embed_query(query)
        if self.cache is not None:
            self.cache.put(self.fingerprint, query, vector)
        return vector

    def _semantic_rows(self, vector: np.ndarray, limit: int) -> list[ChunkRow]:
        count = max(limit * 2, 20)
        while True:
            hits = self.vectors.search(vector, count)
            rows = self.db.fetch_active([key for key, _ in hits])
            # Hits stop at the cut-off or at the index size; ask for more only if neither
            # happened and inactive rows left us short.
            if len(rows) >= limit or len(hits) < count or count >= len(self.vectors):
                return rows[:limit]
            count *= 4

    async def semantic(self, query: str, limit: int) -> list[ChunkRow]:
        vector = await self.query_vector(query)
        return await asyncio.to_thread(self._semantic_rows, vector, limit)
