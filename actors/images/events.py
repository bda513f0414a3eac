"""Events of the image store.

Stream ``images:store``: one singleton actor owns the catalogue of stored files. Each event is
published on NATS (``cairn.evt.images.store``) after it is stored, which is how every gateway
host learns to purge its cached variants of a path.

``by`` is who asked (the audit trail): a token's name, or ``ip:<address>`` when this cairn has
no tokens (``gateway/http/identity.py``); None for a change the store found on disk by itself and in
events stored before cairn kept it. A field with a default, so it keeps the schema version
(``events/upcast.py``).
"""

from __future__ import annotations

from events.model import Event, domain_event


@domain_event("images.stored")
class ImageStored(Event):
    """A file is now at ``path`` (relative to the store), replacing any earlier one."""

    path: str
    type: str  # MIME type sniffed from the bytes
    size: int
    by: str | None = None  # who asked: a token's name or "ip:<address>"


@domain_event("images.deleted")
class ImageDeleted(Event):
    """The file at ``path`` was moved to the trash as ``trashed_as`` (relative to the trash)."""

    path: str
    trashed_as: str
    by: str | None = None  # who asked


def stored(path: str, type: str, size: int, by: str | None = None) -> ImageStored:
    return ImageStored(path=path, type=type, size=size, by=by)


def deleted(path: str, trashed_as: str, by: str | None = None) -> ImageDeleted:
    return ImageDeleted(path=path, trashed_as=trashed_as, by=by)
