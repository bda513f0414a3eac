"""Events of the image store.

Stream ``images:store``: one singleton actor owns the catalogue of stored files. Each event is
published on NATS (``cairn.evt.images.store``) after it is stored, which is how every gateway
host learns to purge its cached variants of a path.
"""

from __future__ import annotations

from events.model import Event, domain_event


@domain_event("images.stored")
class ImageStored(Event):
    """A file is now at ``path`` (relative to the store), replacing any earlier one."""

    path: str
    type: str  # MIME type sniffed from the bytes
    size: int


@domain_event("images.deleted")
class ImageDeleted(Event):
    """The file at ``path`` was moved to the trash as ``trashed_as`` (relative to the trash)."""

    path: str
    trashed_as: str


def stored(path: str, type: str, size: int) -> ImageStored:
    return ImageStored(path=path, type=type, size=size)


def deleted(path: str, trashed_as: str) -> ImageDeleted:
    return ImageDeleted(path=path, trashed_as=trashed_as)
