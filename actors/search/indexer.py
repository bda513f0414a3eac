"""The indexer actor of one search database, and the inbox watcher that feeds it.

The actor decides, jobs do. It keeps the queue of sources to (re)process and runs two stages as
jobs, each one at a time:
- keyword: the queued sources, up to `KEYWORD_BATCH` at once, are offered to the keyword stage,
  which parses and writes them with their keyword postings in one transaction ending at the
  keyword index's block end (`Engine.index_batch`) and hands back those it did not reach: they
  go back to the head of the queue, where the next call finds them already being prepared.
  Each outcome is recorded as an event per document, paced (`EVENT_PACE`) so a large
  backlog's events do not crowd the queries answered meanwhile;
- embedding: the newest chunks without vectors, a provider batch at a time (`Engine.embed_next`),
  restarted as long as chunks wait.
The keyword stage never waits for embedding: its next batch starts as soon as the previous one
ends, and embedding runs beside it on low-priority threads. Every outcome the actor records can
be derived again from the database after a restart (its documents and chunks are the truth;
start-up reconciliation queues whatever changed since, and so does the rescan the actor runs
when it is started again after a failure). A batch that meets a full disk is not dismissed: it
is tried again after a pause, and so is an embedder that cannot store its vectors.

While either stage has work, a `search.progress` event is recorded at most once a second, and
once more when both are done; not paced, so it may come before the document events of the
files it counts.

The stream says what the database holds, also after a crash: events are recorded after their
commit (and paced), so a process killed in between leaves documents in the database that its
stream never mentioned, or mentions as they were. At start-up and after a failure the actor
compares the two (`_Healed`) and records what is missing: `document_indexed` (with `retired`
0: what it replaced is not known any more) for each document the stream does not say is
indexed as it is, and `document_removed` for each the stream still has that the database does
not. Sources queued for the keyword stage, or taken by it meanwhile, are left to their own
events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import attrs
import watchfiles

from actors.runtime import AggregateActor, Fenced
from actors.search import engine as eng
from actors.search import events
from actors.search.ingest import keyword_stage, watching
from actors.search.ingest.parsers import is_ignored
from actors.search.ingest.progress import Pipeline, Rate, Reporter
from events.errors import disk_full
from events.model import Event

log = logging.getLogger(__name__)

# Files offered to the keyword stage per call; it takes them up to the end of the keyword
# index's block (one transaction: ~1,600 files of 10 chunks) and prepares the rest for the next
# call, which must begin with a full block's worth for the two to overlap.
KEYWORD_BATCH = 4096
# Events are recorded at most this many at a time, this many seconds apart (~430 a second).
# Each costs the store, the outbox relay and the NATS server a fraction of a millisecond of the
# CPU the writer leaves; recorded as fast as block-sized calls index files (~1,600 per call),
# they put the keyword queries answered meanwhile at p99 25-27 ms (15 ms with no events at
# all). Paced, the events of a large backlog trail its indexing: 10,000 files were searchable
# after ~12 s and their events all recorded after ~23 s (ops/bench/search_ingest.py).
EVENTS_PER_APPEND = 128
EVENT_PACE = 0.3


@attrs.frozen
class SourcesChanged:
    sources: tuple[str, ...]


@attrs.frozen
class Reconciled:
    queued: int


@attrs.frozen
class _Indexed:
    sources: tuple[str, ...]
    report: Any  # IndexReport or the exception the job raised


@attrs.frozen
class _Embedded:
    report: Any  # EmbedReport, None (nothing left) or the exception the job raised


@attrs.frozen
class _Healed:
    """The database's documents (source -> (sha256, active chunks)), read to bring the stream
    up to date with them, or the exception the read raised."""

    documents: Any


@attrs.frozen
class _RecordMore:
    """The pause between two slices of a call's events is over."""


@attrs.frozen
class _Rescan:
    """After a failure: find what changed while the actor was down (its queue is gone)."""


@attrs.frozen
class _EmbedAgain:
    """The pause after a full disk stopped the embedder is over."""


# Sources whose indexing met a full disk are tried again after these pauses (then every 30 s).
FULL_DISK_PAUSES = (1.0, 2.0, 5.0, 10.0, 30.0)


class SearchIndexer(AggregateActor):
    aggregate = "search"

    def setup(self, **kwargs: Any) -> None:
        self.engine: eng.Engine = kwargs["engine"]
        self.clock: Callable[[], float] = kwargs.get("clock", time.monotonic)
        self.queue: dict[str, None] = {}
        self.pipeline = Pipeline()
        self.engine.pipeline = self.pipeline
        self.keyword_rate = Rate()
        self.embedding_rate = Rate()
        self.reporter = Reporter()
        # What the stream says is indexed: source -> sha256 of its last document_indexed.
        self.recorded: dict[str, str] = {}
        # Sources offered to the keyword stage since the stream's check began (None: none
        # under way): their own events tell the stream.
        self.touched: set[str] | None = None
        self.waiting_for_space: dict[str, int] = {}  # source -> tries so far
        self.embedder_waiting = 0  # tries of the embedder since the disk was full
        # Files of batches during which a keyword stage process died, offered
        # `suspects_limit` at a time.
        self.suspects: set[str] = set()
        self.suspects_limit = KEYWORD_BATCH
        # Events waiting for their slice; while any wait, a pause is under way.
        self.unrecorded: deque[Event] = deque()

    def apply(self, event: Event) -> None:
        if isinstance(event, events.DocumentIndexed):
            self.recorded[event.source] = event.sha256
        elif isinstance(event, (events.DocumentRemoved, events.DocumentDismissed)):
            self.recorded.pop(event.source, None)

    def handle(self, message: Any) -> Any:
        if isinstance(message, SourcesChanged):
            for source in message.sources:
                self.queue[source] = None
            self._next_keyword()
            return len(self.queue)
        if isinstance(message, _RecordMore):
            self._record_slice()
            return None
        if isinstance(message, Reconciled):
            self._record_paced(events.DatabaseReconciled(db=self.ident, queued=message.queued))
            self._check_stream()
            self._next_embedding()  # chunks left without vectors by the last run
            return None
        if isinstance(message, _Healed):
            self._heal(message.documents)
            return None
        if isinstance(message, _Indexed):
            self._indexed(message)
            return None
        if isinstance(message, _Embedded):
            self._embedded(message.report)
            return None
        if isinstance(message, _EmbedAgain):
            self._next_embedding()
            return None
        if isinstance(message, _Rescan):
            self._check_stream()
            self.start_job(
                asyncio.to_thread(self.engine.reconcile),
                done=lambda todo: SourcesChanged(tuple(todo)) if isinstance(todo, list) else None,
            )
            return None
        return None

    def recovery(self, reason: str) -> _Rescan:
        return _Rescan()

    def _retry_when_space(self, sources: tuple[str, ...]) -> None:
        """The disk is full: not a verdict on the files. Try them again later, not dismissed."""
        tries = max(self.waiting_for_space.get(source, 0) for source in sources)
        for source in sources:
            self.waiting_for_space[source] = tries + 1
        pause = FULL_DISK_PAUSES[min(tries, len(FULL_DISK_PAUSES) - 1)]
        if tries == 0:
            named = ", ".join(sources[:3]) + (
                f" and {len(sources) - 3} more" if len(sources) > 3 else ""
            )
            log.warning(
                "search %s: the disk is full; %s will be indexed once there is space",
                self.ident,
                named,
            )
        self.start_job(asyncio.sleep(pause), done=lambda _: SourcesChanged(sources), timer=True)

    # -- keyword stage --------------------------------------------------------------------------

    def _next_keyword(self) -> None:
        self.pipeline.queued = len(self.queue)
        if self.pipeline.indexing or not self.queue:
            return
        limit = self.suspects_limit if self.suspects else KEYWORD_BATCH
        sources = tuple(list(self.queue)[:limit])
        for source in sources:
            del self.queue[source]
        if self.touched is not None:
            self.touched.update(sources)
        self.pipeline.queued = len(self.queue)
        self.pipeline.indexing = True

        def done(report: Any) -> _Indexed:
            return _Indexed(sources, report)

        self.start_job(self.engine.index_batch(sources), done=done)

    def _indexed(self, message: _Indexed) -> None:
        self.pipeline.indexing = False
        report = message.report
        if isinstance(report, BaseException) and disk_full(report):
            self._retry_when_space(message.sources)
        elif isinstance(report, BrokenProcessPool):
            self._stage_process_died(message.sources, report)
        elif isinstance(report, BaseException):
            log.error("search %s: indexing failed: %r", self.ident, report)
            self._record_paced(
                *(
                    events.DocumentDismissed(
                        db=self.ident, source=source, reason=f"indexing failed: {report}"
                    )
                    for source in message.sources
                )
            )
        else:
            # Sources the writer did not reach go back to the head of the queue, in order (one
            # changed again meanwhile is already queued: it keeps one place).
            self.queue = {**dict.fromkeys(report.rest), **self.queue}
            for source in message.sources[: len(message.sources) - len(report.rest)]:
                self.waiting_for_space.pop(source, None)
                self.suspects.discard(source)
            self._record_paced(*(e for e in map(self._event_for, report.outcomes) if e is not None))
            self.keyword_rate.add(self.clock(), report.seconds, report.chunks)
            self.reporter.counts = report.progress
            if report.chunks:
                self._next_embedding()
        self._next_keyword()
        self._report()

    def _stage_process_died(self, sources: tuple[str, ...], error: BrokenProcessPool) -> None:
        """A keyword stage process (the preparer or the writer) died during this batch
        (killed, out of memory, a parser's crash): nothing of it was written, and the next
        batch starts a new one. A file that kills it each time must not take the others with
        it, and a kill from outside is no verdict on the files: the batch goes back to the
        head of the queue and is offered again in halves while any of its files is left, down
        to one file, which is then dismissed."""
        if len(sources) == 1:
            log.error("search %s: indexing %s: %s", self.ident, sources[0], error)
            self.suspects.discard(sources[0])
            reason = f"indexing failed: {error}"
            self._record_paced(
                events.DocumentDismissed(db=self.ident, source=sources[0], reason=reason)
            )
            return
        log.warning(
            "search %s: %s during a batch of %d files; offering them again in batches of %d",
            self.ident,
            error,
            len(sources),
            len(sources) // 2,
        )
        self.queue = {**dict.fromkeys(sources), **self.queue}
        self.suspects.update(sources)
        self.suspects_limit = len(sources) // 2

    def _event_for(self, outcome: keyword_stage.Outcome) -> Event | None:
        db = self.ident
        if isinstance(outcome, keyword_stage.Indexed):
            return events.DocumentIndexed(
                db=db,
                source=outcome.source,
                sha256=outcome.sha256,
                chunks=outcome.chunks,
                retired=outcome.retired,
            )
        if isinstance(outcome, keyword_stage.Removed):
            return events.DocumentRemoved(db=db, source=outcome.source, retired=outcome.retired)
        if isinstance(outcome, keyword_stage.Dismissed):
            return events.DocumentDismissed(db=db, source=outcome.source, reason=outcome.reason)
        return None

    # -- embedding stage ------------------------------------------------------------------------

    def _next_embedding(self) -> None:
        if self.pipeline.embedding or self.engine.provider is None:
            return
        self.pipeline.embedding = True
        self.start_job(self.engine.embed_next(), done=_Embedded)

    def _embedded(self, report: Any) -> None:
        self.pipeline.embedding = False
        if isinstance(report, BaseException) and disk_full(report):
            # Vectors wait for space like files do; the chunks stay queued.
            pause = FULL_DISK_PAUSES[min(self.embedder_waiting, len(FULL_DISK_PAUSES) - 1)]
            self.embedder_waiting += 1
            self.pipeline.embedding_error = str(report) or type(report).__name__
            self.start_job(asyncio.sleep(pause), done=lambda _: _EmbedAgain(), timer=True)
        elif isinstance(report, BaseException):
            # Not retried in a loop: new chunks or the next start try again.
            log.error("search %s: embedding failed: %r", self.ident, report)
            self.pipeline.embedding_error = str(report) or type(report).__name__
        elif isinstance(report, eng.EmbedReport):
            self.embedder_waiting = 0
            self.embedding_rate.add(self.clock(), report.seconds, report.embedded)
            self.reporter.counts = report.progress
            if report.error is not None:
                self.pipeline.embedding_error = report.error
            self._next_embedding()
        self._report()

    # -- the stream, as the database is ------------------------------------------------------

    def _check_stream(self) -> None:
        self.touched = set()
        self.start_job(asyncio.to_thread(self.engine.db.indexed), done=_Healed)

    def _heal(self, documents: Any) -> None:
        # Sources taken or still queued get their own events, telling the stream the same.
        skip, self.touched = (self.touched or set()) | set(self.queue), None
        if isinstance(documents, BaseException):
            log.error(
                "search %s: could not compare the stream with the database: %r",
                self.ident,
                documents,
            )
            return
        db = self.ident
        missing: list[Event] = [
            events.DocumentIndexed(db=db, source=source, sha256=sha, chunks=chunks, retired=0)
            for source, (sha, chunks) in sorted(documents.items())
            if source not in skip and self.recorded.get(source) != sha
        ]
        gone = [
            events.DocumentRemoved(db=db, source=source, retired=0)
            for source in sorted(self.recorded)
            if source not in documents and source not in skip
        ]
        if missing or gone:
            log.warning(
                "search %s: the stream lacked %d indexed and %d removed documents (the service"
                " stopped before recording them); recording them now",
                db,
                len(missing),
                len(gone),
            )
            self._record_paced(*missing, *gone)

    # -- progress -------------------------------------------------------------------------------

    def _report(self) -> None:
        now = self.clock()
        self.pipeline.keyword_rate = self.keyword_rate.per_second(now)
        self.pipeline.embedding_rate = self.embedding_rate.per_second(now)
        event = self.reporter.due(self.ident, self.pipeline, now)
        if event is not None:
            # At once, ahead of the paced document events: at most one a second costs nothing,
            # and a subscriber's progress bar then follows the database, not the pacing (it
            # trailed a 100,000-chunk drain by ~10 s).
            self.record(event)

    # -- recording, paced -----------------------------------------------------------------------

    def _record_paced(self, *recorded: Event) -> None:
        """Record `recorded` after the events already waiting, `EVENTS_PER_APPEND` at a time."""
        paused = bool(self.unrecorded)  # a pause is under way: its end records the next slice
        self.unrecorded.extend(recorded)
        if not paused:
            self._record_slice()

    def _record_slice(self) -> None:
        count = min(EVENTS_PER_APPEND, len(self.unrecorded))
        if count:
            self.record(*(self.unrecorded.popleft() for _ in range(count)))
        if self.unrecorded:
            self.start_job(asyncio.sleep(EVENT_PACE), done=lambda _: _RecordMore(), timer=True)

    def on_stop(self) -> None:
        # A graceful stop does not wait for the pause: what waits is recorded now.
        if self.unrecorded:
            with contextlib.suppress(Fenced):  # another host took over: not ours to record
                self.record(*self.unrecorded)
            self.unrecorded.clear()
        super().on_stop()


def sources_of(inbox: Path, changes: watching.Changes) -> tuple[str, ...]:
    """Inbox-relative sources touched by a batch of watchfiles changes (nothing outside it)."""
    out: dict[str, None] = {}
    root = inbox.resolve()
    for _, raw in changes:
        path = Path(raw)
        try:
            relative = path.relative_to(root) if path.is_absolute() else path
        except ValueError:
            continue
        posix = Path(relative).as_posix()
        if posix in ("", ".") or is_ignored(Path(posix)):  # type: ignore[arg-type]
            continue
        if path.is_dir():
            # A folder moved in or out: everything under it (moves report only the folder).
            for child in sorted(path.rglob("*")):
                if child.is_file():
                    out[child.relative_to(root).as_posix()] = None
            continue
        out[posix] = None
    return tuple(out)


async def watch(inbox: Path, handle: Any, stop: asyncio.Event, engine: eng.Engine) -> None:
    """Feed inbox changes to the indexer until `stop` is set (inotify, no polling loop)."""
    await asyncio.to_thread(inbox.mkdir, parents=True, exist_ok=True)
    root = await asyncio.to_thread(inbox.resolve)
    async for changes in watching.changes(root, stop):
        # A folder of thousands of files reports as many changes: sorted out off the loop.
        sources = await asyncio.to_thread(sources_of, root, changes)
        # A removed folder reports only itself: its indexed files must go too.
        gone_dirs = [Path(p) for c, p in changes if c == watchfiles.Change.deleted]
        if gone_dirs:
            known = await asyncio.to_thread(engine.db.documents)
            for folder in gone_dirs:
                try:
                    prefix = folder.relative_to(root).as_posix() + "/"
                except ValueError:
                    continue
                sources += tuple(s for s in known if s.startswith(prefix))
        if sources:
            await handle.tell(SourcesChanged(sources))
