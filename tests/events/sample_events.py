"""Events used by the foundation's own tests (a counter and a note)."""

from __future__ import annotations

import attrs

from events.model import Event, domain_event


@domain_event("test.incremented")
class Incremented(Event):
    by: int


@domain_event("test.noted", version=2)
class Noted(Event):
    text: str
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = attrs.field(factory=dict)
    parent: int | None = None
