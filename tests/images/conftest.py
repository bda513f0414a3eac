"""The image service over real HTTP on loopback, with a real NATS, store and actor host."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import attrs
import pytest
from aiohttp.test_utils import TestServer

from actors.images.layout import StoreLayout
from actors.platform import Runtime
from gateway.apps.images import build


@attrs.define
class Images:
    http: aiohttp.ClientSession
    layout: StoreLayout
    base: str

    def put(self, relpath: str, data: bytes) -> Path:
        """Place a file in the store directly, as an operator copying files in would."""
        path = self.layout.store / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    async def upload(
        self, directory: str, filename: str, data: bytes, field: str = "filepath"
    ) -> aiohttp.ClientResponse:
        form = aiohttp.FormData(quote_fields=False)  # names as browsers send them
        form.add_field(field, data, filename=filename, content_type="application/octet-stream")
        return await self.http.post(f"/upload/{directory}", data=form)


ImagesFactory = Callable[..., Awaitable[Images]]


@pytest.fixture
async def make_images(runtime: Runtime) -> AsyncIterator[ImagesFactory]:
    servers: list[TestServer] = []
    sessions: list[aiohttp.ClientSession] = []

    async def make(**env: str) -> Images:
        rt = attrs.evolve(runtime, env={**runtime.env, **env})
        app = await build(rt)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        base = str(server.make_url("")).rstrip("/")
        session = aiohttp.ClientSession(base_url=base, auto_decompress=False)
        sessions.append(session)
        return Images(session, StoreLayout.create(rt.data_dir), base)

    yield make
    for session in sessions:
        await session.close()
    for server in servers:
        await server.close()


@pytest.fixture
async def images(make_images: ImagesFactory) -> Images:
    return await make_images()


async def raw_request(base: str, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send ``target`` byte for byte (an HTTP client library would normalise it first)."""
    import asyncio

    from yarl import URL

    url = URL(base)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    writer.write(head.encode("latin-1") + body)
    await writer.drain()
    response = await reader.read()
    writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), payload


async def raw_upload(base: str, target: str, filename: bytes, data: bytes) -> tuple[int, bytes]:
    """A multipart upload written by hand, so file names no client library allows get sent."""
    body = (
        b'--BOUND\r\nContent-Disposition: form-data; name="filepath"; filename="'
        + filename
        + b'"\r\nContent-Type: application/octet-stream\r\n\r\n'
        + data
        + b"\r\n--BOUND--\r\n"
    )
    import asyncio

    from yarl import URL

    url = URL(base)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    head = (
        f"POST {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        "Content-Type: multipart/form-data; boundary=BOUND\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + body)
    response = await reader.read()
    writer.close()
    status_line, _, rest = response.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), payload
