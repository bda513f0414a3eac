"""JSON encoding of events through one cattrs converter."""

from __future__ import annotations

import json
from typing import Any

import cattrs

from events.model import Event, event_class
from events.upcast import upcast

converter = cattrs.Converter()


def to_dict(event: Event) -> dict[str, Any]:
    data: dict[str, Any] = converter.unstructure(event)
    return data


def from_dict(type_name: str, data: dict[str, Any]) -> Event:
    return converter.structure(data, event_class(type_name))


def encode(event: Event) -> bytes:
    return json.dumps(to_dict(event), separators=(",", ":"), ensure_ascii=False).encode()


def decode(type_name: str, data: bytes | str) -> Event:
    return from_dict(type_name, json.loads(data))


def decode_stored(type_name: str, schema: int, data: bytes | str) -> Event:
    """A stored event of schema version ``schema``, upcast to its class's current version."""
    cls = event_class(type_name)
    fields = json.loads(data)
    if schema != cls.schema_version:
        fields = upcast(type_name, schema, cls.schema_version, fields)
    return converter.structure(fields, cls)
