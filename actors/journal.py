"""The operator's journal: one log line per meaningful change, read off the stored events.

Every change in cairn is an event, so the journal needs no call in any actor: it listens to the
store's appends in this process (where the actors run) and turns the events an operator cares
about into one line each on the ``cairn.journal`` logger (a VM installed, failed, destroyed or
migrated; a function version stored; a document indexed or dismissed; an image stored or
deleted), naming who asked for it when the event knows (``, asked by ada``: the audit
trail's ``by``). Progress records, observations and allocator bookkeeping stay out: they are in the
task streams for whoever follows them.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from actors.functions.events import FunctionDeleted, FunctionVersionStored
from actors.images.events import ImageDeleted, ImageStored
from actors.search.events import (
    DocumentDismissed,
    DocumentIndexed,
    DocumentRemoved,
    IndexingProgress,
)
from actors.vm.events import (
    Adopted,
    Disowned,
    Installed,
    Reconfigured,
    TaskEnded,
    TaskStarted,
)
from events.model import Event
from events.store import EventStore, Recorded

log = logging.getLogger("cairn.journal")

_OPEN_TASKS_KEPT = 10_000


# More documents indexed in one append than this are one line.
BURST = 20


class Journal:
    """Attach with :meth:`attach`; :meth:`line` is the pure part (event in, line out)."""

    def __init__(self) -> None:
        # task id -> (command, started at): a task's end line says what ended and how long
        # it took. Bounded: a task whose start this process never saw still gets a line.
        self._tasks: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lines: dict[type[Event], Callable[[Recorded, Any], str | None]] = {
            TaskStarted: self._task_started,
            TaskEnded: self._task_ended,
            Installed: _installed,
            Reconfigured: _reconfigured,
            Adopted: _adopted,
            Disowned: _disowned,
            FunctionVersionStored: _function_stored,
            FunctionDeleted: _function_deleted,
            DocumentIndexed: _document_indexed,
            DocumentRemoved: _document_removed,
            DocumentDismissed: _document_dismissed,
            IndexingProgress: _indexing_progress,
            ImageStored: _image_stored,
            ImageDeleted: _image_deleted,
        }

    def attach(self, store: EventStore) -> None:
        store.add_listener(self._appended)

    def _appended(self, records: list[Recorded]) -> None:
        indexed = [r for r in records if isinstance(r.event, DocumentIndexed)]
        if len(indexed) > BURST:
            # A backlog's batch: one line for its files, not thousands (which also held the
            # event loop long enough to show in the queries' p99).
            first: DocumentIndexed = indexed[0].event  # type: ignore[assignment]
            chunks = sum(r.event.chunks for r in indexed)  # type: ignore[attr-defined]
            fields = {"stream": indexed[0].stream, "event": first.type_name}
            log.info(
                "search %s: indexed %d files (%d chunks), %s … %s",
                first.db,
                len(indexed),
                chunks,
                first.source,
                indexed[-1].event.source,  # type: ignore[attr-defined]
                extra=fields,
            )
            records = [r for r in records if not isinstance(r.event, DocumentIndexed)]
        for record in records:
            line = self.line(record)
            if line is not None:
                fields = {"stream": record.stream, "event": record.event.type_name}
                log.info("%s", line, extra=fields)

    def line(self, record: Recorded) -> str | None:
        describe = self._lines.get(type(record.event))
        return describe(record, record.event) if describe is not None else None

    def _task_started(self, record: Recorded, event: TaskStarted) -> str | None:
        self._tasks[event.task] = (event.command, record.recorded_at)
        while len(self._tasks) > _OPEN_TASKS_KEPT:
            self._tasks.popitem(last=False)
        if event.command == "install":
            return None  # the install's end says it all; its start is the request's log line
        return f"{_vm(record)}: {event.command} started (task {event.task})"

    def _task_ended(self, record: Recorded, event: TaskEnded) -> str:
        command, started = self._tasks.pop(event.task, ("task", record.recorded_at))
        took = _seconds(record.recorded_at - started)
        if event.ok:
            return f"{_vm(record)}: {command} done in {took}, now {event.state}"
        return f"{_vm(record)}: {command} failed after {took}, left {event.state}: {event.error}"


def _vm(record: Recorded) -> str:
    return "vm " + record.stream.partition(":")[2]


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.1f} s"


def _installed(record: Recorded, event: Installed) -> str:
    return (
        f"{_vm(record)}: installed {event.name!r} ({event.os} {event.version}) on {event.node}, "
        f"{event.cpu} vCPU, {event.ram} MiB, {event.disk_gb} GB, ip {event.ip}, user {event.user}"
    )


def _reconfigured(record: Recorded, event: Reconfigured) -> str:
    changes = [
        f"{name} {value}"
        for name, value in (
            ("cpu", event.cpu),
            ("memory", event.ram),
            ("disk GB", event.disk_gb),
            ("node", event.node),
        )
        if value is not None
    ]
    return f"{_vm(record)}: now {', '.join(changes) or 'unchanged'}"


def _adopted(record: Recorded, event: Adopted) -> str:
    return f"{_vm(record)}: found {event.name!r} on {event.node} (not installed by this cairn)"


def _disowned(record: Recorded, event: Disowned) -> str:
    return f"{_vm(record)}: not cairn's VM, left untouched: {event.reason}"


def _asked(by: str | None) -> str:
    """Who asked for the change (the audit trail), when the event knows."""
    return f", asked by {by}" if by else ""


def _function_stored(_: Recorded, event: FunctionVersionStored) -> str:
    return (
        f"function {event.path}: version {event.version} stored "
        f"({event.language}, {event.size} bytes){_asked(event.by)}"
    )


def _function_deleted(_: Recorded, event: FunctionDeleted) -> str:
    return f"function {event.path}: deleted ({event.versions} versions){_asked(event.by)}"


def _document_indexed(_: Recorded, event: DocumentIndexed) -> str:
    return f"search {event.db}: indexed {event.source} ({event.chunks} chunks)"


def _indexing_progress(_: Recorded, event: IndexingProgress) -> str | None:
    """Only the report that ends a drain: the ones while it runs come every second."""
    if event.state != "idle":
        return None
    tail = f"; embedding failed: {event.embedding_error}" if event.failed else ""
    return (
        f"search {event.db}: up to date ({event.documents} documents, {event.chunks} chunks, "
        f"{event.embedded} embedded, {event.failed} failed){tail}"
    )


def _document_removed(_: Recorded, event: DocumentRemoved) -> str:
    return f"search {event.db}: removed {event.source}"


def _document_dismissed(_: Recorded, event: DocumentDismissed) -> str:
    return f"search {event.db}: dismissed {event.source}: {event.reason}"


def _image_stored(_: Recorded, event: ImageStored) -> str:
    return f"images: stored {event.path} ({event.type}, {event.size} bytes){_asked(event.by)}"


def _image_deleted(_: Recorded, event: ImageDeleted) -> str:
    return f"images: deleted {event.path}{_asked(event.by)}"
