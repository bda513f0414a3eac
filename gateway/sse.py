"""Server-sent events for every streaming endpoint.

``data:`` lines always hold real JSON (quotes and newlines in messages are escaped by the
encoder, so a message can never break the framing), every event carries an ``id:`` for
``Last-Event-ID`` re-attach, a comment line goes out after a long silence so proxies keep the
connection, and the stream ends with ``event: close`` / ``data: {}``. A client that goes away
ends nothing but the stream: ``send`` returns ``False`` and the producer decides what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from types import TracebackType
from typing import Any

from aiohttp import web

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
    ) -> None:
        """``close_event=False`` for contracts whose every ``data:`` line must be one of their
        own records (the functions stream); the response still ends cleanly. ``numbered=False``
        leaves out the automatic ``id:`` lines where nothing can be re-attached to."""
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
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._ending = True
        if self._pinger is not None:
            self._pinger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pinger
        if exc_type is asyncio.CancelledError:
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
