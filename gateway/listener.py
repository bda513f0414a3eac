"""How every service's listener holds up under a flood of connections.

* **Header and idle time-outs.** aiohttp closes a connection that has not sent a complete
  request's headers within ``keepalive_timeout`` of opening or of its last response (a
  slowloris that trickles headers, or opens and says nothing); ``body_guard`` cuts a request
  whose body stops arriving for ``CAIRN_BODY_TIMEOUT`` seconds.
* **A connection cap per service.** Past ``CAIRN_MAX_CONNECTIONS`` open connections a new one
  is answered ``503`` at once and closed, so a flood on one service cannot take the file
  descriptors every other service (and the event store, and NATS) needs.
* **The open-file limit.** The soft ``RLIMIT_NOFILE`` is raised to the hard one at start-up;
  the default cap is derived from what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

log = logging.getLogger(__name__)

# File descriptors kept for everything but client connections: the store, NATS, pipes to qm,
# SSH sessions, sandboxes, search databases.
RESERVED_FDS = 256
MAX_DEFAULT_CAP = 4096
# A refused connection is closed as soon as its request's headers are read, or after this
# long: closing with the request unread makes the kernel reset the connection, and the client
# may lose the 503; waiting longer would let a flood of silent connections hold descriptors.
REFUSAL_LINGER = 0.05
# Refusals allowed to linger at once per service; past it (a flood) they close at once.
MAX_LINGERING = 16
# Pending connections per listener. asyncio accepts up to this many in one go before any
# protocol (and so the cap) sees them: small enough that five listeners' bursts fit in what
# the cap leaves free, large enough for ordinary bursts of clients.
BACKLOG = 64
BUSY_BODY = b"too many connections to this service; try again shortly\n"
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: " + str(len(BUSY_BODY)).encode() + b"\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n\r\n" + BUSY_BODY
)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft open-file limit to the hard one; returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d: %s", soft, exc)
            return soft, soft
        log.info("open-file limit raised from %d to %d", soft, target)
        return soft, target
    return soft, soft


def default_cap(listeners: int) -> int:
    """Connections per service: a third of what the open-file limit leaves after the reserve
    (the rest absorbs accept bursts and refused connections while they are answered)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    spare = max(0, soft - RESERVED_FDS)
    return max(16, min(MAX_DEFAULT_CAP, spare // (3 * max(1, listeners))))


class _Refusal(asyncio.Protocol):
    """Answers 503 and closes: the whole life of a connection over the cap."""

    def __init__(self, site: GuardedSite) -> None:
        self._site = site
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._seen = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._site.count_refusal()
        transport.write(BUSY_RESPONSE)
        if self._site.lingering >= MAX_LINGERING:
            transport.close()
            return
        self._site.lingering += 1
        self._timer = asyncio.get_running_loop().call_later(REFUSAL_LINGER, transport.close)

    def data_received(self, data: bytes) -> None:
        window = self._seen + data
        if b"\r\n\r\n" in window:
            self._close()  # the request's headers are read: closing now sends no reset
        self._seen = window[-3:]

    def eof_received(self) -> bool:
        self._close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._site.lingering -= 1

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class GuardedSite(web.TCPSite):
    """A TCP site that answers 503 to connections beyond ``cap``."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, cap: int, name: str):
        super().__init__(runner, host, port, backlog=BACKLOG)
        self.cap = cap
        self.service = name
        self.refused = 0
        self.lingering = 0
        self._last_report = 0.0

    def count_refusal(self) -> None:
        self.refused += 1
        now = asyncio.get_running_loop().time()
        if now - self._last_report >= 10:
            self._last_report = now
            log.warning(
                "%s: %d connections open, the cap (CAIRN_MAX_CONNECTIONS): answering 503 "
                "(%d refused so far)",
                self.service, self.cap, self.refused,
            )  # fmt: skip

    async def start(self) -> None:
        # TCPSite.start, with the protocol factory wrapped.
        self._runner._reg_site(self)
        server = self._runner.server
        assert server is not None

        def factory() -> Any:
            if len(server.connections) >= self.cap:
                return _Refusal(self)
            return server()

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            factory, self._host, self._port, backlog=self._backlog
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


def body_guard(idle: float) -> Any:
    """Middleware: a request whose body stops arriving for ``idle`` seconds is cut (its
    connection closed), so a client that trickles a body cannot hold a handler forever."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.body_exists or request.content.is_eof():
            return await handler(request)
        watchdog = asyncio.create_task(_watch_body(request, idle))
        try:
            return await handler(request)
        finally:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog

    return guard


async def _watch_body(request: web.Request, idle: float) -> None:
    content = request.content
    loop = asyncio.get_running_loop()
    seen, since = content.total_bytes, loop.time()
    while not content.is_eof():
        # A watchdog's poll: the body gives nothing to wait on that also wakes on silence.
        await asyncio.sleep(min(idle, 1.0))
        if content.total_bytes != seen:
            seen, since = content.total_bytes, loop.time()
        elif loop.time() - since >= idle:
            log.warning(
                "closing a connection from %s: its request body stalled for %.0f s",
                request.remote, idle,
            )  # fmt: skip
            if request.transport is not None:
                request.transport.close()
            return
