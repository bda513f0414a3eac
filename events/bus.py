"""NATS helpers: connecting with endless reconnects, and JSON request/reply."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

log = logging.getLogger(__name__)

JsonHandler = Callable[[Any], Awaitable[Any]]


class CommandTimeout(Exception):
    """Nobody answered a command in time (no actor host, or it is overloaded)."""


class NoResponders(Exception):
    """No actor host subscribes to the command's subject."""


async def connect(url: str, *, name: str = "cairn") -> Client:
    """A client that never gives up reconnecting: a NATS restart delays work, never ends it."""

    async def on_error(exc: Exception) -> None:
        log.debug("nats: %s", exc)

    return await nats.connect(
        url,
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.1,
        error_cb=on_error,
    )


async def request_json(nc: Client, subject: str, payload: Any, timeout: float = 5.0) -> Any:
    data = json.dumps(payload, separators=(",", ":")).encode()
    try:
        msg = await nc.request(subject, data, timeout=timeout)
    except NoRespondersError:
        raise NoResponders(f"no service answers on {subject}") from None
    except NatsTimeout:
        raise CommandTimeout(f"no answer on {subject} within {timeout:g}s") from None
    return json.loads(msg.data)


async def serve_json(
    nc: Client, subject: str, handler: JsonHandler, *, queue: str = ""
) -> Subscription:
    """Answer requests on ``subject`` with ``handler(payload)``; a handler error becomes
    ``{"error": {"status": 500, "message": ...}}`` so the caller never waits for a time-out."""

    async def on_msg(msg: Msg) -> None:
        try:
            reply = await handler(json.loads(msg.data))
        except Exception as exc:
            log.exception("handler for %s failed", subject)
            reply = {"error": {"status": 500, "message": str(exc) or type(exc).__name__}}
        if msg.reply:
            await msg.respond(json.dumps(reply, separators=(",", ":")).encode())

    return await nc.subscribe(subject, queue=queue, cb=on_msg)
