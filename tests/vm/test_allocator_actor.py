"""The allocator actor over a real event store: concurrent asks, and a restart."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from actors.runtime import ActorHost, Rejected
from actors.vm.allocator import AllocatorActor, Holdings, Release, Reserve
from events.store import EventStore, default_store_url
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


async def test_two_hosts_on_one_store_never_hand_out_the_same_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each host has its own connection to the shared store and its own allocator on the one
    stream: the store lets one reservation through per version, the other host reloads and
    decides again, and every caller gets an id of its own."""
    stores = [await EventStore.open(default_store_url(tmp_path)) for _ in range(2)]
    hosts = [ActorHost(store) for store in stores]
    try:
        handles = [await h.spawn(AllocatorActor, "cluster", settings=settings()) for h in hosts]
        with caplog.at_level(logging.INFO, logger="actors.runtime"):
            ids = await asyncio.gather(
                *(handles[i % 2].ask(Reserve(f"t{i}", None, frozenset({101}))) for i in range(30))
            )
        assert len(set(ids)) == 30 and 101 not in ids
        # They did collide, and said so in one line each, not a traceback.
        reloads = [r for r in caplog.records if "another writer appended first" in r.message]
        assert reloads and all(r.levelno == logging.INFO for r in reloads)
        assert "Traceback" not in caplog.text
        # A release on one host frees the id for the other.
        await handles[0].ask(Release(ids[1], "destroyed"))
        assert await handles[1].ask(Reserve("again", ids[1], frozenset())) == ids[1]
        for host in hosts:
            await host.stop_all()
        # What both decided is one history: a third host replays every holding.
        third = ActorHost(stores[0])
        handle = await third.spawn(AllocatorActor, "cluster", settings=settings())
        held = await handle.ask(Holdings())
        assert sorted(held) == sorted(ids)
        assert held[ids[1]] == "again"
        await third.stop_all()
    finally:
        for host in hosts:
            await host.stop_all()
        for store in stores:
            await store.close()
