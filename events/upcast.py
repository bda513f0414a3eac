"""Upcasters: stored events of an older schema version brought to the current shape on read.

An event type's schema version (``@domain_event(name, version=n)``) rises when its stored
JSON changes in a way the current class cannot read as it is: a field renamed, removed, split,
or given another type or meaning. (A new field with a default needs no new version: an older
event simply lacks it and gets the default; an older cairn ignores a field it does not know.)
Each rise comes with one upcaster, a pure function from the fields of version n to those of
version n + 1, declared beside the event class::

    @upcaster("vm.installed", from_version=1)
    def _installed_v1_to_v2(fields: dict[str, Any]) -> dict[str, Any]:
        return {**fields, "ssh_host_key": fields.pop("host_key", "")}

Reading a row of version 1 when the class is at 3 applies the steps 1 -> 2 -> 3 in turn; rows
already at the current version (nearly all of them) are not touched. Stored rows are never
rewritten: the store keeps what was written, and every reader upcasts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Fields = dict[str, Any]
Upcaster = Callable[[Fields], Fields]


class DuplicateUpcaster(Exception):
    """Two functions claimed the same step."""


class SchemaNewerThanCairn(Exception):
    """A stored event of a schema version this cairn does not know: a newer cairn wrote it."""

    def __init__(self, type_name: str, stored: int, current: int) -> None:
        super().__init__(
            f"{type_name} of schema version {stored} was written by a newer cairn; this cairn "
            f"reads up to version {current}: upgrade cairn on this host"
        )


class MissingUpcaster(Exception):
    """An event's schema version rose without the step that reads the older rows."""

    def __init__(self, type_name: str, from_version: int) -> None:
        super().__init__(
            f"no upcaster turns {type_name} of schema version {from_version} into "
            f"version {from_version + 1}"
        )


UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(type_name: str, *, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register ``fn`` as the step of ``type_name`` from ``from_version`` to the next."""

    def register(fn: Upcaster) -> Upcaster:
        key = (type_name, from_version)
        if key in UPCASTERS:
            raise DuplicateUpcaster(f"{type_name} from version {from_version} has an upcaster")
        UPCASTERS[key] = fn
        return fn

    return register


def upcast(
    type_name: str,
    stored: int,
    current: int,
    fields: Fields,
    steps: Mapping[tuple[str, int], Upcaster] = UPCASTERS,
) -> Fields:
    """``fields`` of schema version ``stored`` in the shape of version ``current``."""
    if stored > current:
        raise SchemaNewerThanCairn(type_name, stored, current)
    while stored < current:
        step = steps.get((type_name, stored))
        if step is None:
            raise MissingUpcaster(type_name, stored)
        fields = step(fields)
        stored += 1
    return fields


def missing_steps(
    versions: Mapping[str, int], steps: Mapping[tuple[str, int], Upcaster] = UPCASTERS
) -> list[str]:
    """For each type at schema ``versions[type]``, the steps from version 1 that no upcaster
    covers (a test keeps this empty)."""
    return [
        f"{name} {n} -> {n + 1}"
        for name, version in sorted(versions.items())
        for n in range(1, version)
        if (name, n) not in steps
    ]
