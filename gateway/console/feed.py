"""``GET /console/events``: the live event feed of the whole platform, as server-sent events.

Every stored event is published into JetStream as ``cairn.evt.<aggregate>.<id>`` by the outbox
relay (``events/relay.py``); the feed follows all of them (``events/follow.py``: after a NATS
outage it resumes from the last sequence it saw) and sends each as one SSE record, ``id:`` its
global position in the store and ``data:`` the published JSON
(``{type, stream, version, position, recorded_at, data}``).

A new client first gets the last ``backlog`` events from the store, so the page is not empty; a
client that re-attaches with ``Last-Event-ID`` gets what it missed from the store, then the live
events. The store read overlaps the follow, so a live event at or before the last position the
store gave is dropped; after that every live event is sent as it comes (its position is the
store's, not a counter the feed trusts: one event with an out-of-range position, forged or
not, cannot silence the events after it). Events no cairn host signed are dropped by the
follower. Nothing is kept between requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web
from nats.aio.client import Client

from events.bus import BUS_DOWN
from events.follow import Follower
from events.relay import wire_payload
from events.signing import EventSigner
from events.store import EventStore
from events.subjects import EVENT_SUBJECT_PREFIX
from gateway.http.sse import EventStream, last_event_id

BACKLOG = 200
MAX_BACKLOG = 500
# How often a quiet feed looks whether its client is still there.
CLIENT_CHECK = 5.0
# A client that cannot keep up gets its stream cut (it re-attaches with Last-Event-ID and
# catches up from the store) rather than growing the server's memory without bound.
QUEUE_LIMIT = 10_000


def parse_after(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


class EventFeed:
    def __init__(self, nc: Client, store: EventStore, signer: EventSigner | None = None) -> None:
        self.nc = nc
        self.store = store
        self.signer = signer

    async def _history(self, after: int | None) -> list[dict[str, Any]]:
        if after is None:
            last = await self.store.last_position()
            after = max(0, last - BACKLOG)
        page = await self.store.read_page(after, MAX_BACKLOG)
        return [json.loads(wire_payload(r)) for r in page.records]

    async def stream(self, request: web.Request) -> web.StreamResponse:
        header = last_event_id(request)
        after = parse_after(header)
        if header is not None and after is None:
            return web.Response(status=400, text="Last-Event-ID: must be an event position")
        if not self.nc.is_connected:
            # The browser's EventSource tries again by itself (with Last-Event-ID).
            return web.Response(status=503, text=BUS_DOWN)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        async def on_event(_: int, msg: Any) -> None:
            if queue.qsize() >= QUEUE_LIMIT:
                queue.put_nowait(None)  # too far behind: end, and let the client re-attach
                return
            with contextlib.suppress(ValueError):
                queue.put_nowait(json.loads(msg.data))

        follower = Follower(self.nc, f"{EVENT_SUBJECT_PREFIX}.>", on_event, signer=self.signer)
        try:
            await follower.start()
        except Exception:
            return web.Response(status=503, text=BUS_DOWN)
        try:
            async with EventStream(request, numbered=False) as sse:
                # Live events up to here came from the store already.
                from_store = after if after is not None else -1
                for old in await self._history(after):
                    from_store = old["position"]
                    if not await sse.send(old, id=from_store):
                        return sse.response
                while (item := await _next(request, queue)) is not None:
                    position = item.get("position")
                    if not isinstance(position, int) or position <= from_store:
                        continue
                    if not await sse.send(item, id=position):
                        break
            return sse.response
        finally:
            with contextlib.suppress(Exception):
                await follower.stop()


async def _next(
    request: web.Request, queue: asyncio.Queue[dict[str, Any] | None]
) -> dict[str, Any] | None:
    """The next live event; None when the feed should end (the client left, or fell behind)."""
    while True:
        try:
            return await asyncio.wait_for(queue.get(), CLIENT_CHECK)
        except TimeoutError:
            transport = request.transport
            if transport is None or transport.is_closing():
                return None
