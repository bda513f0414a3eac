"""The read model the console needs and no service route offers yet, projected from the stored
events on each request (the console keeps nothing between requests): a search database's
documents, each file of its inbox that was indexed (with its chunks) or dismissed (with the
reason), from the database's stream. A pure function over the records, tested without a server.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors.search.events import DocumentDismissed, DocumentIndexed, DocumentRemoved
from events.store import Recorded


def project_documents(records: Iterable[Recorded]) -> list[dict[str, Any]]:
    """The files of a database's inbox as indexing last left them, by name."""
    documents: dict[str, dict[str, Any]] = {}
    for record in records:
        event = record.event
        if isinstance(event, DocumentRemoved):
            documents.pop(event.source, None)
            continue
        # Indexed and dismissed differ only in their status and the one fact they carry.
        if isinstance(event, DocumentIndexed):
            facts: dict[str, Any] = {"status": "indexed", "chunks": event.chunks}
        elif isinstance(event, DocumentDismissed):
            facts = {"status": "dismissed", "reason": event.reason}
        else:
            continue  # the inbox's other events say nothing of a file's state
        documents[event.source] = {"source": event.source, **facts, "at": record.recorded_at}
    return [documents[source] for source in sorted(documents)]
