"""The registry actor's decisions, on a real event store."""

import pytest

from actors.functions.events import FunctionVersionStored
from actors.functions.registry import (
    SINGLETON,
    FunctionRegistry,
    Resolve,
    StoredVersion,
    StoreVersion,
)
from actors.runtime import ActorHost, Rejected
from events.store import EventStore
from events.subjects import stream_name

SHA = "a" * 64


async def test_versions_strictly_increase_even_when_the_clock_does_not(
    store: EventStore,
) -> None:
    times = iter([1000, 1000, 999, 5000, 6000])
    host = ActorHost(store)
    try:
        registry = await host.spawn(FunctionRegistry, SINGLETON, clock=lambda: next(times))
        versions = [
            (await registry.ask(StoreVersion("p", "python", SHA, 1))).version for _ in range(4)
        ]
        assert versions == [1000, 1001, 1002, 5000]
        other = await registry.ask(StoreVersion("q", "python", SHA, 1))
        assert other.version > 0
    finally:
        await host.stop_all()
    events = await store.read_stream(stream_name("functions", SINGLETON))
    assert [r.event.version for r in events if isinstance(r.event, FunctionVersionStored)][
        :4
    ] == versions


async def test_resolve_latest_exact_and_unknown(store: EventStore) -> None:
    host = ActorHost(store)
    try:
        registry = await host.spawn(FunctionRegistry, SINGLETON, clock=lambda: 10)
        await registry.ask(StoreVersion("p", "python", SHA, 1))
        await registry.ask(StoreVersion("p", "javascript", "b" * 64, 2))
        latest = await registry.ask(Resolve("p", None))
        assert latest == StoredVersion("p", 11, "javascript", "b" * 64, 2)
        assert (await registry.ask(Resolve("p", 10))).language == "python"
        with pytest.raises(Rejected) as unknown_version:
            await registry.ask(Resolve("p", 12))
        assert (unknown_version.value.status, unknown_version.value.message) == (
            404,
            "assign version not found",
        )
        with pytest.raises(Rejected) as unknown_path:
            await registry.ask(Resolve("nope", None))
        assert unknown_path.value.message == "script not found"
    finally:
        await host.stop_all()
    # Rebuilt from the store alone.
    again = ActorHost(store)
    try:
        registry = await again.spawn(FunctionRegistry, SINGLETON, clock=lambda: 0)
        assert (await registry.ask(Resolve("p", None))).version == 11
        assert (await registry.ask(StoreVersion("p", "python", SHA, 1))).version == 12
    finally:
        await again.stop_all()
