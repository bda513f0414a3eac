"""The function registry: one actor decides versions and answers which version a run uses.

Transitions (state: the versions of each path, ascending):

| Command       | Condition                          | Event / reply                              |
|---------------|------------------------------------|--------------------------------------------|
| StoreVersion  | always                             | FunctionVersionStored(version = max(now,   |
|               |                                    | latest + 1)); reply the version             |
| Resolve       | path unknown                       | Rejected 404 ``script not found``          |
| Resolve       | version given, not stored for path | Rejected 404 ``assign version not found``  |
| Resolve       | otherwise                          | reply that version (latest when not given) |
| Delete        | path unknown                       | Rejected 404 ``script not found``          |
| Delete        | otherwise                          | FunctionDeleted; reply the versions gone,  |
|               |                                    | and the code no version uses any more      |
| List          | always                             | reply every path's versions                |
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs

from actors.functions.events import FunctionDeleted, FunctionVersionStored, version_stored
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
    by: str | None = None  # who asked, recorded in the event (the audit trail)


@attrs.frozen
class Resolve:
    path: str
    version: int | None


@attrs.frozen
class Delete:
    path: str
    by: str | None = None  # who asked, recorded in the event


@attrs.frozen
class Deleted:
    versions: tuple[StoredVersion, ...]
    unused_code: frozenset[str]  # SHA-256s no remaining version refers to


@attrs.frozen
class ListFunctions:
    pass


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class FunctionRegistry(AggregateActor):
    aggregate = "functions"

    def setup(self, clock: Callable[[], int] = now_ms, **kwargs: Any) -> None:
        super().setup(**kwargs)
        self.clock = clock
        self.versions: dict[str, dict[int, StoredVersion]] = {}
        self.latest: dict[str, StoredVersion] = {}
        # The highest version a deleted path had: a new upload there still goes above it, so
        # a version number never names two different codes.
        self.floor: dict[str, int] = {}

    def apply(self, event: Event) -> None:
        if isinstance(event, FunctionVersionStored):
            stored = StoredVersion(
                event.path, event.version, event.language, event.sha256, event.size
            )
            self.versions.setdefault(event.path, {})[event.version] = stored
            latest = self.latest.get(event.path)
            if latest is None or stored.version > latest.version:
                self.latest[event.path] = stored
        elif isinstance(event, FunctionDeleted):
            self.floor[event.path] = self.latest[event.path].version
            del self.versions[event.path]
            del self.latest[event.path]

    def handle(self, message: Any) -> Any:
        if isinstance(message, StoreVersion):
            latest = self.latest.get(message.path)
            # Strictly increasing per path, even for two uploads in one millisecond, a clock
            # that stepped back, or a path deleted and used again.
            last = latest.version if latest else self.floor.get(message.path, -1)
            version = max(self.clock(), last + 1)
            self.record(
                version_stored(
                    message.path,
                    version,
                    message.language,
                    message.sha256,
                    message.size,
                    message.by,
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
        if isinstance(message, Delete):
            versions = self.versions.get(message.path)
            if versions is None:
                raise Rejected(404, SCRIPT_NOT_FOUND)
            gone = tuple(versions[v] for v in sorted(versions))
            self.record(FunctionDeleted(path=message.path, versions=len(gone), by=message.by))
            used = {v.sha256 for kept in self.versions.values() for v in kept.values()}
            return Deleted(gone, frozenset(v.sha256 for v in gone) - used)
        if isinstance(message, ListFunctions):
            return {
                path: [versions[v] for v in sorted(versions)]
                for path, versions in sorted(self.versions.items())
            }
        raise TypeError(f"unknown command {message!r}")
