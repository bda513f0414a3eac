"""NATS helpers: connecting with endless reconnects, and JSON request/reply with deadlines.

A command is refused at once (503) while the client is not connected, instead of waiting in
nats-py's reconnect buffer for a time-out; and it carries its caller's deadline in a header,
so one that reaches its handler after the caller gave up (delayed by an outage, or queued
behind slow work) is dropped with a log line, never executed unseen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import AuthorizationError, NoRespondersError
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout

from events.errors import CommandFailed
from events.permissions import Role, reply_prefixes

__all__ = [
    "DEADLINE_HEADER",
    "BusRefused",
    "BusUnavailable",
    "CommandFailed",
    "CommandTimeout",
    "NoResponders",
    "answerable",
    "command",
    "connect",
    "deadline_headers",
    "expired",
    "flush_all",
    "request_json",
    "serve_json",
]

log = logging.getLogger(__name__)

JsonHandler = Callable[[Any], Awaitable[Any]]

# Unix time (seconds) after which the caller no longer waits for the answer.
DEADLINE_HEADER = "Cairn-Deadline"
# Pings find a server that hangs without closing the connection (a stopped process, a lost
# network): declared stale after PING_INTERVAL * MAX_OUTSTANDING_PINGS seconds of silence.
PING_INTERVAL = 1
MAX_OUTSTANDING_PINGS = 3
BUS_DOWN = "the message bus (NATS) is unavailable; cairn is reconnecting, try again shortly"


class BusUnavailable(CommandFailed):
    """The client is not connected to NATS: nothing can be sent until it reconnects."""

    def __init__(self, message: str = BUS_DOWN) -> None:
        super().__init__(503, message)


class BusRefused(Exception):
    """A NATS server refused this client's credentials or its TLS: trying again cannot help."""


def refusal(exc: BaseException) -> str | None:
    """Why ``exc``, an error met while connecting, is a refusal (a wrong key, a key the
    server does not know, a certificate it or we reject), or None for anything a retry may
    cure (a server not up yet, a lost network)."""
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    text = str(exc).strip()
    lowered = text.lower()
    if isinstance(exc, AuthorizationError) or "authorization violation" in lowered:
        return "Authorization Violation (its key is not one this server lets in)"
    if "authentication" in lowered or "secure connection" in lowered or "tls" in lowered:
        return text.removeprefix("nats: ").strip("'")
    return None


class CommandTimeout(CommandFailed):
    """Nobody answered a command in time (no actor host, or it is overloaded)."""

    def __init__(self, message: str) -> None:
        super().__init__(504, message)


class NoResponders(CommandFailed):
    """No actor host subscribes to the command's subject."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message)


async def connect(url: str, *, name: str = "cairn", **options: Any) -> Client:
    """A client that never gives up reconnecting: a NATS restart delays work, never ends it.
    Losing and regaining the server is logged once each way (the address without any user
    or password it names). ``options`` go to nats-py's ``connect`` as they are: a role's
    credentials and TLS context (``events.access.NatsAccess.client_options``).

    Until the first connection, a server that refuses the credentials or the TLS handshake
    ends the attempt with :class:`BusRefused` naming the server and the reason (nats-py
    would try again for ever, and the process would sit silent)."""
    shown = redact_url(url)
    nc = Client()
    refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_error(exc: Exception) -> None:
        log.debug("nats: %s", exc)
        why = refusal(exc)
        if why is not None and not refused.done() and not nc.is_connected:
            server = getattr(nc, "_current_server", None)
            where = redact_url(server.uri.geturl()) if server is not None else shown
            refused.set_result(f"{where} refused the connection: {why}")

    async def on_disconnected() -> None:
        if not nc.is_closed:  # nats-py calls this on close() too
            log.warning("nats: connection to %s lost; reconnecting", shown)

    async def on_reconnected() -> None:
        log.warning("nats: reconnected to %s", shown)

    attempt = asyncio.ensure_future(
        nc.connect(
            server_urls(url),
            name=name,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.1,  # type: ignore[arg-type]  # seconds; a float works
            ping_interval=PING_INTERVAL,
            max_outstanding_pings=MAX_OUTSTANDING_PINGS,
            error_cb=on_error,
            disconnected_cb=on_disconnected,
            reconnected_cb=on_reconnected,
            **options,
        )
    )
    waiting: set[asyncio.Future[Any]] = {attempt, refused}
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not attempt.done():
            attempt.cancel()
            with contextlib.suppress(BaseException):
                await attempt
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 2)
    if not attempt.cancelled() and attempt.exception() is None:
        return nc
    if refused.done():
        raise BusRefused(f"NATS server {refused.result()}")
    await attempt  # its own error
    return nc


def redact_url(url: str) -> str:
    """``url`` (one or several, comma-separated) with any user and password replaced by
    ``***``: what logs, ``/status`` and errors may show."""
    return ",".join(_redact_one(u.strip()) for u in url.split(",") if u.strip())


def _redact_one(url: str) -> str:
    scheme, sep, rest = url.rpartition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return url
    return f"{scheme}{sep}***@{host}" if userinfo else f"{scheme}{sep}{host}"


async def flush_all(nc: Client, timeout: float = 5.0) -> None:
    """Return once the server has processed everything ``nc`` sent before the call.

    nats-py's ``flush`` writes its PING straight to the socket, ahead of the commands still
    queued for its flusher task (``Client._send_ping`` in nats-py 2.16), so its PONG can come
    back before a queued SUB has reached the server: seen as a run that found "no responders"
    on a gateway's connection although the runner's connection had subscribed and flushed.
    The first flush pushes the queue out behind its PING; the second PING follows those
    commands, so its PONG means the server has them. Use it wherever another connection acts
    on this one's subscriptions at once."""
    await nc.flush(timeout)  # type: ignore[arg-type]  # seconds; a float works
    await nc.flush(timeout)  # type: ignore[arg-type]


def server_urls(url: str) -> list[str]:
    """``NATS_URL`` may name several servers of a cluster, comma-separated; nats-py takes a list
    and fails over between them."""
    return [u.strip() for u in url.split(",") if u.strip()]


def deadline_headers(timeout: float) -> dict[str, str]:
    """The header that tells a handler when this caller stops waiting."""
    return {DEADLINE_HEADER: f"{time.time() + timeout:.3f}"}


def expired(msg: Msg) -> bool:
    """Whether ``msg`` arrived after its caller's deadline; if so, says so in the log."""
    raw = (msg.headers or {}).get(DEADLINE_HEADER)
    if raw is None:
        return False
    try:
        late = time.time() - float(raw)
    except ValueError:
        return False
    if late <= 0:
        return False
    log.warning(
        "dropped an expired command on %s: its caller stopped waiting %.1f s ago", msg.subject, late
    )
    return True


# A request with a long deadline (a command: an install's reply comes after its store write)
# first asks the server for a PONG within this: sent into a hung server (alive but not reading:
# SIGSTOP, a full disk under JetStream, a stalled network), whose connection the client still
# believes open until its pings go unanswered, it would otherwise wait out all of its deadline.
BUS_CHECK_S = 2.0
# Requests with a deadline this long or longer are checked first; the queries' few seconds are
# their own bound, and they stay one round trip.
CHECKED_FROM_S = 10.0


async def answering(nc: Client, within: float = BUS_CHECK_S) -> bool:
    """Whether the server answers a PING within ``within`` seconds: one round trip, where
    :func:`flush_all` takes two to be sure of the commands queued before it."""
    try:
        await nc.flush(within)  # type: ignore[arg-type]  # seconds; a float works (flush_all)
    except (TimeoutError, ConnectionError, NatsError):
        return False
    return True


async def request_json(nc: Client, subject: str, payload: Any, timeout: float = 5.0) -> Any:
    if not nc.is_connected:
        raise BusUnavailable()
    if timeout >= CHECKED_FROM_S and not await answering(nc):
        raise BusUnavailable()
    data = json.dumps(payload, separators=(",", ":")).encode()
    try:
        msg = await nc.request(subject, data, timeout=timeout, headers=deadline_headers(timeout))
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


def answerable(msg: Msg, prefixes: tuple[str, ...] = reply_prefixes(Role.HOST)) -> bool:
    """Whether ``msg``'s reply subject is one a responder may answer: a private subject NATS
    made for a request from another account, or a requester's own inbox. Anything else
    (``$KV.…``, ``$JS.API.…``, ``cairn.…``) names a subject the answer would act on, not a
    requester waiting for it: the request is logged and dropped, not served."""
    if not msg.reply or msg.reply.startswith(prefixes):
        return True
    log.warning(
        "dropped a request on %s: its reply subject %.80s is no requester's inbox",
        msg.subject,
        msg.reply,
    )
    return False


async def serve_json(
    nc: Client,
    subject: str,
    handler: JsonHandler,
    *,
    queue: str = "",
    concurrent: bool = False,
    replies: tuple[str, ...] = reply_prefixes(Role.HOST),
) -> Subscription:
    """Answer requests on ``subject`` with ``handler(payload)``. A :class:`CommandFailed`
    (``Rejected``) becomes ``{"error": {"status", "message"}}``; any other error becomes
    status 500 and is logged, so the caller never waits for a time-out. A request past its
    caller's deadline is dropped unanswered (:func:`expired`), and so is one whose reply
    subject is not under ``replies`` (:func:`answerable`).

    nats-py runs one subscription's callbacks one after another; with ``concurrent=True``
    each request is answered in its own task, so a slow one does not queue the rest (use it
    when the handler does not rely on arrival order)."""

    async def answer(msg: Msg) -> None:
        if not answerable(msg, replies) or expired(msg):
            return
        try:
            try:
                payload = json.loads(msg.data)
            except ValueError:
                raise CommandFailed(400, "the request is not JSON") from None
            reply = await handler(payload)
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


async def unsubscribe_all(subs: Iterable[Subscription]) -> None:
    """Unsubscribe each of ``subs``; one that fails (the connection is closed or draining)
    does not keep the others subscribed."""
    for sub in subs:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
