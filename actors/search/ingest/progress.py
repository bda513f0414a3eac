"""Progress of a search database's two stages: what the indexer actor knows (`Pipeline`), the
rates it measures (`Rate`), and the `search.progress` event that combines them with the
database's counts. The same event is what `GET /api/status` returns."""

from __future__ import annotations

from collections import deque

import attrs

from actors.search import events
from actors.search.index.store import Progress

RATE_WINDOW = 5.0
# While a stage is busy, at most one progress event per this many seconds.
PROGRESS_INTERVAL = 1.0


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


class Reporter:
    """When the indexer records a progress event: while a stage is busy at most once per
    `PROGRESS_INTERVAL`, at once when both stages are done, and never twice the same.

    The move to idle is news even when no new counts came with it: the embedding stage's
    last job finds nothing left and reports nothing, and a report sent just before it said
    "embedding" (seen: a database that had embedded every chunk stayed "embedding" in the
    console, its last event 38 s old)."""

    def __init__(self) -> None:
        self.counts: Progress | None = None
        self.last: events.IndexingProgress | None = None
        self.at = float("-inf")

    def due(self, db: str, pipeline: Pipeline, now: float) -> events.IndexingProgress | None:
        """The event to record now, if any (and it is then taken as recorded)."""
        if self.counts is None:
            return None  # nothing known yet
        event = progress_event(db, self.counts, pipeline)
        if event == self.last:
            return None
        if pipeline.state != "idle" and now - self.at < PROGRESS_INTERVAL:
            return None
        self.last, self.at = event, now
        return event
