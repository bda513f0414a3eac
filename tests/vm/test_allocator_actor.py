"""The allocator actor over a real event store: concurrent asks, and a restart."""

from __future__ import annotations

import asyncio

import pytest

from actors.runtime import ActorHost, Rejected
from actors.vm.allocator import AllocatorActor, Holdings, Release, Reserve
from events.store import EventStore
from tests.vm.helpers import settings


async def test_concurrent_reservations_never_share_an_id(store: EventStore) -> None:
    host = ActorHost(store)
    handle = await host.spawn(AllocatorActor, "cluster", settings=settings())
    ids = await asyncio.gather(
        *(handle.ask(Reserve(f"t{i}", None, frozenset({100, 102}))) for i in range(30))
    )
    assert len(set(ids)) == 30
    assert not {100, 102} & set(ids)
    await host.stop_all()


async def test_holdings_survive_a_restart_and_release_frees(store: EventStore) -> None:
    s = settings(ASSIGN_IP_START="200", ASSIGN_IP_END="202")
    host = ActorHost(store)
    handle = await host.spawn(AllocatorActor, "cluster", settings=s)
    assert await handle.ask(Reserve("a", None, frozenset())) == 200
    assert await handle.ask(Reserve("b", 202, frozenset())) == 202
    await host.stop_all()

    again = ActorHost(store)
    handle = await again.spawn(AllocatorActor, "cluster", settings=s)
    assert await handle.ask(Holdings()) == {200: "a", 202: "b"}
    assert await handle.ask(Reserve("c", None, frozenset())) == 201
    with pytest.raises(Rejected) as caught:
        await handle.ask(Reserve("d", None, frozenset()))
    assert caught.value.status == 409
    assert caught.value.message == "no free VMID in 200-202: every id is in use"
    with pytest.raises(Rejected, match="VMID 200 is already reserved"):
        await handle.ask(Reserve("e", 200, frozenset()))
    await handle.ask(Release(200, "destroyed"))
    assert await handle.ask(Reserve("f", 200, frozenset())) == 200
    await again.stop_all()
