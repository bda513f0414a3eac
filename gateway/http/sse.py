"""Server-sent events for every streaming endpoint.

``data:`` lines always hold real JSON (quotes and newlines in messages are escaped by the
encoder, so a message can never break the framing), every event carries an ``id:`` for
``Last-Event-ID`` re-attach, a comment line goes out after a long silence so proxies keep the
connection, and the stream ends with ``event: close`` / ``data: {}``. A client that goes away
ends nothing but the stream: ``send`` returns ``False`` and the producer decides what to do.

A graceful stop ends every open stream itself (:func:`end_streams`): the stream's last event
says cairn is stopping (``event: stopping``, or a record of the stream's own shape), the
response ends, and the handler that fed it is cancelled, so no stream holds the stop. A stream
that follows work which may end within the stop's grace (``follows_work``: an install, a run)
is left to end by itself until the grace is over.

A stream opened with a token ends the same way, its last event saying why (``event:
revoked``, or a record of the stream's own shape), within seconds of that token being revoked
or its console session ending (``gateway/http/revocation.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from types import TracebackType
from typing import Any

from aiohttp import web

from events.tasks import cancel
from gateway.http import revocation

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    # nginx buffers proxied responses unless told otherwise; progress must arrive live.
    "X-Accel-Buffering": "no",
}


def format_event(data: Any, *, event: str | None = None, id: str | int | None = None) -> bytes:
    """One SSE frame. ``data`` is JSON-encoded onto a single line."""
    lines = []
    if id is not None:
        lines.append(f"id: {_single_line(str(id))}")
    if event is not None:
        lines.append(f"event: {_single_line(event)}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return ("\n".join(lines) + "\n\n").encode()


def _single_line(value: str) -> str:
    return value.replace("\r", " ").replace("\n", " ")


def last_event_id(request: web.Request) -> str | None:
    value = request.headers.get("Last-Event-ID")
    return value.strip() if value and value.strip() else None


# The event a stream ends with at a stop: (event name or None, data), from the reason.
StoppingEvent = Callable[[str], tuple[str | None, Any]]


def stopping_event(reason: str) -> tuple[str | None, Any]:
    return "stopping", {"message": reason}


def revoked_event(reason: str) -> tuple[str | None, Any]:
    return "revoked", {"message": f"{reason}: this stream ends here"}


# Every stream open in this process (the loop's thread only), for end_streams.
_OPEN: set[EventStream] = set()
_ALL_ENDED = asyncio.Event()


def open_streams() -> int:
    return len(_OPEN)


async def end_streams(reason: str, *, working_too: bool) -> int:
    """End open streams with their stopping event (``reason``): those that follow no work, or
    every one with ``working_too``. Returns how many were ended."""
    chosen = [s for s in list(_OPEN) if working_too or not s.follows_work]
    await asyncio.gather(*(s.stop(reason) for s in chosen))
    return len(chosen)


async def streams_done(timeout: float) -> None:
    """Wait up to ``timeout`` seconds for the open streams to end by themselves."""
    if not _OPEN:
        return
    _ALL_ENDED.clear()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_ALL_ENDED.wait(), timeout)


def _forget(stream: EventStream) -> None:
    _OPEN.discard(stream)
    if not _OPEN:
        _ALL_ENDED.set()


class EventStream:
    """``async with EventStream(request) as sse: await sse.send({...})``."""

    def __init__(
        self,
        request: web.Request,
        *,
        heartbeat: float = 15.0,
        status: int = 200,
        headers: dict[str, str] | None = None,
        close_event: bool = True,
        numbered: bool = True,
        follows_work: bool = False,
        stopping: StoppingEvent = stopping_event,
        revoked: StoppingEvent = revoked_event,
    ) -> None:
        """``close_event=False`` for contracts whose every ``data:`` line must be one of their
        own records (the functions stream); the response still ends cleanly. ``numbered=False``
        leaves out the automatic ``id:`` lines where nothing can be re-attached to.
        ``follows_work``: the stream ends by itself when work that may finish within a stop's
        grace does (module doc); ``stopping`` makes the event it ends with at a stop, and
        ``revoked`` the one it ends with when the token that opened it lapses."""
        self.follows_work = follows_work
        self._stopping = stopping
        self._revoked = revoked
        self._watcher: asyncio.Task[None] | None = None
        self._handler: asyncio.Task[Any] | None = None
        self._request = request
        self._close_event = close_event
        self._numbered = numbered
        self._heartbeat = heartbeat
        merged = {**SSE_HEADERS, **(headers or {})}
        self.response = web.StreamResponse(status=status, headers=merged)
        self._next_id = 1
        self._lock = asyncio.Lock()
        self._quiet = asyncio.Event()
        self._pinger: asyncio.Task[None] | None = None
        self.closed = False
        self._ending = False

    async def __aenter__(self) -> EventStream:
        try:
            await self.response.prepare(self._request)
        except (ConnectionError, RuntimeError):
            # The client left before the headers went out (a page reloaded while its stream
            # was set up): as if it left later, the stream is closed and `send` says False.
            self.closed = True
            return self
        self._pinger = asyncio.create_task(self._ping())
        self._handler = asyncio.current_task()
        _OPEN.add(self)
        self._watcher = revocation.watch(self._request, self._lapsed)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._ending = True
        _forget(self)
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            self._watcher.cancel()
        await cancel(self._pinger)
        if exc_type is asyncio.CancelledError or self.closed:
            return
        if self._close_event:
            await self.send({}, event="close")
        if not self.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.response.write_eof()
        self.closed = True

    async def send(
        self,
        data: Any,
        *,
        event: str | None = None,
        id: str | int | None = None,
    ) -> bool:
        """Write one event; ``False`` if the client has gone away."""
        if id is None and self._numbered:
            id = self._next_id
            self._next_id += 1
        return await self._write(format_event(data, event=event, id=id))

    async def stop(self, reason: str) -> None:
        """End the stream now with its stopping event and cancel the handler feeding it."""
        await self._end(*self._stopping(reason))

    async def _lapsed(self, reason: str) -> None:
        await self._end(*self._revoked(reason))

    async def _end(self, event: str | None, data: Any) -> None:
        if self.closed or self._ending:
            return
        self._ending = True
        _forget(self)
        await self._write(format_event(data, event=event))
        self.closed = True
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.response.write_eof()
        if self._handler is not None and self._handler is not asyncio.current_task():
            self._handler.cancel()

    async def _write(self, frame: bytes) -> bool:
        if self.closed:
            return False
        async with self._lock:
            try:
                await self.response.write(frame)
            except (ConnectionError, RuntimeError):
                # aiohttp raises ConnectionResetError (a ConnectionError) or, once the
                # transport is gone, RuntimeError; either way the client left.
                self.closed = True
                return False
        self._quiet.set()
        return True

    async def _ping(self) -> None:
        # A flag as well as cancel(): if the wait finishes in the same tick as the cancel,
        # the cancellation can be swallowed, and the stream must still end.
        while not self.closed and not self._ending:
            self._quiet.clear()
            try:
                async with asyncio.timeout(self._heartbeat):
                    await self._quiet.wait()
            except TimeoutError:
                if self._ending or not await self._write(b": keep-alive\n\n"):
                    return
