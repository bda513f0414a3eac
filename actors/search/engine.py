"""The work on one search database: reconcile, index batches of files, embed, search.

Two stages, as jobs the indexer actor starts (blocking parts run in worker threads):
- `index_batch` parses a batch of files and writes them, chunks and keyword postings, in as few
  transactions as memory allows: they are keyword-searchable at each commit;
- `embed_next` embeds the newest queued chunks, one provider batch at a time, and stores their
  vectors only if the chunks are still active.
The read paths (`keyword`, `semantic`) are what the HTTP service uses; they never wait for
either stage.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import attrs
import numpy as np

from actors.search import parsers
from actors.search.chunker import CHUNKER_VERSION, chunk_text
from actors.search.embedding import EmbeddingError, Provider
from actors.search.events import IndexingProgress
from actors.search.progress import Pipeline, progress_event
from actors.search.query_cache import QueryCache
from actors.search.store import (
    MAX_WINDOWS,
    Change,
    ChunkRow,
    Database,
    DocumentState,
    Progress,
    Remove,
    Replace,
    Touch,
    chunk_of,
    vector_key,
)
from actors.search.vectors import VectorIndex

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 50 * 1024 * 1024
# Chunks per embedding call: enough for one batch per core of similar lengths.
EMBED_BATCH = 64
# A keyword transaction is written once this much parsed text or this many chunks wait, so a
# backlog's memory stays bounded and the first files are searchable early.
FLUSH_CHUNKS = 4096
FLUSH_BYTES = 16 * 1024 * 1024


@attrs.frozen
class Indexed:
    source: str
    sha256: str
    chunks: int
    retired: int


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


@attrs.frozen
class IndexReport:
    """A keyword job's outcome: one per source, and the counts after its last commit."""

    outcomes: list[Outcome]
    chunks: int
    seconds: float
    progress: Progress


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
    ) -> None:
        self.name = name
        self.inbox = inbox
        self.provider = provider
        self.cache = cache
        directory.mkdir(parents=True, exist_ok=True)
        self.db = Database(directory / "index.sqlite")
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

    def _prepare(self, source: str) -> tuple[Change, Outcome | None, int]:
        """What to write for `source`, its outcome when already known, and its text size."""
        relative = PurePosixPath(source)
        path = self.source_path(source)
        if parsers.is_ignored(relative) or path.is_symlink() or not path.is_file():
            return Remove(source), None, 0
        stat = path.stat()
        if stat.st_size > MAX_FILE_BYTES:
            return Remove(source), Dismissed(source, f"larger than {MAX_FILE_BYTES} bytes"), 0
        data = path.read_bytes()
        state = DocumentState(stat.st_size, stat.st_mtime_ns, hashlib.sha256(data).hexdigest())
        known = self.db.document(source)
        if known is not None and known.sha256 == state.sha256:
            return Touch(source, state), Unchanged(source), 0
        try:
            text = parsers.parse(path, data)
        except (parsers.UnsupportedFormat, parsers.ParseError) as exc:
            return Remove(source), Dismissed(source, str(exc)), 0
        return Replace(source, state, chunk_text(text)), None, len(text)

    def _write(self, changes: list[Change], known: list[Outcome | None]) -> list[Outcome]:
        # The vector index changes under the same lock as the rows, so an embedder storing
        # vectors at the same moment either sees the chunks retired or has its vectors dropped.
        with self.db.write_lock:
            written = self.db.write(changes)
            self.vectors.remove([k for w in written for k in w.dropped_keys])
        out: list[Outcome] = []
        for change, result, outcome in zip(changes, written, known, strict=True):
            if outcome is not None:
                out.append(outcome)
            elif isinstance(change, Replace):
                out.append(
                    Indexed(
                        change.source, change.state.sha256, len(change.chunks), len(result.retired)
                    )
                )
            elif result.known:
                out.append(Removed(change.source, len(result.retired)))
            else:
                out.append(Unchanged(change.source))
        return out

    def index(self, sources: Sequence[str]) -> IndexReport:
        """Bring `sources` up to date (index, re-index, remove or dismiss each), committing
        every `FLUSH_CHUNKS` chunks or `FLUSH_BYTES` of text. Blocking."""
        started = time.perf_counter()
        outcomes: list[Outcome] = []
        changes: list[Change] = []
        known: list[Outcome | None] = []
        chunks = size = total = 0
        for source in sources:
            try:
                change, outcome, text_size = self._prepare(source)
            except OSError as exc:
                change, outcome, text_size = (
                    Remove(source),
                    Dismissed(source, f"unreadable: {exc}"),
                    0,
                )
            changes.append(change)
            known.append(outcome)
            if isinstance(change, Replace):
                chunks += len(change.chunks)
            size += text_size
            if chunks >= FLUSH_CHUNKS or size >= FLUSH_BYTES:
                outcomes += self._write(changes, known)
                total += chunks
                changes, known, chunks, size = [], [], 0, 0
        if changes:
            outcomes += self._write(changes, known)
            total += chunks
        for outcome in outcomes:
            if isinstance(outcome, Dismissed):
                log.info("search %s: skipped %s: %s", self.name, outcome.source, outcome.reason)
        return IndexReport(outcomes, total, time.perf_counter() - started, self.db.progress())

    async def index_batch(self, sources: Sequence[str]) -> IndexReport:
        return await asyncio.to_thread(self.index, sources)

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
            # A chunk has a vector per window: it ranks by its best one.
            chunk_ids = list(dict.fromkeys(chunk_of(key) for key, _ in hits))
            rows = self.db.fetch_active(chunk_ids)
            # Hits stop at the cut-off or at the index size; ask for more only if neither
            # happened and inactive rows or several windows left us short.
            if len(rows) >= limit or len(hits) < count or count >= len(self.vectors):
                return rows[:limit]
            count *= 4

    async def semantic(self, query: str, limit: int) -> list[ChunkRow]:
        vector = await self.query_vector(query)
        return await asyncio.to_thread(self._semantic_rows, vector, limit)
