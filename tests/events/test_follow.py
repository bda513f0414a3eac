"""Following the events stream through JetStream: in order, once, and across a nats-server
killed with -9 and restarted on its port and store."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from events.follow import Follower
from events.nats_server import EmbeddedNats
from events.relay import OutboxRelay
from events.store import EventStore
from tests.conftest import wait_for
from tests.events.sample_events import Incremented


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[int, dict[str, Any]]] = []

    async def __call__(self, seq: int, msg: Msg) -> None:
        self.events.append((seq, json.loads(msg.data)))

    def values(self) -> list[int]:
        return [body["data"]["by"] for _, body in self.events]


@pytest.fixture
async def relay(store: EventStore, nats_server: EmbeddedNats) -> AsyncIterator[OutboxRelay]:
    publisher = await nats_server.connect()
    r = OutboxRelay(store, publisher, retry_interval=0.05)
    await r.start()
    yield r
    await r.stop()
    await publisher.close()


async def kill_and_wait_for_restart(server: EmbeddedNats) -> None:
    assert server.pid is not None
    before = server.restarts
    os.kill(server.pid, signal.SIGKILL)
    await wait_for(lambda: server.restarts > before, what="nats-server restarted")


async def test_a_follower_gets_new_events_of_its_subject_in_order(
    store: EventStore, relay: OutboxRelay, nc: Client
) -> None:
    await store.append("counter:a", 0, [Incremented(-1)])  # before the follower: not shown
    await wait_for(lambda: relay.cursor == 1, what="published")
    seen = Seen()
    async with Follower(nc, "cairn.evt.counter.a", seen, direct=True):
        await store.append("counter:b", 0, [Incremented(100)])  # another subject
        await store.append("counter:a", 1, [Incremented(i) for i in range(5)])
        await wait_for(lambda: len(seen.events) >= 5, what="five events")
    assert seen.values() == [0, 1, 2, 3, 4]
    assert [seq for seq, _ in seen.events] == [3, 4, 5, 6, 7]


async def test_a_follower_resumes_after_a_sequence_or_since_a_time(
    store: EventStore, relay: OutboxRelay, nc: Client
) -> None:
    await store.append("counter:a", 0, [Incremented(i) for i in range(6)])
    await wait_for(lambda: relay.cursor == 6, what="published")
    after = Seen()
    async with Follower(nc, "cairn.evt.>", after, after=4, direct=True):
        await wait_for(lambda: len(after.events) >= 2, what="the two after 4")
    assert after.values() == [4, 5]
    since = Seen()
    an_hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    async with Follower(nc, "cairn.evt.>", since, since=an_hour_ago, direct=True):
        await wait_for(lambda: len(since.events) >= 6, what="all six")
    assert since.values() == list(range(6))


async def test_nothing_is_missed_or_repeated_across_a_killed_nats_server(
    store: EventStore, relay: OutboxRelay, nats_server: EmbeddedNats, nc: Client
) -> None:
    await store.append("counter:a", 0, [Incremented(-1)])  # history: must never be replayed
    await wait_for(lambda: relay.cursor == 1, what="published")
    seen = Seen()
    follower = Follower(nc, "cairn.evt.counter.>", seen, heartbeat=0.5, direct=True)
    async with follower:
        await store.append("counter:a", 1, [Incremented(0), Incremented(1)])
        await wait_for(lambda: len(seen.events) >= 2, what="events before the kill")

        for round_ in range(2):  # twice: also once after a reset consumer
            await kill_and_wait_for_restart(nats_server)
            base = 2 + round_ * 20
            for i in range(base, base + 20, 5):
                await store.append("counter:a", i + 1, [Incremented(k) for k in range(i, i + 5)])

        await wait_for(lambda: len(seen.events) >= 42, timeout=20, what="every event")
        await store.append("counter:a", 43, [Incremented(42)])
        await wait_for(lambda: len(seen.events) >= 43, what="the last event")
    assert seen.values() == list(range(43))
    assert follower.resets >= 1
    assert not nc.is_closed


async def test_a_follower_started_while_nothing_is_new_skips_the_history(
    store: EventStore, relay: OutboxRelay, nats_server: EmbeddedNats, nc: Client
) -> None:
    await store.append("counter:a", 0, [Incremented(i) for i in range(10)])
    await wait_for(lambda: relay.cursor == 10, what="published")
    seen = Seen()
    async with Follower(nc, "cairn.evt.>", seen, heartbeat=0.5, direct=True):
        await kill_and_wait_for_restart(nats_server)
        await store.append("counter:a", 10, [Incremented(10)])
        await wait_for(lambda: len(seen.events) >= 1, timeout=15, what="the new event")
        # A follower that replayed the stream from 1 would have shown history first.
        await store.append("counter:a", 11, [Incremented(11)])
        await wait_for(lambda: len(seen.events) >= 2, what="one more")
    assert seen.values() == [10, 11]
    await asyncio.sleep(0)
