"""ops/deploy/nginx/cairn-tls.conf run for real (a self-signed certificate) in front of the VM
service: an install streams through TLS live, and ALLOW_IPS sees the client's own address."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import aiohttp

from tests.nginx import certificate, running_nginx, tls_site
from tests.ports import free_ports
from tests.vm.conftest import Service, read_sse


async def test_an_install_streams_through_tls_and_the_client_address_is_checked(
    start_service: Any, tmp_path: Path
) -> None:
    service: Service = await start_service(ALLOW_IPS="127.0.0.5", TRUSTED_PROXIES="127.0.0.1")
    service_port = int(service.url.rsplit(":", 1)[1])
    cert, key = await asyncio.to_thread(certificate, tmp_path / "tls")
    https, http = free_ports(2)
    site = tls_site({8100: service_port}, https, http, cert, key)
    context = ssl.create_default_context(cafile=str(cert))
    context.check_hostname = False
    base = f"https://127.0.0.1:{https}/api"
    async with running_nginx(site, tmp_path / "nginx", https):

        async def session_from(address: str) -> aiohttp.ClientSession:
            connector = aiohttp.TCPConnector(local_addr=(address, 0), ssl=context)
            return aiohttp.ClientSession(connector=connector)

        outsider = await session_from("127.0.0.6")
        async with outsider, outsider.post(base + "/vm/install", json={"os": "debian"}) as resp:
            assert resp.status == 403
            assert "(client address 127.0.0.6)" in await resp.text()
        async with await session_from("127.0.0.5") as allowed:
            async with allowed.post(
                base + "/vm/install", json={"os": "debian", "version": "12"}
            ) as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                sse = await read_sse(resp)
            assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
            async with allowed.get(base + "/vm/list") as resp:
                listed = await resp.json()
            assert [row["vmid"] for row in listed["list"]] == [sse.last["vm_id"]]
        # Plain HTTP is sent to HTTPS.
        async with (
            aiohttp.ClientSession() as plain,
            plain.get(f"http://127.0.0.1:{http}/api/vm/list", allow_redirects=False) as resp,
        ):
            assert resp.status == 301
            assert resp.headers["Location"].startswith("https://")
