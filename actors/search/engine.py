"""The work on one search database: reconcile, index batches of files, embed, search.

Two stages, as jobs the indexer actor starts:
- `index_batch` parses a batch of files and writes them, chunks and keyword postings, in one
  transaction per keyword block (`keyword_stage`): they are keyword-searchable at its commit.
  It runs in two processes of its own, one preparing the next batch while the other writes
  this one (`keyword_pipeline`): that stage is pure Python, and in this process it held the
  GIL against every query (tens of ms of p99 latency while a backlog drained) and could use
  only the core the event loop also needs;
- `embed_next` embeds the newest queued chunks, one provider batch at a time, and stores their
  vectors only if the chunks are still active (worker threads; the model releases the GIL).
The read paths (`keyword`, `semantic`) are what the HTTP service uses; they never wait for
either stage.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import attrs
import numpy as np

from actors.search.embed.embedding import EmbeddingError, Provider
from actors.search.embed.query_cache import QueryCache
from actors.search.events import IndexingProgress
from actors.search.index import fusion
from actors.search.index.stemming import DEFAULT_LANGUAGE
from actors.search.index.store import (
    MAX_WINDOWS,
    ChunkRow,
    Database,
    Progress,
    chunk_of,
    vector_key,
)
from actors.search.index.vectors import VectorIndex
from actors.search.ingest import keyword_pipeline, keyword_stage, parsers
from actors.search.ingest.chunker import CHUNKER_VERSION
from actors.search.ingest.progress import Pipeline, progress_event

log = logging.getLogger(__name__)

# Chunks per embedding call: enough for several passes per core of similar lengths, so the
# call's single-threaded part (tokenising) and its last pass weigh little. Measured on 2 cores
# (AMD EPYC, ONNX Runtime float32): 64 gave 141 chunks/s, 128 gave 157, 192 gave 159.
EMBED_BATCH = 128
# Chunks each branch of `target=hybrid` hands to the fusion (at least `limit`).
HYBRID_DEPTH = 100
IndexReport = keyword_stage.IndexReport


@attrs.frozen
class EmbedReport:
    """An embedding job's outcome: chunks stored and failed, and the counts after."""

    embedded: int
    failed: int
    seconds: float
    progress: Progress
    error: str | None = None


class Engine:
    def __init__(
        self,
        name: str,
        directory: Path,
        inbox: Path,
        provider: Provider | None,
        cache: QueryCache | None,
        language: str = DEFAULT_LANGUAGE,
    ) -> None:
        self.name = name
        self.inbox = inbox
        self.provider = provider
        self.cache = cache
        directory.mkdir(parents=True, exist_ok=True)
        self.db = Database(directory / "index.sqlite")
        self.db.set_language(language)
        # The keyword stage's processes (started with the first batch).
        self.indexing = keyword_pipeline.Pipeline(self.db.path, inbox, name)
        self.vectors = VectorIndex(directory / "vectors.usearch")
        # Replaced by the indexer actor's own when it starts; read by `status`.
        self.pipeline = Pipeline()

    def status(self) -> IndexingProgress:
        """Where both stages stand now (blocking: counts rows)."""
        return progress_event(self.name, self.db.progress(), self.pipeline)

    @property
    def fingerprint(self) -> str:
        return self.provider.fingerprint if self.provider else "none"

    def open_vectors(self) -> None:
        """Load or rebuild the vector index; forget vectors of another provider, and queue
        again the chunks whose embedding failed last time."""
        if self.db.get_meta("chunker_version") != str(CHUNKER_VERSION):
            # Chunks cut by another chunker: every file is indexed again (reconcile sees them
            # all as changed).
            self.db.forget_all_documents()
            self.db.set_meta("chunker_version", str(CHUNKER_VERSION))
        if self.db.get_meta("embedding_fingerprint") != self.fingerprint:
            self.db.requeue_all()
            self.db.set_meta("embedding_fingerprint", self.fingerprint)
        self.db.retry_failed()
        keys, vectors = self.db.all_vectors()
        if self.vectors.load_or_rebuild(self.fingerprint, keys, vectors):
            log.info("search %s: vector index rebuilt (%d vectors)", self.name, len(keys))

    def close(self) -> None:
        self.indexing.close()
        if self.vectors.dirty:
            self.vectors.save(self.fingerprint)
        self.db.close()

    # -- the keyword stage ----------------------------------------------------------------------

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

    async def index_batch(self, sources: Sequence[str]) -> IndexReport:
        """Run the keyword stage for `sources` in its processes, then drop the vectors of the
        chunks it retired from the vector index."""
        report = await self.indexing.index(sources)
        if report.dropped_keys:
            await asyncio.to_thread(self._drop_vectors, report.dropped_keys)
        return report

    def _drop_vectors(self, keys: list[int]) -> None:
        # Under the lock the embedder holds from its vectors' commit until they are in the
        # vector index, so vectors it stored before the retirement are there to be removed.
        with self.db.write_lock:
            self.vectors.remove(keys)

    # -- the embedding stage --------------------------------------------------------------------

    async def embed_next(self, limit: int = EMBED_BATCH) -> EmbedReport | None:
        """Embed the newest queued chunks; None when nothing is queued (or no provider)."""
        if self.provider is None:
            return None
        started = time.perf_counter()
        batch = await asyncio.to_thread(self.db.pending, limit)
        if not batch:
            return None
        error: str | None = None
        try:
            pairs = await self._embed(batch)
        except EmbeddingError as exc:
            # One bad chunk costs only itself: the batch is retried chunk by chunk.
            error = str(exc)
            pairs = []
            for one in batch:
                try:
                    pairs.extend(await self._embed([one]))
                except EmbeddingError as single:
                    error = str(single)
                    log.warning("search %s: chunk %d not embedded: %s", self.name, one[0], single)
        embedded = {chunk_id for chunk_id, _ in pairs}
        failed = [chunk_id for chunk_id, _ in batch if chunk_id not in embedded]
        stored = await asyncio.to_thread(self._store, pairs, failed)
        progress = await asyncio.to_thread(self.db.progress)
        return EmbedReport(stored, len(failed), time.perf_counter() - started, progress, error)

    async def _embed(self, batch: Sequence[tuple[int, str]]) -> list[tuple[int, np.ndarray]]:
        assert self.provider is not None
        windows = await self.provider.embed_chunks([text for _, text in batch])
        out = []
        for (chunk_id, _), vectors in zip(batch, windows, strict=True):
            if len(vectors) > MAX_WINDOWS:
                log.warning(
                    "search %s: chunk %d keeps %d of its %d windows",
                    self.name,
                    chunk_id,
                    MAX_WINDOWS,
                    len(vectors),
                )
            out.append((chunk_id, vectors[:MAX_WINDOWS]))
        return out

    def _store(self, pairs: list[tuple[int, np.ndarray]], failed: list[int]) -> int:
        with self.db.write_lock:
            stored = set(self.db.store_vectors(pairs))
            kept = [(i, v) for i, v in pairs if i in stored]
            if kept:
                keys = [vector_key(i, w) for i, v in kept for w in range(len(v))]
                self.vectors.add(keys, np.concatenate([v for _, v in kept]))
            if failed:
                self.db.mark_failed(failed)
        return len(kept)

    def save_vectors_if_settled(self) -> None:
        """Save the vector index once its changes have settled (`vectors.SETTLE_SECONDS`)."""
        if self.vectors.settled():
            self.vectors.save(self.fingerprint)

    # -- reads ----------------------------------------------------------------------------------

    async def keyword(self, query: str, limit: int) -> list[ChunkRow]:
        return await asyncio.to_thread(self.db.keyword_search, query, limit)

    async def query_vector(self, query: str) -> np.ndarray:
        if self.provider is None:
            raise EmbeddingError("no embedding provider is configured (EMBEDDING_PROVIDER=none)")
        # The cache is SQLite: off the loop, where a write or a checkpoint cannot hold up
        # the other requests (on the loop, a full cache stalled them 140 ms now and then).
        if self.cache is not None:
            cached = await asyncio.to_thread(self.cache.get, self.fingerprint, query)
            if cached is not None:
                return cached
        vector = await self.provider.embed_query(query)
        if self.cache is not None:
            await asyncio.to_thread(self.cache.put, self.fingerprint, query, vector)
        return vector

    def _semantic_rows(self, vector: np.ndarray, limit: int) -> list[tuple[ChunkRow, float]]:
        count = max(limit * 2, 20)
        while True:
            hits = self.vectors.search(vector, count)
            # A chunk has a vector per window: it ranks by its best one.
            best: dict[int, float] = {}
            for key, score in hits:
                best.setdefault(chunk_of(key), score)
            rows = self.db.fetch_active(list(best))
            # Hits stop at the cut-off or at the index size; ask for more only if neither
            # happened and inactive rows or several windows left us short.
            if len(rows) >= limit or len(hits) < count or count >= len(self.vectors):
                return [(row, best[row.id]) for row in rows[:limit]]
            count *= 4

    async def semantic(self, query: str, limit: int) -> list[ChunkRow]:
        return [row for row, _ in await self.semantic_scored(query, limit)]

    async def semantic_scored(self, query: str, limit: int) -> list[tuple[ChunkRow, float]]:
        """The semantic branch with each chunk's cosine (its best window's)."""
        vector = await self.query_vector(query)
        return await asyncio.to_thread(self._semantic_rows, vector, limit)

    async def bm25(self, query: str, limit: int, *, typo: bool = False) -> list[ChunkRow]:
        """The keyword branch ranked by BM25 (`rank=bm25`), with one typo per long word
        forgiven if `typo` (`typo=1`)."""
        return [row for row, _ in await self.bm25_scored(query, limit, typo=typo)]

    async def bm25_scored(
        self, query: str, limit: int, *, typo: bool = False
    ) -> list[tuple[ChunkRow, float]]:
        return await asyncio.to_thread(
            functools.partial(self.db.bm25_search, query, limit, typo=typo)
        )

    async def hybrid(self, query: str, limit: int, *, typo: bool = False) -> list[ChunkRow]:
        """BM25 and semantic fused (`fusion.convex`): each branch's best `HYBRID_DEPTH`
        chunks (or `limit`, if more), fused, the best `limit` kept. Without an embedding
        provider it is BM25 alone. `typo` as in `bm25`."""
        return [row for row, _ in await self.hybrid_scored(query, limit, typo=typo)]

    async def hybrid_scored(
        self, query: str, limit: int, *, typo: bool = False
    ) -> list[tuple[ChunkRow, float]]:
        """`hybrid` with each chunk's fused score (0-1; BM25's share alone without an
        embedding provider)."""
        depth = max(limit, HYBRID_DEPTH)
        if self.provider is None:
            alone = await self.bm25_scored(query, limit, typo=typo)
            share = dict(fusion.convex_scored([(row.id, score) for row, score in alone], []))
            return [(row, share[row.id]) for row, _ in alone]
        keyword, semantic = await asyncio.gather(
            self.bm25_scored(query, depth, typo=typo), self.semantic_scored(query, depth)
        )
        rows = {row.id: row for row, _ in [*keyword, *semantic]}
        fused = fusion.convex_scored(
            [(row.id, score) for row, score in keyword],
            [(row.id, score) for row, score in semantic],
        )
        return [(rows[chunk_id], score) for chunk_id, score in fused[:limit]]

    async def closest(self, query: str) -> float | None:
        """The cosine of the chunk nearest to `query` by meaning, cut-off or not (None with
        no vectors): how far a search that found nothing by meaning was from finding."""
        vector = await self.query_vector(query)
        return await asyncio.to_thread(self.vectors.nearest, vector)
