"""The operator's journal: one log line per meaningful change, read off the stored events.

Every change in cairn is an event, so the journal needs no call in any actor: it listens to the
store's appends in this process (where the actors run) and turns the events an operator cares
about into one line each on the ``cairn.journal`` logger (a VM installed, failed, destroyed or
migrated; a function version stored; a document indexed or dismissed; an image stored or
deleted), naming who asked for it when the event knows (``, asked by ada``: the audit
trail's ``by``). Progress records, observations and allocator bookkeeping stay out: they are in the
task streams for whoever follows them.

The journal names no service: each domain says which of its events make a line and how
(``actors/<domain>/journal.py``), and the composition root (``gateway/server.py``) hands those
to :class:`Journal`. So this module sits below every domain, as the actor runtime does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from events.model import Event

if TYPE_CHECKING:
    from events.store import EventStore, Recorded

log = logging.getLogger("cairn.journal")

# An event's line (None: nothing to say about this one).
Describe = Callable[["Recorded", Any], "str | None"]
# A line and the record it speaks for (its stream and type go into the log record's fields).
Line = tuple[str, "Recorded"]
# Takes the records of one append that are better said in fewer lines (a backlog's batch):
# returns those lines and the records still to be described one by one.
Squash = Callable[[list["Recorded"]], tuple[list[Line], list["Recorded"]]]


@attrs.frozen
class JournalLines:
    """What one domain writes to the journal: a line per event type, and an optional squash
    of an append's records into fewer lines."""

    lines: Mapping[type[Event], Describe]
    squash: Squash | None = None


class Journal:
    """Attach with :meth:`attach`; :meth:`line` is the pure part (event in, line out)."""

    def __init__(self, domains: Iterable[JournalLines] = ()) -> None:
        self._domains = tuple(domains)
        self._lines: dict[type[Event], Describe] = {}
        for domain in self._domains:
            self._lines.update(domain.lines)

    def attach(self, store: EventStore) -> None:
        store.add_listener(self._appended)

    def _appended(self, records: list[Recorded]) -> None:
        for domain in self._domains:
            if domain.squash is not None:
                squashed, records = domain.squash(records)
                for text, record in squashed:
                    _log(text, record)
        for record in records:
            line = self.line(record)
            if line is not None:
                _log(line, record)

    def line(self, record: Recorded) -> str | None:
        describe = self._lines.get(type(record.event))
        return describe(record, record.event) if describe is not None else None


def _log(line: str, record: Recorded) -> None:
    fields = {"stream": record.stream, "event": record.event.type_name}
    log.info("%s", line, extra=fields)


def asked(by: str | None) -> str:
    """Who asked for the change (the audit trail), when the event knows."""
    return f", asked by {by}" if by else ""
