"""Stream names and the NATS subjects their events are published on."""

from __future__ import annotations

import re

EVENT_SUBJECT_PREFIX = "cairn.evt"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def stream_name(aggregate: str, ident: str | int) -> str:
    if not aggregate or _UNSAFE.search(aggregate):
        raise ValueError(f"aggregate name must be [A-Za-z0-9_-]+, got {aggregate!r}")
    return f"{aggregate}:{ident}"


def split_stream(stream: str) -> tuple[str, str]:
    aggregate, sep, ident = stream.partition(":")
    if not sep:
        raise ValueError(f"stream name must be '<aggregate>:<id>', got {stream!r}")
    return aggregate, ident


def subject_token(ident: str) -> str:
    """Escape an id into one NATS subject token: ``.``, ``*``, ``>``, spaces, ``/`` and the
    like become ``~XX`` (hex), so ``fn/a.b`` cannot split or wildcard a subject."""
    if not ident:
        return "~"
    return _UNSAFE.sub(lambda m: "".join(f"~{b:02X}" for b in m.group().encode()), ident)


def subject_for(stream: str) -> str:
    aggregate, ident = split_stream(stream)
    return f"{EVENT_SUBJECT_PREFIX}.{aggregate}.{subject_token(ident)}"


def aggregate_subjects(aggregate: str) -> str:
    """Wildcard subject of every stream of one aggregate kind."""
    return f"{EVENT_SUBJECT_PREFIX}.{aggregate}.*"
