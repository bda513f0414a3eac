"""A service's listener under slow and surplus clients, over real sockets: the connection cap
answers 503, a connection that never finishes its headers is closed, a stalled body is cut."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from gateway.listener import BUSY_RESPONSE, GuardedSite, body_guard
from tests.conftest import wait_for


async def echo(request: web.Request) -> web.Response:
    return web.Response(text=f"read {len(await request.read())} bytes")


@pytest.fixture
async def runner() -> AsyncIterator[web.AppRunner]:
    app = web.Application(middlewares=[body_guard(0.5)])
    app.router.add_get("/", echo)
    app.router.add_post("/", echo)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=0.5)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", 0, cap=2, name="test")
    await site.start()
    yield runner
    await runner.cleanup()


@pytest.fixture
def port(runner: web.AppRunner) -> int:
    (site,) = runner.sites
    assert isinstance(site, GuardedSite)
    return site.port


def open_connections(runner: web.AppRunner) -> int:
    assert runner.server is not None
    return len(runner.server.connections)


async def ask(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    try:
        async with asyncio.timeout(10):
            return await reader.read()
    finally:
        writer.close()


GET = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


async def test_past_the_cap_a_connection_is_answered_503_and_closed(
    runner: web.AppRunner, port: int
) -> None:
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    try:
        await wait_for(lambda: open_connections(runner) == 2, what="both connections")
        assert await ask(port, GET) == BUSY_RESPONSE
    finally:
        for _, writer in held:
            writer.close()
    await wait_for(lambda: open_connections(runner) == 0, what="the connections to close")
    assert (await ask(port, GET)).endswith(b"read 0 bytes")


async def test_a_connection_that_never_finishes_its_headers_is_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    async with asyncio.timeout(5):  # the header time-out is 0.5 s
        assert await reader.read() == b""
    writer.close()


async def test_a_body_that_stops_arriving_is_cut(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
    async with asyncio.timeout(5):
        with contextlib.suppress(ConnectionError):
            assert await reader.read() == b""
    writer.close()
    body = b"x" * 100
    head = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 100\r\n\r\n"
    assert (await ask(port, head + body)).endswith(b"read 100 bytes")
