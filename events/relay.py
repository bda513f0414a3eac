"""The outbox relay: publishes stored events into the JetStream stream ``CAIRN_EVENTS`` in
global order, each exactly once.

Its cursor (the last published position, its high-water mark) is kept in the store. Fresh
appends are handed over in memory so the usual path costs no extra read; after an outage, or
whenever the in-memory hand-over has a gap, the relay reads from the store from its cursor. It
publishes only while connected, a batch at a time with every acknowledgement in flight at once,
and advances the cursor only after JetStream acknowledged the whole batch, so a NATS outage
delays events and loses none.

Every host of a cluster runs a relay on the one store, and each publishes every event, in
position order. The stream must still hold each event once, in order, however long a relay was
away (a host paused for minutes wakes up with an old cursor). So a relay publishes nothing the
stream already holds, and nothing out of turn: it knows the stream's last message (its
sequence, and the store position it carries: read with one request whenever it publishes what
it read from the store, or when another relay got in first), skips every event at or before
that position, and publishes each message with ``Nats-Expected-Last-Sequence`` (the sequence
it must follow), a window of them in flight at once. When another relay published meanwhile,
JetStream refuses the message (wrong last sequence) and every one after it in the window; the
relay looks at the stream again and goes on from there. The order of positions in the stream
is then the store's, and an event stands in it once whatever the pause, not only within
JetStream's duplicate window. Each message still carries ``Nats-Msg-Id: <stream>:<version>``
(``events.jetstream``): a subscriber's de-duplication key.
A stored row that cannot be decoded is stepped over with a log line naming it (its stream is
quarantined by the actor host; ``cairn store check`` lists it), so one bad row never stalls
every event after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections import deque

import attrs
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import PubAck, RawStreamMsg
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError

from events.codec import to_dict
from events.jetstream import MSG_ID_HEADER, STREAM, StreamSettings, ensure_stream, msg_id
from events.signing import SIG_HEADER, EventSigner
from events.store import EventStore, Recorded
from events.subjects import EVENT_SUBJECT_PREFIX, subject_for
from events.tasks import cancel

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

EXPECTED_LAST_SEQUENCE = "Nats-Expected-Last-Sequence"
# JetStream's answer to a message whose expected last sequence is not the stream's.
WRONG_LAST_SEQUENCE = 10071
# A turn of the relay's loop this much later than due means the process was stopped (SIGSTOP,
# a frozen VM) or starved: the catch-up that follows is logged.
PAUSE_NOTICED = 5.0
# How many messages at the stream's end the relay steps over when they are not cairn's events.
UNTRUSTED_WALK = 64


@attrs.frozen
class StreamEnd:
    """The events stream's last message: its sequence, and the store position it carries
    (None when unknown: the stream's messages all aged out)."""

    seq: int
    position: int | None


class _Conflict(Exception):
    """Another relay published into the stream since this one last looked."""


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
        # The stream's end as this relay last knew it; None: look it up before publishing.
        self._end: StreamEnd | None = None
        # Acknowledgements of this relay's publishes, by reply subject (its own inbox: nats-py's
        # publish_async never resolves a refused publish, it raises inside its callback).
        self._inbox = ""
        self._acks: dict[str, asyncio.Future[PubAck]] = {}
        self._ack_sub: Subscription | None = None
        self._reply_ids = itertools.count()
        # Events found in the stream already and so not published again (since start).
        self.skipped = 0
        self._last_turn = 0.0

    async def start(self) -> None:
        # Created before anything is published, so subscribers can bind to it at once.
        await ensure_stream(self._js, self._stream)
        self._stream_ready = True
        self.cursor = self._saved_cursor = await self._store.load_cursor(self._name)
        self._inbox = self._nc.new_inbox()
        self._ack_sub = await self._nc.subscribe(self._inbox + ".*", cb=self._on_ack)
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
                await cancel(self._task)
            self._task = None
        if self.cursor != self._saved_cursor:
            await self._store.save_cursor(self._name, self.cursor)
            self._saved_cursor = self.cursor
        if self._ack_sub is not None:
            with contextlib.suppress(Exception):
                await self._ack_sub.unsubscribe()
            self._ack_sub = None

    def _on_append(self, records: list[Recorded]) -> None:
        self._fresh.extend(records)
        self._wake.set()

    async def _run(self) -> None:
        self._last_turn = time.monotonic()
        while not self._stopping:
            # Woken by this process's appends; otherwise it looks at the store now and then,
            # for appends made by another process on the same store (another host), which it
            # publishes unless that host's relay already did, so its cursor stays current.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._idle_poll)
            self._wake.clear()
            now = time.monotonic()
            away, self._last_turn = now - self._last_turn, now
            try:
                if away > self._idle_poll + PAUSE_NOTICED:
                    await self._catch_up(away)
                else:
                    await self._drain()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("relay: publishing paused at position %d: %s", self.cursor, exc)
                self._fresh.clear()  # the store has them; read from the cursor next time
                await asyncio.sleep(self._retry_interval)
                self._wake.set()

    async def _catch_up(self, away: float) -> None:
        """Drain after a pause, saying so: where it resumed, and what it did not publish
        again because another host's relay had."""
        start, skipped = self.cursor, self.skipped
        log.info("relay: resumed after %.1f s away, from position %d", away, start)
        await self._drain()
        log.info(
            "relay: caught up from position %d to %d after %.1f s away; %d events were in "
            "the events stream already and were not published again",
            start,
            self.cursor,
            away,
            self.skipped - skipped,
        )

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
                if not from_memory:
                    # Read from the store: another host's relay may have published it.
                    self._end = None
                await self._publish(batch)
            self.cursor = last
            await self._maybe_save_cursor()
            if from_memory and not self._fresh:
                # Every append of this store passes through the listener, so an empty
                # hand-over means there is nothing newer in the store either.
                return

    async def _publish(self, batch: list[Recorded]) -> None:
        """Publish what of ``batch`` the stream does not hold yet, in order, after its last
        message; return once JetStream acknowledged every message of it."""
        if not self._stream_ready:
            await ensure_stream(self._js, self._stream)
            self._stream_ready = True
        pending = batch
        while pending:
            end = self._end if self._end is not None else await self._look_up_end()
            self._end = end
            if end.position is not None:
                held = sum(1 for r in pending if r.position <= end.position)
                self.skipped += held
                pending = [r for r in pending if r.position > end.position]
            window = pending[:WINDOW]
            if not window:
                return
            try:
                await self._publish_window(window, end)
            except _Conflict:
                self._end = None  # another relay got in first: look at the stream again
                continue
            pending = pending[len(window) :]

    async def _look_up_end(self) -> StreamEnd:
        try:
            last = await self._js.get_last_msg(STREAM, f"{EVENT_SUBJECT_PREFIX}.>")
        except NotFoundError:
            info = await self._js.stream_info(STREAM)
            seq = info.state.last_seq
            # An empty stream holds nothing (0); one whose messages all aged out holds
            # nothing we can place: publish from the cursor.
            return StreamEnd(seq, 0 if seq == 0 else None)
        except NoStreamResponseError:
            self._stream_ready = False
            raise
        end = int(last.seq or 0)
        # The stream's last message says which store position the stream holds up to, but
        # only a message cairn published may say so: a forgery on the bus (a leaked host
        # credential) claiming a position would otherwise make every relay skip the real
        # events up to it. So walk back past messages that are not cairn's (a bounded number:
        # beyond it, publish from the cursor and let the msg-id window drop repeats).
        msg: RawStreamMsg | None = last
        for _ in range(UNTRUSTED_WALK):
            if msg is None:
                return StreamEnd(end, None)
            position = await self._held_position(msg)
            if position is not None:
                return StreamEnd(end, position)
            seq = int(msg.seq or 0) - 1
            if seq <= 0:
                return StreamEnd(end, 0)  # nothing in the stream is cairn's
            msg = None
            with contextlib.suppress(NotFoundError):
                msg = await self._js.get_msg(STREAM, seq)
        return StreamEnd(end, None)

    async def _held_position(self, msg: RawStreamMsg) -> int | None:
        """The store position ``msg`` carries when it is an event this store holds, signed
        by cairn when the bus is signed; None for anything else."""
        try:
            wire = json.loads(msg.data or b"{}")
            position, stream, version = wire["position"], wire["stream"], wire["version"]
        except (ValueError, TypeError, KeyError):
            return None
        if not isinstance(position, int) or position < 1:
            return None
        if self._signer is not None and not self._signer.signed(
            msg.subject or "", msg.data or b"", msg.headers
        ):
            return None
        page = await self._store.read_page(position - 1, 1)
        stored = page.records[0] if page.records else None
        if stored is None or stored.position != position:
            return None
        if (stored.stream, stored.version) != (stream, version):
            return None
        return position

    async def _publish_window(self, window: list[Recorded], end: StreamEnd) -> None:
        """Publish ``window`` after ``end``, every acknowledgement in flight at once (a window
        bounds the loop step that sends them and the one that resolves their acks). Raises
        _Conflict when the stream's end was not ``end`` (or moved meanwhile); ``self._end``
        then covers what was accepted before the refusal."""
        acks: list[asyncio.Future[PubAck]] = []
        replies: list[str] = []
        try:
            for i, record in enumerate(window):
                subject, payload, headers = self._message(record)
                headers[EXPECTED_LAST_SEQUENCE] = str(end.seq + i)
                reply = f"{self._inbox}.{next(self._reply_ids)}"
                future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
                self._acks[reply] = future
                replies.append(reply)
                acks.append(future)
                await self._nc.publish(subject, payload, reply=reply, headers=headers)
            async with asyncio.timeout(self._ack_timeout):
                answers = await asyncio.gather(*acks, return_exceptions=True)
        finally:
            for reply in replies:
                self._acks.pop(reply, None)
        accepted = 0
        for i, answer in enumerate(answers):
            if (
                isinstance(answer, PubAck)
                and not answer.duplicate
                and answer.seq == end.seq + i + 1
            ):
                accepted += 1
                continue
            if accepted:
                self._end = StreamEnd(end.seq + accepted, window[accepted - 1].position)
            if isinstance(answer, APIError) and answer.err_code == WRONG_LAST_SEQUENCE:
                raise _Conflict()
            if isinstance(answer, PubAck):
                raise _Conflict()  # a duplicate: the stream holds it already
            if isinstance(answer, NoStreamResponseError):
                self._stream_ready = False  # the stream is gone (a wiped server)
            if isinstance(answer, BaseException):
                raise answer
            raise _Conflict()
        self._end = StreamEnd(end.seq + accepted, window[-1].position)

    async def _on_ack(self, msg: Msg) -> None:
        future = self._acks.get(msg.subject)
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get("Status") == "503":
            future.set_exception(NoStreamResponseError())
            return
        try:
            answer = json.loads(msg.data)
            if "error" in answer:
                APIError.from_error(answer["error"])  # always raises, the error's own class
            else:
                future.set_result(PubAck.from_response(answer))
        except APIError as exc:
            future.set_exception(exc)
        except (ValueError, TypeError, KeyError) as exc:
            future.set_exception(exc)

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
