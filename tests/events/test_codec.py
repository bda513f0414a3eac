"""Every registered event class survives a JSON round trip, including ones added later: the
test runs over the registry, so a new event class is covered the moment it is imported."""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import attrs
import pytest

from events.codec import decode, encode
from events.model import REGISTRY, DuplicateEventType, Event, domain_event
from gateway.server import domain_events
from tests.events import sample_events

domain_events()

HOSTILE_TEXT = 'quote " backslash \\ newline \n tab \t unicode ü 漢字 \u2028 nul \x00'


def sample_value(tp: Any, depth: int = 0) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        chosen = next(a for a in args if a is not type(None))
        return sample_value(chosen, depth)
    if origin in (list, typing.List):  # noqa: UP006
        return [sample_value(args[0], depth + 1)]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return (sample_value(args[0], depth + 1),)
        return tuple(sample_value(a, depth + 1) for a in args)
    if origin is dict:
        return {"k": sample_value(args[1], depth + 1)}
    if origin is typing.Literal:
        return args[0]
    if tp is str:
        return HOSTILE_TEXT
    if tp is bool:
        return True
    if tp is int:
        return 2**53 + 1
    if tp is float:
        return 1.5
    if tp is bytes:
        return b"\x00\xff"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(iter(tp))
    if attrs.has(tp):
        return build(tp, depth + 1)
    if tp is Any:
        return {"any": [1, "two"]}
    raise TypeError(f"no sample for {tp!r}")


def build(cls: type, depth: int = 0) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: sample_value(hints[f.name], depth) for f in attrs.fields(cls)})


@pytest.mark.parametrize("type_name", sorted(REGISTRY))
def test_every_event_round_trips_through_json(type_name: str) -> None:
    cls = REGISTRY[type_name]
    event = build(cls)
    assert decode(type_name, encode(event)) == event
    assert cls.type_name == type_name
    assert cls.schema_version >= 1


def test_registry_holds_the_test_events_with_their_versions() -> None:
    assert REGISTRY["test.incremented"] is sample_events.Incremented
    assert REGISTRY["test.noted"].schema_version == 2


def test_events_are_frozen() -> None:
    event = sample_events.Incremented(by=1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.by = 2  # type: ignore[misc]


def test_a_type_name_cannot_be_claimed_twice() -> None:
    with pytest.raises(DuplicateEventType):

        @domain_event("test.incremented")
        class Again(Event):
            by: int


def test_unknown_type_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="unknown event type 'nope'"):
        decode("nope", b"{}")
