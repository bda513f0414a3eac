"""Every service cairn serves refuses state-changing requests a page of another site sends
through the browser, and still serves clients that send no Origin (curl, scripts). Each app is
built as `cairn up` builds it (gateway.services.build_app), served over real HTTP."""

from __future__ import annotations

import json

import aiohttp

from gateway.http.crosssite import REFUSED
from tests.conftest import Serve

FOREIGN = [
    {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
    {"Origin": "http://evil.example"},
    {"Sec-Fetch-Site": "cross-site"},
    # Another port of the same host is another application.
    {"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"},
]


async def send(
    method: str, url: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.text()


async def check(url: str, body: bytes, passed: int, method: str = "POST") -> None:
    """Refused from every foreign page; answered as usual (`passed`) for curl and for a page
    of the service's own origin."""
    for headers in FOREIGN:
        status, text = await send(method, url, headers, body)
        assert status == 403, (headers, text)
        assert REFUSED in text
    own = str(aiohttp.client.URL(url).origin())
    for headers in ({}, {"Sec-Fetch-Site": "same-origin", "Origin": own}, {"Origin": own}):
        status, text = await send(method, url, headers, body)
        assert status == passed, (headers, text)


async def test_vm(serve: Serve) -> None:
    base = await serve("vm", flags=frozenset({"sim"}))
    # The install is refused before anything is parsed or started; curl gets the body check.
    await check(f"{base}/api/vm/install", b'{"os": "plan9"}', 400)
    await check(f"{base}/api/vm/101/stop", b"", 404)
    await check(f"{base}/api/vm/101/set/cpu", b'{"cpu": 4}', 404)
    status, _ = await send("GET", f"{base}/api/vm/list", FOREIGN[0])
    assert status == 200  # reads are not state changes


async def test_functions(serve: Serve) -> None:
    base = await serve("functions")
    await check(f"{base}/upload", b"{}", 400)
    await check(f"{base}/run-now", b'{"language": "cobol", "code": "x"}', 400)
    await check(f"{base}/run/nothing", b"{}", 404)


async def test_images(serve: Serve) -> None:
    base = await serve("images")
    await check(f"{base}/upload/a", b"not multipart", 400)
    await check(f"{base}/del/a/missing.png", b"", 404, method="DELETE")


async def test_search_answers_in_its_own_error_shape(serve: Serve) -> None:
    base = await serve("search", SEARCH_REMOTE="1")
    status, text = await send("POST", f"{base}/mcp", {"Sec-Fetch-Site": "cross-site"}, b"{}")
    assert status == 403
    assert REFUSED in json.loads(text)["error"]
    status, text = await send("POST", f"{base}/mcp", {}, b"{}")
    assert status != 403  # the MCP server's own answer to a bad message


async def test_the_console_and_its_forwarding(serve: Serve) -> None:
    base = await serve("status")
    await check(f"{base}/console/svc/functions/upload", b"{}", 503)
