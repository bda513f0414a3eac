"""The outbox relay against a real nats-server: order, an outage, catch-up, restart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from events.nats_server import EmbeddedNats
from events.relay import OutboxRelay
from events.store import EventStore
from tests.conftest import wait_for
from tests.events.sample_events import Incremented


class Collector:
    """Subscribes to every event subject; keeps the first delivery of each (stream, version)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.seen: set[tuple[str, int]] = set()
        self.duplicates = 0
        self.arrived = asyncio.Condition()

    async def on_msg(self, msg: Msg) -> None:
        body = json.loads(msg.data)
        key = (body["stream"], body["version"])
        if key in self.seen:
            self.duplicates += 1
            return
        self.seen.add(key)
        body["subject"] = msg.subject
        async with self.arrived:
            self.received.append(body)
            self.arrived.notify_all()

    async def wait_count(self, n: int, timeout: float = 10) -> list[dict[str, Any]]:
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: len(self.received) >= n), timeout)
        return self.received


@pytest.fixture
async def collector(nc: Client) -> AsyncIterator[Collector]:
    c = Collector()
    sub = await nc.subscribe("cairn.evt.>", cb=c.on_msg)
    await nc.flush()
    yield c
    await sub.unsubscribe()


@pytest.fixture
async def relay(store: EventStore, nc: Client) -> AsyncIterator[OutboxRelay]:
    # Core NATS delivers only to subscriptions that exist when a message passes. Sharing the
    # subscriber's connection (as one `cairn` process does) makes the reconnect order
    # deterministic: nats-py re-subscribes before it lets publishes through. Subscribers in
    # other processes that must not miss events use the CAIRN_EVENTS JetStream stream.
    r = OutboxRelay(store, nc, retry_interval=0.05)
    await r.start()
    yield r
    await r.stop()


async def test_events_arrive_in_order_on_their_stream_subject(
    store: EventStore, relay: OutboxRelay, collector: Collector
) -> None:
    await store.append("counter:a", 0, [Incremented(1), Incremented(2)])
    await store.append("counter:b.c", 0, [Incremented(3)])
    got = await collector.wait_count(3)
    assert [(m["subject"], m["version"], m["data"]) for m in got] == [
        ("cairn.evt.counter.a", 1, {"by": 1}),
        ("cairn.evt.counter.a", 2, {"by": 2}),
        ("cairn.evt.counter.b~2Ec", 1, {"by": 3}),
    ]
    assert got[0]["type"] == "test.incremented"
    assert [m["position"] for m in got] == sorted(m["position"] for m in got)


async def test_events_stored_while_nats_is_down_arrive_after_it_returns(
    store: EventStore, relay: OutboxRelay, nats_server: EmbeddedNats, collector: Collector
) -> None:
    await store.append("counter:a", 0, [Incremented(0)])
    await collector.wait_count(1)

    await nats_server.stop()
    for i in range(1, 31):
        await store.append("counter:a", i, [Incremented(i)])
    await nats_server.start()  # same port: both clients reconnect by themselves

    got = await collector.wait_count(31, timeout=20)
    assert [m["data"]["by"] for m in got] == list(range(31))
    await wait_for(lambda: relay.cursor == got[-1]["position"], what="relay cursor")


async def test_a_new_relay_catches_up_from_the_saved_cursor(
    store: EventStore, nats_server: EmbeddedNats, collector: Collector
) -> None:
    publisher = await nats_server.connect()
    first = OutboxRelay(store, publisher)
    await first.start()
    await store.append("counter:a", 0, [Incremented(1)])
    await collector.wait_count(1)
    await first.stop()  # saves its cursor

    await store.append("counter:a", 1, [Incremented(2), Incremented(3)])
    second = OutboxRelay(store, publisher)
    await second.start()
    try:
        got = await collector.wait_count(3)
        assert [m["data"]["by"] for m in got] == [1, 2, 3]
        assert collector.duplicates == 0  # the cursor was saved: nothing re-sent
    finally:
        await second.stop()
        await publisher.close()
