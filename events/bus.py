"""NATS helpers: connecting with endless reconnects, and JSON request/reply."""

from __future__ import annotations

import asyncio
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


class CommandFailed(Exception):
    """A command was refused or failed; ``status`` is the HTTP status it maps to.

    The exception tree, in one place:

    * ``CommandFailed(status, message)`` — the handler said no (``actors.runtime.Rejected``
      is one) or raised; travels back over NATS as ``{"error": {"status", "message"}}``.
    * ``NoResponders`` (503) — nothing subscribes to the subject: the service is not running.
    * ``CommandTimeout`` (504) — nobody answered in time.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class CommandTimeout(CommandFailed):
    """Nobody answered a command in time (no actor host, or it is overloaded)."""

    def __init__(self, message: str) -> None:
        super().__init__(504, message)


class NoResponders(CommandFailed):
    """No actor host subscribes to the command's subject."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message)


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


async def command(nc: Client, subject: str, payload: Any, timeout: float = 5.0) -> Any:
    """Send a command and return the reply; an ``{"error": …}`` reply raises
    :class:`CommandFailed` with the handler's status and message."""
    reply = await request_json(nc, subject, payload, timeout)
    if isinstance(reply, dict) and set(reply) == {"error"} and isinstance(reply["error"], dict):
        error = reply["error"]
        raise CommandFailed(int(error.get("status", 500)), str(error.get("message", "error")))
    return reply


async def serve_json(
    nc: Client,
    subject: str,
    handler: JsonHandler,
    *,
    queue: str = "",
    concurrent: bool = False,
) -> Subscription:
    """Answer requests on ``subject`` with ``handler(payload)``. A :class:`CommandFailed`
    (``Rejected``) becomes ``{"error": {"status", "message"}}``; any other error becomes
    status 500 and is logged, so the caller never waits for a time-out.

    nats-py runs one subscription's callbacks one after another; with ``concurrent=True``
    each request is answered in its own task, so a slow one does not queue the rest (use it
    when the handler does not rely on arrival order)."""

    async def answer(msg: Msg) -> None:
        try:
            reply = await handler(json.loads(msg.data))
        except CommandFailed as exc:
            reply = {"error": {"status": exc.status, "message": exc.message}}
        except Exception as exc:
            log.exception("handler for %s failed", subject)
            reply = {"error": {"status": 500, "message": str(exc) or type(exc).__name__}}
        if msg.reply:
            await msg.respond(json.dumps(reply, separators=(",", ":")).encode())

    if not concurrent:
        return await nc.subscribe(subject, queue=queue, cb=answer)

    in_flight: set[asyncio.Task[None]] = set()

    async def spawn(msg: Msg) -> None:
        task = asyncio.create_task(answer(msg))
        in_flight.add(task)  # a task nobody references may be collected mid-flight
        task.add_done_callback(in_flight.discard)

    return await nc.subscribe(subject, queue=queue, cb=spawn)
