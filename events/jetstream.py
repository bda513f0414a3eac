"""The JetStream stream every stored event is published into: its name, its settings, and
creating (or updating) it.

One stream, ``CAIRN_EVENTS``, holds every subject ``cairn.evt.>`` on file storage. The relay
publishes each event with the header ``Nats-Msg-Id: <stream>:<version>``; JetStream drops a
second message with an id it has seen within the duplicate window, so a restarted relay, or a
second relay on the same store, never stores an event twice. Subscribers read the stream from
a sequence of their choosing, so one that was disconnected resumes where it stopped.
"""

from __future__ import annotations

import logging

import attrs
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, BadRequestError, NotFoundError

from events.signing import ID_SIG_CHARS
from events.store import Recorded
from events.subjects import EVENT_SUBJECT_PREFIX

STREAM = "CAIRN_EVENTS"
MSG_ID_HEADER = "Nats-Msg-Id"
# JetStream's own default, said explicitly: ids are remembered this long. A relay that died
# between a publish and its cursor write (at most CURSOR_SAVE_INTERVAL of events) and comes
# back later than this publishes those events a second time.
DUPLICATE_WINDOW = 120.0
DEFAULT_MAX_AGE = 7 * 24 * 3600.0
# The stream's size cap: past it the oldest events go first (the store keeps them all). Only
# hosts can publish into it (events/permissions.py); the cap bounds what a host gone wrong
# could fill the server's disk with.
DEFAULT_MAX_BYTES = 1 << 30
# NATS's own default largest message: no event is bigger.
MAX_MSG_SIZE = 1 << 20
# nats-server's answer when a stream exists with another configuration.
_STREAM_NAME_IN_USE = 10058
# nats-server's answer when a stream's max_bytes is more than its JetStream store may still
# reserve (by default a share of the disk's free space when the server started).
_INSUFFICIENT_RESOURCES = 10047

log = logging.getLogger(__name__)


@attrs.frozen
class StreamSettings:
    """What the events stream is created with: ``CAIRN_EVENTS_REPLICAS`` (1 for the embedded
    server, 3 in a cluster) and ``CAIRN_EVENTS_MAX_AGE`` (seconds an event stays in the
    stream; the event store keeps it for ever) and ``CAIRN_EVENTS_MAX_BYTES`` (the stream's
    size, oldest events dropped first)."""

    replicas: int = 1
    max_age: float = DEFAULT_MAX_AGE
    max_bytes: int = DEFAULT_MAX_BYTES
    duplicate_window: float = DUPLICATE_WINDOW

    def config(self) -> StreamConfig:
        return StreamConfig(
            name=STREAM,
            description="cairn's stored events, published by the outbox relay",
            subjects=[f"{EVENT_SUBJECT_PREFIX}.>"],
            retention=RetentionPolicy.LIMITS,
            discard=DiscardPolicy.OLD,
            storage=StorageType.FILE,
            num_replicas=self.replicas,
            max_age=self.max_age,
            max_bytes=self.max_bytes,
            max_msg_size=MAX_MSG_SIZE,
            duplicate_window=self.duplicate_window,
        )


def msg_id(record: Recorded, signature: str | None = None) -> str:
    """The de-duplication id of one event: its stream and version, unique in the store, and
    when it is signed a piece of its signature, so no one without the key can claim the id
    first (``events/signing.py``)."""
    if signature is None:
        return f"{record.stream}:{record.version}"
    return f"{record.stream}:{record.version}:{signature[:ID_SIG_CHARS]}"


async def ensure_stream(js: JetStreamContext, settings: StreamSettings) -> None:
    """Create the events stream, or bring an existing one to ``settings``.

    JetStream reserves a stream's ``max_bytes`` up front and refuses one larger than its store
    has room for. On a small disk the cap is halved until it fits (never below one largest
    message) rather than keeping cairn from starting: the store holds every event anyway, and
    a smaller stream only shortens how far back a subscriber can resume from NATS."""
    max_bytes = settings.max_bytes
    while True:
        config = attrs.evolve(settings, max_bytes=max_bytes).config()
        try:
            await _create_or_update(js, config)
            break
        except APIError as exc:
            if exc.err_code != _INSUFFICIENT_RESOURCES:
                raise
            # nats-server counts a stream's own reservation against an update of it (even to
            # the same size), so a stream that filled a small store can no longer be changed:
            # it is kept as it is, and it still works.
            existing = await _existing_max_bytes(js)
            if existing is not None:
                max_bytes = existing
                break
            smaller = max_bytes // 2
            if smaller < MAX_MSG_SIZE:
                raise
            max_bytes = smaller
    if max_bytes != settings.max_bytes:
        log.warning(
            "the events stream is capped at %d MiB, not CAIRN_EVENTS_MAX_BYTES=%d MiB: "
            "JetStream's store has no room for more",
            max_bytes >> 20,
            settings.max_bytes >> 20,
        )


async def _existing_max_bytes(js: JetStreamContext) -> int | None:
    try:
        info = await js.stream_info(STREAM)
    except NotFoundError:
        return None
    # The server always says; -1 is its word for "no cap".
    return -1 if info.config.max_bytes is None else info.config.max_bytes


async def _create_or_update(js: JetStreamContext, config: StreamConfig) -> None:
    try:
        await js.add_stream(config)
    except BadRequestError as exc:
        if exc.err_code != _STREAM_NAME_IN_USE:
            raise
        await js.update_stream(config)
