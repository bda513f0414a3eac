"""Progress of a search database's two stages: what the indexer actor knows (`Pipeline`), the
rates it measures (`Rate`), and the `search.progress` event that combines them with the
database's counts. The same event is what `GET /api/status` returns."""

from __future__ import annotations

from collections import deque

import attrs

from actors.search import events
from actors.search.store import Progress

RATE_WINDOW = 5.0


class Rate:
    """Chunks per second over the jobs that ended in the last `RATE_WINDOW` seconds."""

    def __init__(self) -> None:
        self._jobs: deque[tuple[float, float, int]] = deque()

    def add(self, ended: float, seconds: float, count: int) -> None:
        self._jobs.append((ended - seconds, ended, count))

    def per_second(self, now: float) -> float:
        while self._jobs and self._jobs[0][1] < now - RATE_WINDOW:
            self._jobs.popleft()
        if not self._jobs:
            return 0.0
        span = self._jobs[-1][1] - self._jobs[0][0]
        return sum(count for _, _, count in self._jobs) / span if span > 0 else 0.0


@attrs.define
class Pipeline:
    """What the actor knows about its stages, read by status requests (the actor is its only
    writer)."""

    queued: int = 0
    indexing: bool = False
    embedding: bool = False
    keyword_rate: float = 0.0
    embedding_rate: float = 0.0
    embedding_error: str | None = None

    @property
    def state(self) -> str:
        if self.queued or self.indexing:
            return "indexing"
        return "embedding" if self.embedding else "idle"


def progress_event(db: str, progress: Progress, pipeline: Pipeline) -> events.IndexingProgress:
    return events.IndexingProgress(
        db=db,
        state=pipeline.state,
        queued=pipeline.queued,
        documents=progress.documents,
        chunks=progress.chunks,
        embedded=progress.embedded,
        pending=progress.pending,
        failed=progress.failed,
        keyword_rate=round(pipeline.keyword_rate, 1),
        embedding_rate=round(pipeline.embedding_rate, 1),
        embedding_error=pipeline.embedding_error,
    )
