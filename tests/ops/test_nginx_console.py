"""ops/deploy/nginx/cairn-tls.conf run for real (a self-signed certificate) in front of the console:
a 1 MB image goes through the console's upload, a function upload past the service's limit
gets the service's own message, and past nginx's limit nginx answers in the same words as
plain text, not its HTML page; the site's Host passes only when CAIRN_ALLOWED_HOSTS names it."""

from __future__ import annotations

import asyncio
import io
import json
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import attrs
import pytest
from aiohttp.test_utils import TestServer
from PIL import Image

from actors.platform import Runtime
from gateway import server as root
from gateway.services import build_app
from tests.nginx import SITE, certificate, running_nginx, tls_site
from tests.ports import free_ports


def noisy_png(size: int) -> bytes:
    """A PNG of about ``size`` bytes (noise does not compress)."""
    side = int((size / 3) ** 0.5) + 1
    image = Image.frombytes("RGB", (side, side), os.urandom(side * side * 3))
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=0)
    return out.getvalue()


Post = Callable[[str, bytes | aiohttp.FormData, dict[str, str]], Awaitable[tuple[int, str]]]


@attrs.frozen
class Proxied:
    post: Post


@pytest.fixture
async def proxied(runtime: Runtime, tmp_path: Path) -> AsyncIterator[Proxied]:
    servers: list[TestServer] = []
    env = {
        **runtime.env,
        "IMAGES_MAX_UPLOAD": str(2 * 1024 * 1024),
        "CAIRN_ALLOWED_HOSTS": SITE,
        "TRUSTED_PROXIES": "127.0.0.1",
        "ALLOW_IPS": "0.0.0.0",
    }

    async def start(name: str, listen: dict[str, tuple[str, int]]) -> int:
        rt = attrs.evolve(runtime, env=env, listen=listen)
        server = TestServer(await build_app(root.load(name), rt), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return int(server.port or 0)

    listen = {
        "images": ("127.0.0.1", await start("images", {})),
        "functions": ("127.0.0.1", await start("functions", {})),
    }
    console = await start("status", listen)
    cert, key = await asyncio.to_thread(certificate, tmp_path / "tls")
    https, http = free_ports(2)
    site = tls_site({8000: console, 8200: listen["functions"][1]}, https, http, cert, key)
    context = ssl.create_default_context(cafile=str(cert))
    context.check_hostname = False

    async def post(
        path: str, body: bytes | aiohttp.FormData, headers: dict[str, str]
    ) -> tuple[int, str]:
        connector = aiohttp.TCPConnector(ssl=context)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(
                f"https://127.0.0.1:{https}{path}", data=body, headers={"Host": SITE, **headers}
            ) as resp,
        ):
            return resp.status, await resp.text()

    try:
        async with running_nginx(site, tmp_path / "nginx", https):
            yield Proxied(post)
    finally:
        for server in reversed(servers):
            await server.close()


def form(data: bytes) -> aiohttp.FormData:
    upload = aiohttp.FormData()
    upload.add_field("filepath", data, filename="big.png", content_type="image/png")
    return upload


async def test_a_1_mb_image_goes_through_the_console(proxied: Proxied) -> None:
    png = noisy_png(1024 * 1024)
    assert len(png) > 1024 * 1024
    status, text = await proxied.post("/console/svc/images/upload/big", form(png), {})
    assert status == 201, text
    assert json.loads(text)["size"] == len(png)


async def test_past_the_service_limit_the_service_says_so(proxied: Proxied) -> None:
    status, text = await proxied.post(
        "/console/svc/images/upload/big", form(noisy_png(3 * 1024 * 1024)), {}
    )
    assert (status, text) == (413, f"file too large (limit {2 * 1024 * 1024} bytes)")
    code = json.dumps({"path": "a/b", "language": "python", "code": "#" * (300 * 1024)})
    status, text = await proxied.post(
        "/console/svc/functions/upload", code.encode(), {"Content-Type": "application/json"}
    )
    assert (status, text) == (400, "request body is larger than CODE_MAX_SIZE (262144 bytes)")


async def test_past_nginx_limit_nginx_answers_in_plain_words(proxied: Proxied) -> None:
    body = b"x" * (21 * 1024 * 1024)
    status, text = await proxied.post(
        "/console/svc/images/upload/big", body, {"Content-Type": "multipart/form-data; boundary=x"}
    )
    assert (status, text) == (413, "file too large (limit 20971520 bytes)")
    status, text = await proxied.post("/console/svc/functions/upload", b"x" * (400 * 1024), {})
    assert (status, text) == (413, "request body too large (limit 327680 bytes)")


async def test_the_sites_name_must_be_listed(proxied: Proxied) -> None:
    status, text = await proxied.post("/console/svc/images/upload/big", b"", {"Host": "other.test"})
    assert status == 403 and "host not allowed" in text
