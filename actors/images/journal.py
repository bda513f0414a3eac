"""The image service's journal lines (actors/journal.py): an image stored or deleted, naming
who asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.images.events import ImageDeleted, ImageStored
from actors.journal import JournalLines, asked

if TYPE_CHECKING:
    from events.store import Recorded


def journal_lines() -> JournalLines:
    return JournalLines({ImageStored: _stored, ImageDeleted: _deleted})


def _stored(_: Recorded, event: ImageStored) -> str:
    return f"images: stored {event.path} ({event.type}, {event.size} bytes){asked(event.by)}"


def _deleted(_: Recorded, event: ImageDeleted) -> str:
    return f"images: deleted {event.path}{asked(event.by)}"
