"""Events cannot be forged or silenced, even by someone who got onto the bus with a key that
may publish events (a leaked host credential): they lack the events key, so what they publish
is never handed to a consumer, cannot take the de-duplication id of the event a host publishes
next, and cannot silence the console's feed with an out-of-range position."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from nats.aio.client import Client
from nats.aio.msg import Msg

from actors.platform import Runtime
from events.follow import Follower
from events.jetstream import MSG_ID_HEADER
from events.permissions import Role
from events.relay import wire_payload
from events.signing import SIG_HEADER
from events.subjects import subject_for
from gateway.console.feed import EventFeed
from tests.events.sample_events import Incremented


def forged(stream: str, version: int, position: int) -> bytes:
    return json.dumps(
        {
            "type": "test.incremented",
            "stream": stream,
            "version": version,
            "position": position,
            "recorded_at": 0,
            "data": {"by": 666},
        }
    ).encode()


@pytest.fixture
async def forger(runtime: Runtime) -> AsyncIterator[Client]:
    """A client holding the host role's key (it may publish events) but not the events key."""
    assert runtime.bus.keyring is not None
    nc = await runtime.bus.connect(Role.HOST, name="forger")
    yield nc
    await nc.close()


async def test_a_forged_event_never_reaches_a_follower_and_cannot_take_the_real_ones_id(
    runtime: Runtime, forger: Client
) -> None:
    heard: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_event(_: int, msg: Msg) -> None:
        heard.put_nowait(json.loads(msg.data))

    subject = subject_for("counter:1")
    async with Follower(runtime.gateway_nc, subject, on_event, signer=runtime.signer):
        # The forger goes first, with the id the real event would have had before signing,
        # with a signature header of its own making, and with none.
        js = forger.jetstream()
        await js.publish(subject, forged("counter:1", 1, 1), headers={MSG_ID_HEADER: "counter:1:1"})
        await js.publish(subject, forged("counter:1", 1, 1), headers={SIG_HEADER: "0" * 64})
        await runtime.store.append("counter:1", 0, [Incremented(1)])
        first = await asyncio.wait_for(heard.get(), 10)
        assert first["data"] == {"by": 1} and first["version"] == 1
        await runtime.store.append("counter:1", 1, [Incremented(2)])
        second = await asyncio.wait_for(heard.get(), 10)
        assert second["data"] == {"by": 2}
    assert heard.empty()
    assert runtime.signer is not None and runtime.signer.dropped == 2


async def read_feed(
    url: str, count: int, started: asyncio.Event | None = None
) -> list[dict[str, Any]]:
    """The first ``count`` records of the console's event feed, as a browser reads them;
    ``started`` is set once the first record (the store's backlog) has arrived."""
    found: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("data:"):
                found.append(json.loads(line[5:]))
                if started is not None:
                    started.set()
                if len(found) == count:
                    return found
    return found


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned-bus"])
async def test_an_out_of_range_event_cannot_silence_the_console_feed(
    runtime: Runtime, forger: Client, signed: bool
) -> None:
    """Signed: the forgery is dropped. Without the events key (NATS_KEYS=none), the forgery
    is shown, but the real events after it still are."""
    (old,) = await runtime.store.append("counter:7", 0, [Incremented(1)])
    feed = EventFeed(runtime.gateway_nc, runtime.store, runtime.signer if signed else None)
    app = web.Application()
    app.router.add_get("/console/events", feed.stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        url = f"http://127.0.0.1:{port}/console/events"
        want = 2 if signed else 3
        started = asyncio.Event()
        reading = asyncio.create_task(read_feed(url, want, started))
        # The feed follows the stream before it reads its backlog from the store: once the
        # backlog's first record is here, what follows can only come live.
        await asyncio.wait_for(started.wait(), 15)
        await forger.jetstream().publish(
            subject_for("counter:7"), forged("counter:7", 2, 10**12), headers={SIG_HEADER: "0" * 64}
        )
        await runtime.store.append("counter:7", 1, [Incremented(2)])
        records = await asyncio.wait_for(reading, 15)
    finally:
        await runner.cleanup()
    assert records[0] == json.loads(wire_payload(old))
    assert records[-1]["data"] == {"by": 2} and records[-1]["stream"] == "counter:7"
    assert any(r["data"] == {"by": 666} for r in records) is not signed
