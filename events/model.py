"""Domain events: frozen attrs classes registered under a type name and schema version.

Each state change of an aggregate is exactly one event. An event class is declared with
:func:`domain_event`, which makes it a frozen, slotted attrs class and registers it, so the codec
can turn stored JSON back into the right class and a single test can round-trip every event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, cast, dataclass_transform

import attrs


class Event:
    """Base of every domain event. ``type_name`` and ``schema_version`` are set by the decorator."""

    __slots__ = ()
    type_name: ClassVar[str]
    schema_version: ClassVar[int]


class DuplicateEventType(Exception):
    """Two classes claimed the same event type name."""


REGISTRY: dict[str, type[Event]] = {}

E = TypeVar("E", bound=type[Event])


@dataclass_transform(frozen_default=True, field_specifiers=(attrs.field, attrs.Factory))
def domain_event(type_name: str, *, version: int = 1) -> Callable[[E], E]:
    """Make ``cls`` a frozen attrs event registered as ``type_name`` (schema ``version``)."""

    def wrap(cls: E) -> E:
        if type_name in REGISTRY:
            raise DuplicateEventType(f"event type {type_name!r} is already registered")
        frozen: Any = attrs.frozen(cls, slots=True)
        frozen.type_name = type_name
        frozen.schema_version = version
        REGISTRY[type_name] = frozen
        return cast(E, frozen)

    return wrap


def event_class(type_name: str) -> type[Event]:
    try:
        return REGISTRY[type_name]
    except KeyError:
        raise KeyError(f"unknown event type {type_name!r}") from None
