"""Consumers a host makes for a reader (events/consumers.py): what a reader may ask for, and
what it is refused with."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from events.bus import CommandFailed, command, flush_all
from events.consumers import ConsumerBroker, parse_request
from events.follow import Follower
from events.jetstream import StreamSettings, ensure_stream
from events.nats_server import EmbeddedNats
from events.permissions import Role

GOOD = {"deliver": "cairn.deliver.reader-01", "subject": "cairn.evt.vm.>"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"deliver": "$KV.CAIRN_LEASES.vm"}, "deliver: must be cairn.deliver.<token>"),
        ({"deliver": "cairn.deliver.a.b"}, "deliver: the token is 8 to 64 letters"),
        ({"deliver": "cairn.deliver.>"}, "deliver: the token is 8 to 64 letters"),
        ({"deliver": "cairn.deliver.short"}, "deliver: the token is 8 to 64 letters"),
        ({"deliver": 7}, "deliver: must be cairn.deliver.<token>"),
        ({"subject": "$KV.>"}, "subject: must be a subject under cairn.evt."),
        ({"subject": "cairn.evt"}, "subject: must be a subject under cairn.evt."),
        ({"subject": "cairn.evt.>.x"}, "subject: must be a subject under cairn.evt."),
        ({"subject": "cairn.evt.a b"}, "subject: must be a subject under cairn.evt."),
        ({"subject": "cairn.evt..x"}, "subject: must be a subject under cairn.evt."),
        ({"after": -1}, "after: must be a stream sequence"),
        ({"after": "5"}, "after: must be a stream sequence"),
        ({"after": True}, "after: must be a stream sequence"),
        ({"since": "yesterday"}, "since: must be a Unix time in seconds"),
        ({"heartbeat": 0}, "heartbeat: must be 0.05 to 30 seconds"),
        ({"heartbeat": 3600}, "heartbeat: must be 0.05 to 30 seconds"),
    ],
)
def test_a_request_outside_the_rules_is_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(CommandFailed, match=message.replace(".", r"\.")) as caught:
        parse_request({**GOOD, **change})
    assert caught.value.status == 400


def test_a_request_within_the_rules() -> None:
    request = parse_request({**GOOD, "after": 12, "heartbeat": 0.5})
    assert (request.token, request.subject, request.after, request.heartbeat) == (
        "reader-01",
        "cairn.evt.vm.>",
        12,
        0.5,
    )
    assert parse_request({"deliver": GOOD["deliver"]}).subject == "cairn.evt.>"


@pytest.fixture
async def broker(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    host = await nats_server.connect(Role.HOST)
    await ensure_stream(host.jetstream(), StreamSettings())
    started = await ConsumerBroker(host).start()
    yield host
    await started.stop()
    await host.close()


async def test_a_reader_follows_through_a_host(broker: Client, nats_server: EmbeddedNats) -> None:
    """A gateway, which may not call JetStream, follows events from now on."""
    js = broker.jetstream()
    await js.publish("cairn.evt.vm.1", b'{"n":0}')  # before the follower: not shown
    gateway = await nats_server.connect(Role.GATEWAY)
    heard: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()

    async def on_event(seq: int, msg: Msg) -> None:
        heard.put_nowait((seq, msg.data))

    try:
        async with Follower(gateway, "cairn.evt.vm.>", on_event) as follower:
            assert follower.last_seq == 1
            await js.publish("cairn.evt.vm.1", b'{"n":1}')
            assert await asyncio.wait_for(heard.get(), 10) == (2, b'{"n":1}')
    finally:
        await gateway.close()


async def test_a_bad_request_is_answered_with_its_reason(
    broker: Client, nats_server: EmbeddedNats
) -> None:
    observer = await nats_server.connect(Role.OBSERVER)
    try:
        await flush_all(observer)
        with pytest.raises(CommandFailed, match=r"deliver: must be cairn\.deliver\.<token>"):
            await command(observer, "cairn.events.follow", {"deliver": "$KV.CAIRN_LEASES.vm"})
        reply = await observer.request("cairn.events.follow", b"not json", timeout=5)
        assert json.loads(reply.data) == {
            "error": {"status": 400, "message": "the request is not JSON"}
        }
    finally:
        await observer.close()


async def test_a_reader_cannot_pile_up_consumers(nats_server: EmbeddedNats) -> None:
    host = await nats_server.connect(Role.HOST)
    await ensure_stream(host.jetstream(), StreamSettings())
    broker = await ConsumerBroker(host, max_consumers=3).start()
    observer = await nats_server.connect(Role.OBSERVER)
    try:
        for n in range(3):
            token = f"cairn.deliver.piling{n:03d}"
            await observer.subscribe(token)  # listened to: the server keeps them
            await command(observer, "cairn.events.follow", {"deliver": token})
        with pytest.raises(CommandFailed, match="the events stream has 3 consumers") as caught:
            await command(observer, "cairn.events.follow", {"deliver": "cairn.deliver.piling999"})
        assert caught.value.status == 503
    finally:
        await observer.close()
        await broker.stop()
        await host.close()
