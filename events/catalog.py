"""The catalogue of the event types cairn stores.

``REGISTRY`` (events/model.py) holds every event class whose module has been imported, and a
replay must never meet an unknown type: wherever events are decoded, every domain's event
module is imported first. events/ names no domain, so it does not import them: the
composition root (gateway/server.py) does, and hands them here."""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

from events.model import REGISTRY, Event


def catalogue(modules: Iterable[ModuleType]) -> dict[str, type[Event]]:
    """Every event type that ``modules`` (imported: their classes are registered) declare, by
    type name."""
    names = {module.__name__ for module in modules}
    return {name: cls for name, cls in REGISTRY.items() if cls.__module__ in names}
