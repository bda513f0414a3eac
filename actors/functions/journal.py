"""The functions service's journal lines (actors/journal.py): a version stored, a function
deleted, each naming who asked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.functions.events import FunctionDeleted, FunctionVersionStored
from actors.journal import JournalLines, asked

if TYPE_CHECKING:
    from events.store import Recorded


def journal_lines() -> JournalLines:
    return JournalLines({FunctionVersionStored: _stored, FunctionDeleted: _deleted})


def _stored(_: Recorded, event: FunctionVersionStored) -> str:
    return (
        f"function {event.path}: version {event.version} stored "
        f"({event.language}, {event.size} bytes){asked(event.by)}"
    )


def _deleted(_: Recorded, event: FunctionDeleted) -> str:
    return f"function {event.path}: deleted ({event.versions} versions){asked(event.by)}"
