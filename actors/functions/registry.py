"""The function registry: one actor decides versions and answers which version a run uses.

Transitions (state: the versions of each path, ascending):

| Command       | Condition                          | Event / reply                              |
|---------------|------------------------------------|--------------------------------------------|
| StoreVersion  | always                             | FunctionVersionStored(version = max(now,   |
|               |                                    | latest + 1)); reply the version             |
| Resolve       | path unknown                       | Rejected 404 ``script not found``          |
| Resolve       | version given, not stored for path | Rejected 404 ``assign version not found``  |
| Resolve       | otherwise                          | reply that version (latest when not given) |
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs

from actors.functions.events import FunctionVersionStored, version_stored
from actors.runtime import AggregateActor, Rejected
from events.model import Event

SINGLETON = "registry"
SCRIPT_NOT_FOUND = "script not found"
VERSION_NOT_FOUND = "assign version not found"


@attrs.frozen
class StoredVersion:
    path: str
    version: int
    language: str
    sha256: str
    size: int


@attrs.frozen
class StoreVersion:
    path: str
    language: str
    sha256: str
    size: int


@attrs.frozen
class Resolve:
    path: str
    version: int | None


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class FunctionRegistry(AggregateActor):
    aggregate = "functions"

    def setup(self, clock: Callable[[], int] = now_ms, **kwargs: Any) -> None:
        super().setup(**kwargs)
        self.clock = clock
        self.versions: dict[str, dict[int, StoredVersion]] = {}
        self.latest: dict[str, StoredVersion] = {}

    def apply(self, event: Event) -> None:
        if isinstance(event, FunctionVersionStored):
            stored = StoredVersion(
                event.path, event.version, event.language, event.sha256, event.size
            )
            self.versions.setdefault(event.path, {})[event.version] = stored
            latest = self.latest.get(event.path)
            if latest is None or stored.version > latest.version:
                self.latest[event.path] = stored

    def handle(self, message: Any) -> Any:
        if isinstance(message, StoreVersion):
            latest = self.latest.get(message.path)
            # Strictly increasing per path, even for two uploads in one millisecond or a clock
            # that stepped back.
            version = max(self.clock(), latest.version + 1 if latest else 0)
            self.record(
                version_stored(
                    message.path, version, message.language, message.sha256, message.size
                )
            )
            return self.latest[message.path]
        if isinstance(message, Resolve):
            latest = self.latest.get(message.path)
            if latest is None:
                raise Rejected(404, SCRIPT_NOT_FOUND)
            if message.version is None:
                return latest
            found = self.versions[message.path].get(message.version)
            if found is None:
                raise Rejected(404, VERSION_NOT_FOUND)
            return found
        raise TypeError(f"unknown command {message!r}")
