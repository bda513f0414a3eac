"""Events of a search database's indexer (stream `search:<db>`, subject `cairn.evt.search.<db>`).

One event per document outcome of the keyword stage, so a subscriber can follow indexing file by
file, and `search.progress` at most once a second while a backlog drains (and once when it is
done), so it can show a progress bar of both stages.
"""

from __future__ import annotations

from events.model import Event, domain_event


@domain_event("search.document_indexed")
class DocumentIndexed(Event):
    """`source` (relative to the inbox) now has `chunks` active chunks, searchable by keyword;
    `retired` chunks of its previous version were soft-deleted. Its vectors follow in the
    background (`search.progress`). Events of schema 1 also carried `embedded` and
    `embedding_error`, from when a file was embedded before the next one was indexed."""

    db: str
    source: str
    sha256: str
    chunks: int
    retired: int


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


@domain_event("search.progress")
class IndexingProgress(Event):
    """Where both stages stand. `queued`: files waiting for the keyword stage; `documents` and
    `chunks`: indexed and searchable by keyword; of those chunks, `embedded` have vectors,
    `pending` wait for them and `failed` could not be embedded (retried at the next start), so
    `embedded + pending + failed == chunks`. Rates are chunks per second over the last few
    seconds. `state`: `indexing` (files queued), `embedding` (only vectors missing) or `idle`."""

    db: str
    state: str
    queued: int
    documents: int
    chunks: int
    embedded: int
    pending: int
    failed: int
    keyword_rate: float
    embedding_rate: float
    embedding_error: str | None = None
