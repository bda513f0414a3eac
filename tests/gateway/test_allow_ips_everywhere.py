"""ALLOW_IPS on the functions and images services, as on the VM service: a client outside it
stores, deletes, runs and reads code nowhere (403 before any effect); reads of what is public
stay open; a trusted proxy's X-Forwarded-For decides. Real apps, real HTTP."""

from __future__ import annotations

import base64
import json

import aiohttp

from gateway.http.allow_ips import FORBIDDEN
from tests.conftest import Serve

BILLING = {"path": "team/billing", "language": "python", "code": "def handler(x):\n    return 1\n"}
OUTSIDER = f"{FORBIDDEN} (client address 127.0.0.1)"
GIF = base64.b64decode("R0lGODlhAQABAAAAACwAAAAAAQABAAACAkQBADs=")  # 1x1


async def call(
    method: str, url: str, body: bytes | str | aiohttp.FormData = b"", **headers: str
) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.text()


def image_form() -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("filepath", GIF, filename="a.gif", content_type="image/gif")
    return form


async def test_functions_refuse_outsiders_before_any_effect(serve: Serve) -> None:
    base = await serve("functions", ALLOW_IPS="10.9.9.9")
    run_now = '{"language": "python", "code": "def handler(x):\\n    return 1\\n"}'
    for method, path, body in (
        ("POST", "/upload", json.dumps(BILLING)),
        ("POST", "/run-now", run_now),
        ("POST", "/run/team/billing", "{}"),
        ("DELETE", "/functions/team/billing", ""),
        ("GET", "/code/team/billing", ""),
    ):
        assert await call(method, base + path, body) == (403, OUTSIDER), path
    # Nothing was stored; the listing itself is a read, open as the VM list is.
    status, text = await call("GET", f"{base}/functions")
    assert (status, json.loads(text)["count"]) == (200, 0)


async def test_functions_behind_a_trusted_proxy(serve: Serve) -> None:
    base = await serve("functions", ALLOW_IPS="10.9.9.9", TRUSTED_PROXIES="127.0.0.1")
    status, text = await call(
        "POST", f"{base}/upload", json.dumps(BILLING), **{"X-Forwarded-For": "10.9.9.8"}
    )
    assert (status, text) == (403, f"{FORBIDDEN} (client address 10.9.9.8)")
    status, text = await call(
        "POST", f"{base}/upload", json.dumps(BILLING), **{"X-Forwarded-For": "10.9.9.9"}
    )
    assert status == 200, text
    status, text = await call("GET", f"{base}/code/team/billing", **{"X-Forwarded-For": "10.9.9.9"})
    assert (status, text) == (200, BILLING["code"])


async def test_images_refuse_outsiders_before_any_effect(serve: Serve) -> None:
    base = await serve("images", ALLOW_IPS="10.9.9.9, 192.168.0.0/24")
    assert await call("POST", f"{base}/upload/a", image_form()) == (403, OUTSIDER)
    assert await call("DELETE", f"{base}/del/a/a.gif") == (403, OUTSIDER)
    assert (await call("GET", f"{base}/ls/a"))[0] == 404  # nothing stored under a/
    assert (await call("GET", f"{base}/ls"))[0] == 200  # reads stay open


async def test_without_allow_ips_every_client_is_served(serve: Serve) -> None:
    """On loopback with nothing configured, every local client is served."""
    functions = await serve("functions")
    status, text = await call("POST", f"{functions}/upload", json.dumps(BILLING))
    assert status == 200, text
    images = await serve("images")
    status, text = await call("POST", f"{images}/upload/a", image_form())
    assert status == 201, text
    assert await call("DELETE", f"{images}/del/a/a.gif") == (
        200,
        '{"success": true, "message": "a/a.gif deleted"}',
    )
