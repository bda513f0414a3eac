"""The search service's journal lines (actors/journal.py): a document indexed, removed or
dismissed, and the end of a drain; a backlog's batch of indexed files is one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.journal import JournalLines, Line
from actors.search.events import (
    DocumentDismissed,
    DocumentIndexed,
    DocumentRemoved,
    IndexingProgress,
)

if TYPE_CHECKING:
    from events.store import Recorded

# More documents indexed in one append than this are one line.
BURST = 20


def journal_lines() -> JournalLines:
    return JournalLines(
        {
            DocumentIndexed: _indexed,
            DocumentRemoved: _removed,
            DocumentDismissed: _dismissed,
            IndexingProgress: _progress,
        },
        squash=_burst,
    )


def _burst(records: list[Recorded]) -> tuple[list[Line], list[Recorded]]:
    """A backlog's batch: one line for its files, not thousands (which also held the event
    loop long enough to show in the queries' p99)."""
    indexed = [r for r in records if isinstance(r.event, DocumentIndexed)]
    if len(indexed) <= BURST:
        return [], records
    first: DocumentIndexed = indexed[0].event  # type: ignore[assignment]
    chunks = sum(r.event.chunks for r in indexed)  # type: ignore[attr-defined]
    last = indexed[-1].event.source  # type: ignore[attr-defined]
    line = (
        f"search {first.db}: indexed {len(indexed)} files ({chunks} chunks), "
        f"{first.source} … {last}"
    )
    return [(line, indexed[0])], [r for r in records if not isinstance(r.event, DocumentIndexed)]


def _indexed(_: Recorded, event: DocumentIndexed) -> str:
    return f"search {event.db}: indexed {event.source} ({event.chunks} chunks)"


def _progress(_: Recorded, event: IndexingProgress) -> str | None:
    """Only the report that ends a drain: the ones while it runs come every second."""
    if event.state != "idle":
        return None
    tail = f"; embedding failed: {event.embedding_error}" if event.failed else ""
    return (
        f"search {event.db}: up to date ({event.documents} documents, {event.chunks} chunks, "
        f"{event.embedded} embedded, {event.failed} failed){tail}"
    )


def _removed(_: Recorded, event: DocumentRemoved) -> str:
    return f"search {event.db}: removed {event.source}"


def _dismissed(_: Recorded, event: DocumentDismissed) -> str:
    return f"search {event.db}: dismissed {event.source}: {event.reason}"
