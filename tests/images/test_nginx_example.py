"""The example nginx configuration, run for real in front of the service.

Uploads from 127.0.0.1 pass the allowlist; 127.0.0.2 (also loopback, not listed) is refused.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from actors.images.settings import DEFAULT_MAX_UPLOAD
from gateway.apps.images import MULTIPART_SLACK
from tests.images.conftest import Images, raw_request
from tests.images.imagedata import encoded
from tests.nginx import EXAMPLES, running_nginx

EXAMPLE = EXAMPLES / "cairn-images.conf"


def test_example_limits_match_the_service() -> None:
    text = EXAMPLE.read_text()
    body = re.search(r"client_max_body_size (\d+)k;", text)
    assert body is not None
    assert int(body.group(1)) * 1024 == DEFAULT_MAX_UPLOAD + MULTIPART_SLACK
    reads = text[text.index("    location /c/img/ {") :]
    reads = reads[: reads.index("}\n\n")]
    assert "proxy_read_timeout 120s;" in reads and "proxy_send_timeout 120s;" in reads
    assert not re.search(r"^\s*alias\s", text, re.M)


def test_writes_are_allowed_only_from_what_the_docs_say_to_list() -> None:
    """The shipped site let every RFC 1918 address upload and delete, the VMs cairn creates
    included: now only this machine, until the admin adds each uploading host (docs)."""
    text = EXAMPLE.read_text()
    private = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
    for location in ("/upload/", "/del/"):
        block = text[text.index(f"    location {location} {{") :]
        block = block[: block.index("    }")]
        allowed = re.findall(r"^\s*allow\s+([^;]+);", block, re.M)
        assert allowed == ["127.0.0.1"], (location, allowed)
        for entry in allowed:
            network = ipaddress.ip_network(entry, strict=False)
            assert not any(network.overlaps(p) for p in private), entry
    docs = (Path(__file__).parents[2] / "docs" / "images.md").read_text()
    assert "one `allow` line for each host that uploads" in docs
    assert "never a whole private range" in docs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def proxied(images: Images, tmp_path: Path) -> AsyncIterator[str]:
    port = _free_port()
    service_port = URL(images.base).port
    site = EXAMPLE.read_text()
    site = site.replace("server 127.0.0.1:8300;", f"server 127.0.0.1:{service_port};")
    site = site.replace("listen 80;", f"listen 127.0.0.1:{port};")
    async with running_nginx(site, tmp_path / "nginx", port):
        yield f"http://127.0.0.1:{port}"


async def _upload(base: str, source: str) -> int:
    form = aiohttp.FormData()
    form.add_field("filepath", encoded("PNG", (8, 8)), filename="a.png")
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(f"{base}/upload/via-nginx", data=form) as resp,
    ):
        return resp.status


async def test_reads_pass_and_writes_are_allowlisted(proxied: str, images: Images) -> None:
    assert await _upload(proxied, "127.0.0.2") == 403
    assert await _upload(proxied, "127.0.0.1") == 201
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{proxied}/c/img/via-nginx/a.png?w=4&t=png") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "image/png"
        async with session.get(f"{proxied}/c/img/nope.png?d") as resp:
            assert resp.status == 404
            assert resp.headers["Cache-Control"] == "no-cache"
        async with session.post(f"{proxied}/c/img/via-nginx/a.png") as resp:
            assert resp.status == 403
        async with session.get(f"{proxied}/elsewhere") as resp:
            assert resp.status == 404
            assert await resp.text() == "Not Found"
        connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
        async with (
            aiohttp.ClientSession(connector=connector) as outsider,
            outsider.delete(f"{proxied}/del/via-nginx/a.png") as resp,
        ):
            assert resp.status == 403
        async with session.delete(f"{proxied}/del/via-nginx/a.png") as resp:
            assert resp.status == 200
    status, _ = await raw_request(proxied, "GET", "/c/img/..%2f..%2fsecret.jpg")
    assert status == 404
