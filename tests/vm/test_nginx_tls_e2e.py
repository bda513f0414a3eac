"""ops/deploy/nginx/cairn-tls.conf run for real (a self-signed certificate) in front of the VM
service: an install streams through TLS live, and ALLOW_IPS sees the client's own address."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path
from typing import Any

import aiohttp

from tests.nginx import EXAMPLES, running_nginx
from tests.ports import free_ports
from tests.vm.conftest import Service, read_sse


def _certificate(work: Path) -> tuple[Path, Path]:
    work.mkdir(parents=True, exist_ok=True)
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=cairn.test", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def _site(service_port: int, https: int, http: int, cert: Path, key: Path) -> str:
    site = (EXAMPLES / "cairn-tls.conf").read_text()
    for old, new in (
        ("server 127.0.0.1:8100;", f"server 127.0.0.1:{service_port};"),
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{https} ssl http2;"),
        ("listen 80;", f"listen 127.0.0.1:{http};"),
        ("/etc/ssl/cairn/fullchain.pem", str(cert)),
        ("/etc/ssl/cairn/privkey.pem", str(key)),
    ):
        assert old in site, old
        site = site.replace(old, new)
    return site


async def test_an_install_streams_through_tls_and_the_client_address_is_checked(
    start_service: Any, tmp_path: Path
) -> None:
    service: Service = await start_service(ALLOW_IPS="127.0.0.5", TRUSTED_PROXIES="127.0.0.1")
    service_port = int(service.url.rsplit(":", 1)[1])
    cert, key = await asyncio.to_thread(_certificate, tmp_path / "tls")
    https, http = free_ports(2)
    site = _site(service_port, https, http, cert, key)
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
