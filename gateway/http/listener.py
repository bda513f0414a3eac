"""How every service's listener holds up under a flood of connections.

* **Header and idle time-outs.** aiohttp closes a connection that has not sent a complete
  request's headers within ``keepalive_timeout`` of opening or of its last response (a
  slowloris that trickles headers, or opens and says nothing); ``body_guard`` cuts a request
  whose body stops arriving for ``CAIRN_BODY_TIMEOUT`` seconds.
* **A connection cap per service.** Past ``CAIRN_MAX_CONNECTIONS`` open connections a new one
  is answered ``503`` and closed as it is accepted, so a flood on one service cannot take the
  file descriptors every other service (and the event store, and NATS) needs: a service holds
  at most its cap's connections and ``MAX_LINGERING`` refused ones.
* **The open-file limit.** The soft ``RLIMIT_NOFILE`` is raised to the hard one at start-up;
  the default cap is derived from what is left.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from events.tasks import cancel

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
# Pending connections per listener, and the most accepted in one pass of the loop.
BACKLOG = 64
# How long a listener that ran out of descriptors stops accepting (asyncio's own delay).
ACCEPT_PAUSE = 1.0
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


class _Lingering(asyncio.Protocol):
    """A refused connection, already answered 503, given ``REFUSAL_LINGER`` seconds to finish
    sending its request's headers: closing it with the request unread would reset it, and the
    client could lose the answer."""

    def __init__(self, closed: asyncio.Future[None]) -> None:
        self._closed = closed
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._seen = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
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
        if not self._closed.done():
            self._closed.set_result(None)

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class GuardedSite(web.TCPSite):
    """A TCP site that answers 503 to connections beyond ``cap``.

    It accepts connections itself rather than through ``asyncio.Server``, which accepts up to
    a backlog of connections per listener in each pass of the loop and makes their protocols
    a pass later: neither the cap nor a refusal could act before a flood had taken hundreds of
    descriptors (a 1024 open-file limit ran out). Here each connection is judged as it is
    accepted, and one over the cap is answered and closed on the spot (or lingers,
    ``MAX_LINGERING`` at most), so a service never holds more than ``cap + MAX_LINGERING``
    connections' descriptors.
    """

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, cap: int, name: str):
        super().__init__(runner, host, port, backlog=BACKLOG)
        self.cap = cap
        self.service = name
        self.refused = 0
        self.lingering = 0
        # Connections handed to the loop whose protocol has not connected yet: aiohttp counts
        # a connection in ``server.connections`` from its ``connection_made``, a pass later.
        self._unborn = 0
        self._listening: list[socket.socket] = []
        self._handing: set[asyncio.Task[None]] = set()
        self._resume: dict[int, asyncio.TimerHandle] = {}
        self._last_report = 0.0
        self._last_exhausted = 0.0

    def count_refusal(self) -> None:
        self.refused += 1
        now = asyncio.get_running_loop().time()
        if now - self._last_report >= 10:
            self._last_report = now
            log.warning(
                "%s: %d connections open, the cap (CAIRN_MAX_CONNECTIONS): answering 503 "
                "(%d refused so far)",
                self.service,
                self.cap,
                self.refused,
            )

    async def start(self) -> None:
        self._runner._reg_site(self)
        loop = asyncio.get_running_loop()
        # asyncio binds (every address the host names, with its socket options); this site
        # listens and accepts. The server, never started, closes its sockets at the stop.
        self._server = await loop.create_server(
            asyncio.Protocol, self._host, self._port, backlog=self._backlog, start_serving=False
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
        for bound in sockets:
            listener = bound.dup()
            listener.setblocking(False)
            listener.listen(self._backlog)
            self._listening.append(listener)
            loop.add_reader(listener.fileno(), self._accept, listener)

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        for timer in self._resume.values():
            timer.cancel()
        self._resume.clear()
        for listener in self._listening:
            loop.remove_reader(listener.fileno())
            listener.close()
        self._listening.clear()
        await super().stop()

    def _accept(self, listener: socket.socket) -> None:
        server = self._runner.server
        assert server is not None
        for _ in range(self._backlog):
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    raise
                self._pause(listener, exc)
                return
            conn.setblocking(False)
            if len(server.connections) + self._unborn < self.cap:
                self._unborn += 1
                self._spawn(self._connect(conn, server))
            else:
                self._refuse(conn)

    def _refuse(self, conn: socket.socket) -> None:
        self.count_refusal()
        try:
            conn.send(BUSY_RESPONSE)
        except OSError:
            conn.close()
            return
        if self.lingering >= MAX_LINGERING:
            conn.close()
            return
        self.lingering += 1
        self._spawn(self._linger(conn))

    async def _connect(self, conn: socket.socket, factory: Callable[[], Any]) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(factory, conn)
        except OSError:
            conn.close()  # the client left before its transport was made
        finally:
            self._unborn -= 1

    async def _linger(self, conn: socket.socket) -> None:
        closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: _Lingering(closed), conn
            )
            await closed
        except OSError:
            conn.close()
        finally:
            self.lingering -= 1

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._handing.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._handing.discard)

    def _pause(self, listener: socket.socket, exc: OSError) -> None:
        """Out of descriptors (or memory): stop accepting on ``listener`` for a second, as
        asyncio does, so the loop does not spin on a connection it cannot take."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - self._last_exhausted >= 10:
            self._last_exhausted = now
            log.warning(
                "%s: cannot accept connections (%s); pausing this listener for %.0f s",
                self.service,
                exc.strerror,
                ACCEPT_PAUSE,
            )
        fd = listener.fileno()
        loop.remove_reader(fd)

        def resume() -> None:
            del self._resume[fd]
            loop.add_reader(fd, self._accept, listener)

        self._resume[fd] = loop.call_later(ACCEPT_PAUSE, resume)


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
            await cancel(watchdog)

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
                request.remote,
                idle,
            )
            if request.transport is not None:
                request.transport.close()
            return
