"""What a domain's host side is given: the parts of the process the composition root made
(gateway/server.py builds one ``actors.platform.Runtime`` per process, with every connection,
the store, the relay and the services' health). A domain names the parts it uses here, as a
Protocol, and depends on them rather than on the whole record: its tests can hand it exactly
these, and a new field of the runtime reaches no domain that does not ask for it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from nats.aio.client import Client

from actors.runtime import ActorHost
from events.store import EventStore


class HostParts(Protocol):
    """The parts every domain's host side uses."""

    @property
    def data_dir(self) -> Path:
        """``CAIRN_DATA``: each domain keeps its files under ``<data_dir>/<domain>/``."""
        ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def nc(self) -> Client:
        """The host role's NATS connection (commands served, leases, code objects)."""
        ...

    @property
    def store(self) -> EventStore: ...

    @property
    def actors(self) -> ActorHost: ...
