"""The outbox relay: publishes stored events into the JetStream stream ``CAIRN_EVENTS`` in
global order, each exactly once.

Its cursor (the last published position, its high-water mark) is kept in the store. Fresh
appends are handed over in memory so the usual path costs no extra read; after an outage, or
whenever the in-memory hand-over has a gap, the relay reads from the store from its cursor. It
publishes only while connected, a batch at a time with every acknowledgement in flight at once,
and advances the cursor only after JetStream acknowledged the whole batch, so a NATS outage
delays events and loses none. Each message carries ``Nats-Msg-Id: <stream>:<version>``:
whatever a relay publishes again (after a crash between a publish and its cursor write, or
because a second relay on the same store publishes the same events) JetStream drops within its
duplicate window (``events.jetstream``), so the stream holds every event once.
A stored row that cannot be decoded is stepped over with a log line naming it (its stream is
quarantined by the actor host; ``cairn store check`` lists it), so one bad row never stalls
every event after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque

from nats.aio.client import Client
from nats.js.api import PubAck
from nats.js.errors import NoStreamResponseError

from events.codec import to_dict
from events.jetstream import MSG_ID_HEADER, StreamSettings, ensure_stream, msg_id
from events.signing import SIG_HEADER, EventSigner
from events.store import EventStore, Recorded
from events.subjects import subject_for

log = logging.getLogger(__name__)


def wire_payload(record: Recorded) -> bytes:
    return json.dumps(
        {
            "type": record.event.type_name,
            "stream": record.stream,
            "version": record.version,
            "position": record.position,
            "recorded_at": record.recorded_at,
            "data": to_dict(record.event),
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


# Events read from the store at a time, and published at a time before their acknowledgements
# are awaited (the loop step that publishes a window, and the one that resolves its acks, each
# grow with it).
BATCH_SIZE = 200
WINDOW = 50


class OutboxRelay:
    def __init__(
        self,
        store: EventStore,
        nc: Client,
        *,
        name: str = "outbox",
        batch_size: int = BATCH_SIZE,
        cursor_save_interval: float = 0.5,
        retry_interval: float = 0.2,
        idle_poll: float = 1.0,
        ack_timeout: float = 5.0,
        stream: StreamSettings | None = None,
        signer: EventSigner | None = None,
    ) -> None:
        self._store = store
        self._signer = signer
        self._nc = nc
        self._js = nc.jetstream(publish_async_max_pending=max(batch_size, 4000))
        self._stream = stream or StreamSettings()
        self._stream_ready = False
        self._ack_timeout = ack_timeout
        self._idle_poll = idle_poll
        self._name = name
        self._batch_size = batch_size
        self._save_interval = cursor_save_interval
        self._retry_interval = retry_interval
        self._fresh: deque[Recorded] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.cursor = 0
        self._saved_cursor = 0
        self._last_save = 0.0

    async def start(self) -> None:
        # Created before anything is published, so subscribers can bind to it at once.
        await ensure_stream(self._js, self._stream)
        self._stream_ready = True
        self.cursor = self._saved_cursor = await self._store.load_cursor(self._name)
        self._store.add_listener(self._on_append)
        self._wake.set()  # catch up with whatever was stored while nobody published
        self._task = asyncio.create_task(self._run(), name=f"relay:{self._name}")

    async def stop(self, timeout: float = 5.0) -> None:
        self._store.remove_listener(self._on_append)
        if self._task is not None:
            # Let a publish in flight finish: cancelling nats-py inside flush() leaves a
            # cancelled PONG future behind, its read loop then fails, and the reconnect that
            # follows re-sends buffered messages (a duplicate for every subscriber).
            self._stopping = True
            self._wake.set()
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            self._task = None
        if self.cursor != self._saved_cursor:
            await self._store.save_cursor(self._name, self.cursor)
            self._saved_cursor = self.cursor

    def _on_append(self, records: list[Recorded]) -> None:
        self._fresh.extend(records)
        self._wake.set()

    async def _run(self) -> None:
        while not self._stopping:
            # Woken by this process's appends; otherwise it looks at the store now and then,
            # for appends made by another process on the same store (another host), which it
            # publishes too (JetStream drops what that host's relay already did) so its
            # cursor stays current.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._idle_poll)
            self._wake.clear()
            try:
                await self._drain()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("relay: publishing paused at position %d: %s", self.cursor, exc)
                self._fresh.clear()  # the store has them; read from the cursor next time
                await asyncio.sleep(self._retry_interval)
                self._wake.set()

    def _take_fresh(self) -> list[Recorded]:
        while self._fresh and self._fresh[0].position <= self.cursor:
            self._fresh.popleft()
        if not self._fresh or self._fresh[0].position != self.cursor + 1:
            return []
        batch: list[Recorded] = []
        expected = self.cursor + 1
        while self._fresh and len(batch) < self._batch_size:
            if self._fresh[0].position != expected:
                break
            batch.append(self._fresh.popleft())
            expected += 1
        return batch

    async def _drain(self) -> None:
        while True:
            if self._stopping and not self._nc.is_connected:
                return
            if not self._nc.is_connected:
                # Publishing now would only fill the client's reconnect buffer, and replaying
                # from the cursor later would then deliver those events twice out of order.
                await asyncio.sleep(self._retry_interval)
                continue
            batch = self._take_fresh()
            from_memory = bool(batch)
            last = batch[-1].position if batch else self.cursor
            if not batch:
                page = await self._store.read_page(self.cursor, self._batch_size)
                self._fresh.clear()
                for damaged in page.damaged:
                    log.error("relay: not publishing a damaged event: %s", damaged.message)
                batch, last = page.records, page.last_position
            if last == self.cursor:
                return
            if batch:
                await self._publish(batch)
            self.cursor = last
            await self._maybe_save_cursor()
            if from_memory and not self._fresh:
                # Every append of this store passes through the listener, so an empty
                # hand-over means there is nothing newer in the store either.
                return

    async def _publish(self, batch: list[Recorded]) -> None:
        """Publish ``batch`` and return once JetStream acknowledged every message of it."""
        if not self._stream_ready:
            await ensure_stream(self._js, self._stream)
            self._stream_ready = True
        acks: list[asyncio.Future[PubAck]] = []
        try:
            for start in range(0, len(batch), WINDOW):
                # publish_async does not suspend, and nats-py resolves every acknowledgement
                # that has arrived in one step of the loop: a window at a time bounds both
                # (500 events at once held the loop 30-44 ms, and a burst of 200 acks
                # ~10 ms, each seen in the p99 of the queries served meanwhile).
                window = []
                for record in batch[start : start + WINDOW]:
                    subject, payload, headers = self._message(record)
                    window.append(await self._js.publish_async(subject, payload, headers=headers))
                acks.extend(window)
                async with asyncio.timeout(self._ack_timeout):
                    answers = await asyncio.gather(*window, return_exceptions=True)
                for answer in answers:
                    if isinstance(answer, BaseException):
                        raise answer
        except NoStreamResponseError:
            self._stream_ready = False  # the stream is gone (a wiped server): create it again
            raise
        finally:
            for ack in acks:
                ack.cancel()  # frees its slot in nats-py's pending window; no-op when done

    def _message(self, record: Recorded) -> tuple[str, bytes, dict[str, str]]:
        """Subject, payload and headers of one event: its de-duplication id and, with a
        signer, its signature (``events/signing.py``)."""
        subject, payload = subject_for(record.stream), wire_payload(record)
        if self._signer is None:
            return subject, payload, {MSG_ID_HEADER: msg_id(record)}
        signature = self._signer.sign(subject, payload)
        return subject, payload, {MSG_ID_HEADER: msg_id(record, signature), SIG_HEADER: signature}

    async def _maybe_save_cursor(self) -> None:
        now = time.monotonic()
        if now - self._last_save >= self._save_interval:
            self._last_save = now
            await self._store.save_cursor(self._name, self.cursor)
            self._saved_cursor = self.cursor
