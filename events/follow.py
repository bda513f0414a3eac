"""Following the events stream: every event on a subject, from a chosen start, in order, once,
across NATS disconnects and server restarts.

A :class:`Follower` reads the JetStream stream ``CAIRN_EVENTS`` through an ephemeral push
consumer (in memory, one replica, no acks: the stream keeps the events, the follower keeps its
place). A reader's consumer is made by a host on its behalf (``events/consumers.py``): the
follower subscribes to a delivery subject of its own and asks for it; a host's own follower
may make its consumer itself (``direct``).

It remembers the stream sequence of the last event it handed over; whenever the consumer may
have lost something (the client reconnected, a delivery skipped a consumer sequence,
heartbeats stopped because a restarted server forgot the consumer) it drops that consumer
and creates a new one that starts right after that sequence. Deliveries of a dropped
consumer are ignored and nothing at or before the last sequence is handed over again: no gap,
no duplicate. With a signer, an event no cairn host signed is dropped (``events/signing.py``).

nats-py's own ``ordered_consumer`` does most of this, but after a disconnect it restarts from
sequence 1 when nothing had arrived yet (a whole history for a follower that asked for new
events only), and it notices a restarted server only after two missed heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import secrets
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from events.bus import command, flush_all
from events.consumers import INACTIVE_THRESHOLD, FollowRequest, consumer_config, deliver_subject
from events.jetstream import STREAM
from events.permissions import FOLLOW
from events.signing import EventSigner
from events.tasks import cancel

__all__ = ["HEARTBEAT", "INACTIVE_THRESHOLD", "EventCallback", "Follower"]

log = logging.getLogger(__name__)

EventCallback = Callable[[int, Msg], Awaitable[None]]

# The server sends an idle heartbeat this often when there is nothing to deliver; two missed
# ones mean the consumer is gone (a restarted server) or the connection is dead.
HEARTBEAT = 1.0
# How long a host may take to make a consumer.
FOLLOW_TIMEOUT = 5.0
_STATUS = "Status"
_LAST_CONSUMER = "Nats-Last-Consumer"


class Follower:
    """Calls ``on_event(stream_sequence, msg)`` for every event on ``subject`` from the start
    given (``after``: a stream sequence; ``since``: a time; neither: only events published
    from now on), one at a time, in stream order, each once."""

    def __init__(
        self,
        nc: Client,
        subject: str,
        on_event: EventCallback,
        *,
        after: int | None = None,
        since: datetime.datetime | None = None,
        heartbeat: float = HEARTBEAT,
        signer: EventSigner | None = None,
        direct: bool = False,
    ) -> None:
        self._nc = nc
        self._signer = signer
        # A host's connection may call the JetStream API itself; a reader's asks a host.
        self._js = nc.jetstream() if direct else None
        self.subject = subject
        self._on_event = on_event
        self.last_seq = after
        self._since = since
        self._heartbeat = heartbeat
        self._sub: Subscription | None = None
        self._inbox = ""
        self._next_dseq = 1
        self._heard = 0.0
        self._reconnects = 0
        self._deliver = asyncio.Lock()
        self._watchdog: asyncio.Task[None] | None = None
        # Why the consumer must be replaced, set by a delivery; the watchdog replaces it (a
        # subscription's own callback cannot unsubscribe it: that cancels the callback).
        self._stale: str | None = None
        self._wake = asyncio.Event()
        self._closed = False
        self.resets = 0

    async def start(self) -> Follower:
        """Subscribe; raises if JetStream does not answer (the caller reports the bus down)."""
        try:
            if self._js is not None and self.last_seq is None and self._since is None:
                info = await self._js.stream_info(STREAM)
                self.last_seq = info.state.last_seq
            await self._subscribe()
        except BaseException:
            await self._drop_subscription()
            raise
        self._watchdog = asyncio.create_task(self._watch(), name=f"follow:{self.subject}")
        return self

    async def stop(self) -> None:
        self._closed = True
        await cancel(self._watchdog)
        self._watchdog = None
        await self._drop_subscription()

    async def __aenter__(self) -> Follower:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _subscribe(self) -> None:
        token = secrets.token_hex(12)
        self._inbox = self._nc.new_inbox() if self._js is not None else deliver_subject(token)
        self._next_dseq = 1
        self._stale = None
        self._reconnects = self._nc.stats["reconnects"]
        inbox = self._inbox

        async def on_msg(msg: Msg) -> None:
            # A delivery carries its stream subject, not the inbox: the closure tells which
            # consumer it came from.
            if inbox == self._inbox:
                await self._on_msg(msg)

        self._sub = await self._nc.subscribe(inbox, cb=on_msg)
        self._heard = asyncio.get_running_loop().time()
        if self._js is not None:
            config = consumer_config(
                inbox,
                self.subject,
                after=self.last_seq,
                since=self._since,
                heartbeat=self._heartbeat,
            )
            await self._js.add_consumer(STREAM, config)
            return
        # The subscription reaches the server before the request: the consumer's first
        # deliveries find it.
        await flush_all(self._nc)
        request = FollowRequest(token, self.subject, self.last_seq, self._since, self._heartbeat)
        reply = await command(self._nc, FOLLOW, request.fields(), FOLLOW_TIMEOUT)
        if self.last_seq is None and self._since is None:
            self.last_seq = int(reply["after"])

    async def _drop_subscription(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            # The server removes the consumer once its inbox has no interest.
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _reset(self, why: str) -> None:
        """Replace the consumer with one that starts right after the last event handed over."""
        self.resets += 1
        log.debug("follow %s: new consumer after %s (%s)", self.subject, self.last_seq, why)
        await self._drop_subscription()
        await self._subscribe()

    async def _on_msg(self, msg: Msg) -> None:
        self._heard = asyncio.get_running_loop().time()
        headers = msg.headers or {}
        if _STATUS in headers:
            # An idle heartbeat says which consumer sequence came last: a mismatch means the
            # final deliveries before the silence were lost.
            last = headers.get(_LAST_CONSUMER)
            if last is not None and int(last) != self._next_dseq - 1:
                self._mark_stale("a heartbeat names a delivery never received")
            return
        meta = msg.metadata
        if self._stale is not None:
            return
        if meta.sequence.consumer != self._next_dseq:
            self._mark_stale("a delivery skipped a consumer sequence")
            return
        self._next_dseq += 1
        async with self._deliver:
            seq = meta.sequence.stream
            if self.last_seq is not None and seq <= self.last_seq:
                return
            self.last_seq = seq
            if self._signer is not None and not self._signer.genuine(msg):
                return
            try:
                await self._on_event(seq, msg)
            except Exception:
                log.exception("follow %s: handling event %d failed", self.subject, seq)

    def _mark_stale(self, why: str) -> None:
        self._stale = why
        self._wake.set()

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._heartbeat / 4)
            self._wake.clear()
            if not self._nc.is_connected:
                continue
            why = self._stale
            if why is not None:
                pass
            elif self._nc.stats["reconnects"] != self._reconnects:
                why = "the client reconnected"
            elif loop.time() - self._heard > 2 * self._heartbeat:
                why = "heartbeats stopped"
            if why is None:
                continue
            try:
                await self._reset(why)
            except Exception as exc:  # JetStream not back yet: the next round tries again
                log.debug("follow %s: consumer not recreated yet: %s", self.subject, exc)
                self._heard = loop.time()
