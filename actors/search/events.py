"""Events of a search database's indexer (stream `search:<db>`, subject `cairn.evt.search.<db>`).

One event per document outcome, so a subscriber can follow indexing file by file.
"""

from __future__ import annotations

from events.model import Event, domain_event


@domain_event("search.document_indexed")
class DocumentIndexed(Event):
    """`source` (relative to the inbox) now has `chunks` active chunks, `embedded` with vectors;
    `retired` chunks of its previous version were soft-deleted."""

    db: str
    source: str
    sha256: str
    chunks: int
    embedded: int
    retired: int
    embedding_error: str | None = None


@domain_event("search.document_removed")
class DocumentRemoved(Event):
    """`source` left the inbox; its `retired` chunks were soft-deleted."""

    db: str
    source: str
    retired: int


@domain_event("search.document_dismissed")
class DocumentDismissed(Event):
    """`source` is not indexed: unsupported type, unreadable, or too large (`reason`)."""

    db: str
    source: str
    reason: str


@domain_event("search.database_reconciled")
class DatabaseReconciled(Event):
    """Start-up comparison of the inbox with the index found `queued` files to (re)process."""

    db: str
    queued: int
