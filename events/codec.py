"""JSON encoding of events through one cattrs converter."""

from __future__ import annotations

import json
from typing import Any

import cattrs

from events.model import Event, event_class

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
