"""A service's listener under slow and surplus clients, over real sockets: the connection cap
answers 503, a connection that never finishes its headers is closed, a stalled body is cut."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from gateway.http.listener import BUSY_RESPONSE, MAX_LINGERING, GuardedSite, body_guard
from tests.conftest import Peak, wait_for


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


async def test_a_burst_accepted_at_once_is_held_to_the_cap(
    runner: web.AppRunner, port: int
) -> None:
    # Sixty clients connect before the listener's next turn, so all of them are accepted in
    # one pass of the loop: the cap must count each as it is accepted, not a pass later.
    async def one() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # keep-alive: held until time-out
        try:
            async with asyncio.timeout(10):
                with contextlib.suppress(ConnectionError):
                    return await reader.read()
                return b"(reset)"
        finally:
            writer.close()

    answers = await asyncio.gather(*(one() for _ in range(60)))
    served = [a for a in answers if a.startswith(b"HTTP/1.1 200")]
    assert len(served) == 2
    assert all(a.endswith(b"read 0 bytes") for a in served)
    refused = [a for a in answers if a == BUSY_RESPONSE]
    assert len(refused) + answers.count(b"(reset)") == 58
    assert len(refused) >= MAX_LINGERING  # those given time to finish sending got their 503


def sockets_held(port: int) -> int:
    """This process's sockets on the listener's side of ``port``, the listening one included
    (the clients' sockets have ``port`` as their remote port)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    held = set()  # a table read while it changes can list a socket twice
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                    held.add(fields[9])
    return len(held)


async def test_a_flood_past_the_cap_holds_no_more_descriptors_than_the_cap_allows(
    runner: web.AppRunner, port: int
) -> None:
    async def slow() -> asyncio.StreamWriter:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nX-Slow: ")  # never finished
        return writer

    with Peak(lambda: sockets_held(port)) as held:
        listening = held.before
        writers = await asyncio.gather(*(slow() for _ in range(300)))
        await wait_for(lambda: sockets_held(port) <= listening + 2, what="the lingering to close")
    for writer in writers:
        writer.close()
    # Two held, up to MAX_LINGERING answered and lingering, one being judged: never more.
    assert held.most <= listening + 2 + MAX_LINGERING + 1


SMALL_LIMIT_SERVER = """
import asyncio, resource, sys
from aiohttp import web
from gateway.http.listener import GuardedSite

async def main():
    app = web.Application()
    app.router.add_get("/", lambda request: web.Response(text="ok"))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", 0, cap=10_000, name="small")  # the cap cannot help
    await site.start()
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    print(site.port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_listener_out_of_descriptors_pauses_and_recovers(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            SMALL_LIMIT_SERVER,
            stdout=asyncio.subprocess.PIPE,
            stderr=out,
            cwd=Path(__file__).parents[2],
        )
    try:
        assert server.stdout is not None
        port = int(await asyncio.wait_for(server.stdout.readline(), 30))
        held = []
        for _ in range(100):  # far past the 64 descriptors the server may have
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nX-Slow: ")
            held.append(writer)
        await wait_for(lambda: "pausing this listener" in log.read_text(), what="the pause")
        for writer in held:
            writer.close()
        # The cause gone, the listener takes connections again, after its second's pause.
        async with asyncio.timeout(15):
            answer = await ask(port, GET)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
        text = log.read_text()
        assert text.count("pausing this listener") == 1  # once per 10 s, not per accept
        assert "Traceback" not in text
    finally:
        server.kill()
        await server.wait()
