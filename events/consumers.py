"""Consumers of the events stream that a host makes for a reader.

A reader (a gateway, an observer) lives in an account without JetStream
(``events/permissions.py``): it may not call the JetStream API, where it could name the subject
JetStream answers on, or the subject a consumer delivers to, and so write into the lease bucket,
the code store or the API itself. Instead it subscribes to a subject of its own choosing,
``cairn.deliver.<token>``, and asks a host on ``cairn.events.follow`` for a consumer that
delivers there. The host makes it, in the hosts' account, delivering to
``cairn.deliver.<role>.<token>``: the subject the hosts' account lends to that reader's
account alone (the asker's role is the service it reached, never a field it sent). So a reader
chooses only which events, from where, and a token; never a subject.

The consumer is the one :class:`events.follow.Follower` used to make itself: ephemeral, in
memory, one replica, no acks, idle heartbeats; the server removes it once its subject has had
no listener for ``INACTIVE_THRESHOLD``.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Mapping
from typing import Any

import attrs
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from events.bus import flush_all, serve_json, unsubscribe_all
from events.errors import CommandFailed
from events.jetstream import STREAM
from events.permissions import DELIVER, FOLLOW, Role
from events.subjects import EVENT_SUBJECT_PREFIX

log = logging.getLogger(__name__)

# A consumer nobody listens to any more is removed by the server after this long.
INACTIVE_THRESHOLD = 30.0
# Heartbeats a reader may ask for, in seconds.
MIN_HEARTBEAT = 0.05
MAX_HEARTBEAT = 30.0
QUEUE = "events-follow"
# Consumers the events stream may hold before a reader's request is refused: a reader that
# asks over and over (and listens to all it asked for) cannot exhaust the server.
MAX_CONSUMERS = 1000
_TOKEN = re.compile(r"[A-Za-z0-9_-]{8,64}")
# A subject's tokens: no spaces, no empty token; wildcards only as whole tokens.
_SUBJECT_TOKEN = re.compile(r"[^\s.*>]+|\*|>")
# The readers a host makes consumers for, each on a service of its own.
READERS = (Role.GATEWAY, Role.OBSERVER)


def deliver_subject(token: str) -> str:
    """Where a reader hears its consumer: ``cairn.deliver.<token>``."""
    return f"{DELIVER}.{token}"


def consumer_config(
    deliver: str,
    subject: str,
    *,
    after: int | None,
    since: datetime.datetime | None,
    heartbeat: float,
) -> ConsumerConfig:
    if after is not None:
        start = {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": after + 1}
    else:
        start = {"deliver_policy": DeliverPolicy.BY_START_TIME, "opt_start_time": since}
    return ConsumerConfig(
        deliver_subject=deliver,
        filter_subject=subject,
        ack_policy=AckPolicy.NONE,
        idle_heartbeat=heartbeat,
        inactive_threshold=INACTIVE_THRESHOLD,
        mem_storage=True,
        num_replicas=1,
        **start,  # type: ignore[arg-type]
    )


@attrs.frozen
class FollowRequest:
    """What a reader may ask for: a token for its delivery subject, a subject of events, where
    to start (after a stream sequence, from a time, or from now on) and its heartbeat."""

    token: str
    subject: str
    after: int | None
    since: datetime.datetime | None
    heartbeat: float

    def fields(self) -> dict[str, Any]:
        return {
            "deliver": deliver_subject(self.token),
            "subject": self.subject,
            "after": self.after,
            "since": self.since.timestamp() if self.since is not None else None,
            "heartbeat": self.heartbeat,
        }


def _bad(message: str) -> CommandFailed:
    return CommandFailed(400, message)


def parse_request(fields: Any) -> FollowRequest:
    """A reader's request, by the rules above; anything else is refused with 400."""
    if not isinstance(fields, Mapping):
        raise _bad("a follow request is a JSON object")
    deliver = fields.get("deliver")
    prefix = f"{DELIVER}."
    if not isinstance(deliver, str) or not deliver.startswith(prefix):
        raise _bad(f"deliver: must be {prefix}<token>")
    token = deliver[len(prefix) :]
    if not _TOKEN.fullmatch(token):
        raise _bad("deliver: the token is 8 to 64 letters, digits, - and _")
    subject = fields.get("subject", f"{EVENT_SUBJECT_PREFIX}.>")
    if not isinstance(subject, str) or not _is_event_subject(subject):
        raise _bad(f"subject: must be a subject under {EVENT_SUBJECT_PREFIX}.")
    after = fields.get("after")
    if after is not None and (type(after) is not int or after < 0):
        raise _bad("after: must be a stream sequence (an integer, 0 or more)")
    since_raw = fields.get("since")
    since = None
    if since_raw is not None:
        if type(since_raw) not in (int, float) or not 0 <= since_raw < 1e11:
            raise _bad("since: must be a Unix time in seconds")
        since = datetime.datetime.fromtimestamp(since_raw, datetime.UTC)
    heartbeat = fields.get("heartbeat", 1.0)
    if type(heartbeat) not in (int, float) or not MIN_HEARTBEAT <= heartbeat <= MAX_HEARTBEAT:
        raise _bad(f"heartbeat: must be {MIN_HEARTBEAT:g} to {MAX_HEARTBEAT:g} seconds")
    return FollowRequest(token, subject, after, since, float(heartbeat))


def _is_event_subject(subject: str) -> bool:
    tokens = subject.split(".")
    if len(subject) > 256 or ".".join(tokens[:2]) != EVENT_SUBJECT_PREFIX or len(tokens) < 3:
        return False
    if any(not _SUBJECT_TOKEN.fullmatch(t) for t in tokens):
        return False
    return ">" not in tokens[:-1]


class ConsumerBroker:
    """Serves ``cairn.events.follow`` on a host's connection: for the hosts' own followers
    (delivering to ``cairn.deliver.<token>``) and, on a service each, for every reader role
    (delivering to ``cairn.deliver.<role>.<token>``). One host of a queue group answers."""

    def __init__(self, nc: Client, max_consumers: int = MAX_CONSUMERS) -> None:
        self.nc = nc
        self.max_consumers = max_consumers
        self._js = nc.jetstream()
        self._subs: list[Subscription] = []

    async def start(self) -> ConsumerBroker:
        self._subs = [await self._serve(FOLLOW, DELIVER)]
        for role in READERS:
            reader = await self._serve(f"{FOLLOW}.{role.value}", f"{DELIVER}.{role.value}")
            self._subs.append(reader)
        # A follower started right after this (the services' own, at start-up) finds it.
        await flush_all(self.nc)
        return self

    async def stop(self) -> None:
        await unsubscribe_all(self._subs)
        self._subs = []

    async def _serve(self, subject: str, prefix: str) -> Subscription:
        async def on_follow(fields: Any) -> dict[str, Any]:
            return await self.follow(parse_request(fields), prefix)

        return await serve_json(self.nc, subject, on_follow, queue=QUEUE, concurrent=True)

    async def follow(self, request: FollowRequest, prefix: str) -> dict[str, Any]:
        """Make the consumer; answer the stream sequence it starts after (from now on: the
        stream's last sequence, read before the consumer is made)."""
        state = (await self._js.stream_info(STREAM)).state
        if state.consumer_count >= self.max_consumers:
            raise CommandFailed(
                503, f"the events stream has {state.consumer_count} consumers; try again later"
            )
        after = request.after
        if after is None and request.since is None:
            after = state.last_seq
        config = consumer_config(
            f"{prefix}.{request.token}",
            request.subject,
            after=after,
            since=request.since,
            heartbeat=request.heartbeat,
        )
        info = await self._js.add_consumer(STREAM, config)
        return {"after": after, "consumer": info.name}
