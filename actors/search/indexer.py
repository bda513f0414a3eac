"""The indexer actor of one search database, and the inbox watcher that feeds it.

The actor decides, jobs do: it keeps the queue of sources to (re)process and starts one job at a
time (`Engine.process`); each outcome comes back as a message and is recorded as an event, which
is stored and then published on NATS. A change reported while a job runs only joins the queue.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import attrs
import watchfiles

from actors.runtime import AggregateActor
from actors.search import engine as eng
from actors.search import events
from actors.search.parsers import is_ignored
from events.errors import disk_full
from events.model import Event

log = logging.getLogger(__name__)


@attrs.frozen
class SourcesChanged:
    sources: tuple[str, ...]


@attrs.frozen
class Reconciled:
    queued: int


@attrs.frozen
class _Done:
    source: str
    outcome: Any


@attrs.frozen
class _Embedded:
    count: Any


@attrs.frozen
class _Rescan:
    """After a failure: find what changed while the actor was down (its queue is gone)."""


# A source whose indexing met a full disk is tried again after these pauses (then every 30 s).
FULL_DISK_PAUSES = (1.0, 2.0, 5.0, 10.0, 30.0)


class SearchIndexer(AggregateActor):
    aggregate = "search"

    def setup(self, **kwargs: Any) -> None:
        self.engine: eng.Engine = kwargs["engine"]
        self.queue: dict[str, None] = {}
        self.busy = False
        self.documents = 0
        self.waiting_for_space: dict[str, int] = {}  # source -> tries so far

    def apply(self, event: Event) -> None:
        if isinstance(event, events.DocumentIndexed):
            self.documents += 1

    def handle(self, message: Any) -> Any:
        if isinstance(message, SourcesChanged):
            for source in message.sources:
                self.queue[source] = None
            self._next()
            return len(self.queue)
        if isinstance(message, Reconciled):
            self.record(events.DatabaseReconciled(db=self.ident, queued=message.queued))
            return None
        if isinstance(message, _Done):
            self.busy = False
            if isinstance(message.outcome, BaseException) and disk_full(message.outcome):
                self._retry_when_space(message.source)
            else:
                self.waiting_for_space.pop(message.source, None)
                event = self._event_for(message.source, message.outcome)
                if event is not None:
                    self.record(event)
            self._next()
            return None
        if isinstance(message, _Rescan):
            self.start_job(
                asyncio.to_thread(self.engine.reconcile),
                done=lambda todo: SourcesChanged(tuple(todo)) if isinstance(todo, list) else None,
            )
            return None
        return None

    def recovery(self, reason: str) -> _Rescan:
        return _Rescan()

    def _retry_when_space(self, source: str) -> None:
        """The disk is full: not a verdict on the file. Try it again later, not dismissed."""
        tries = self.waiting_for_space.get(source, 0)
        self.waiting_for_space[source] = tries + 1
        pause = FULL_DISK_PAUSES[min(tries, len(FULL_DISK_PAUSES) - 1)]
        if tries == 0:
            log.warning(
                "search %s: the disk is full; %s will be indexed once there is space",
                self.ident, source,
            )  # fmt: skip
        self.start_job(asyncio.sleep(pause), done=lambda _: SourcesChanged((source,)), timer=True)

    def _event_for(self, source: str, outcome: Any) -> Event | None:
        db = self.ident
        if isinstance(outcome, BaseException):
            log.error("search %s: indexing %s failed: %r", db, source, outcome)
            return events.DocumentDismissed(
                db=db, source=source, reason=f"indexing failed: {outcome}"
            )
        if isinstance(outcome, eng.Indexed):
            return events.DocumentIndexed(
                db=db,
                source=source,
                sha256=outcome.sha256,
                chunks=outcome.chunks,
                embedded=outcome.embedded,
                retired=outcome.retired,
                embedding_error=outcome.embedding_error,
            )
        if isinstance(outcome, eng.Removed):
            return events.DocumentRemoved(db=db, source=source, retired=outcome.retired)
        if isinstance(outcome, eng.Dismissed):
            return events.DocumentDismissed(db=db, source=source, reason=outcome.reason)
        return None

    def _next(self) -> None:
        if self.busy or not self.queue:
            return
        source = next(iter(self.queue))
        del self.queue[source]
        self.busy = True

        def done(result: Any) -> _Done:
            return _Done(source, result)

        self.start_job(self.engine.process(source), done=done)


def sources_of(inbox: Path, changes: set[tuple[watchfiles.Change, str]]) -> tuple[str, ...]:
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
    async for changes in watchfiles.awatch(root, stop_event=stop, debounce=50, step=20):
        sources = sources_of(root, changes)
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
