"""The supervisor's ping: a server whose accept loop still sends INFO but whose client loop no
longer answers counts as hung; a real server, and one that refuses an anonymous ping, answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

from events.nats_server import EmbeddedNats


async def serve_info_only(silent: bool) -> tuple[asyncio.Server, int]:
    """A TCP server that greets with an INFO line, then answers PING only if not ``silent``."""

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'INFO {"server_id":"fake"}\r\n')
        await writer.drain()
        if await reader.readline() == b"PING\r\n" and not silent:
            writer.write(b"-ERR 'Authorization Violation'\r\n")
            await writer.drain()
        await reader.read()  # until the prober closes
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_server_that_greets_but_never_answers_a_ping_is_hung(tmp_path: Path) -> None:
    for silent, answers in ((True, False), (False, True)):
        server, port = await serve_info_only(silent)
        async with server:
            probe = EmbeddedNats(tmp_path, port=port)
            assert await probe.answers() is answers


async def test_a_real_server_answers_the_ping(tmp_path: Path) -> None:
    async with EmbeddedNats(tmp_path / "nats") as nats:
        assert await nats.answers()
