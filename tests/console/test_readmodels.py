"""The console's read model, from event histories as the indexer records them."""

from __future__ import annotations

from actors.search.events import DocumentDismissed, DocumentIndexed, DocumentRemoved
from events.model import Event
from events.store import Recorded
from gateway.console.readmodels import project_documents


def history(*events: Event, stream: str) -> list[Recorded]:
    return [Recorded(i, stream, i, e, 1000.0 + i) for i, e in enumerate(events, start=1)]


def test_documents_as_indexing_last_left_them() -> None:
    def indexed(source: str, chunks: int) -> DocumentIndexed:
        return DocumentIndexed(db="notes", source=source, sha256="0" * 64, chunks=chunks, retired=0)

    records = history(
        indexed("b.md", 3),
        indexed("a.txt", 1),
        DocumentDismissed(db="notes", source="c.exe", reason="unsupported file type '.exe'"),
        indexed("b.md", 5),  # edited: indexed again
        indexed("gone.txt", 2),
        DocumentRemoved(db="notes", source="gone.txt", retired=2),
        stream="search:notes",
    )
    assert project_documents(records) == [
        {"source": "a.txt", "status": "indexed", "chunks": 1, "at": 1002.0},
        {"source": "b.md", "status": "indexed", "chunks": 5, "at": 1004.0},
        {
            "source": "c.exe",
            "status": "dismissed",
            "reason": "unsupported file type '.exe'",
            "at": 1003.0,
        },
    ]
