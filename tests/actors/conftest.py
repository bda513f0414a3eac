"""An actor host over the test's event store (test_runtime_faults.py gives it a store of its
own)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from actors.runtime import ActorHost
from events.store import EventStore


@pytest.fixture
async def host(store: EventStore) -> AsyncIterator[ActorHost]:
    h = ActorHost(store)
    yield h
    await h.stop_all()
