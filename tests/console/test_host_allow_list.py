"""Every service, and the console, refuses a foreign Host (DNS rebinding) with 403 before any
handler runs, for reads and writes alike; loopback names, the bind address and the names of
CAIRN_ALLOWED_HOSTS go through. Each app is built as `cairn up` builds it
(gateway.services.build_app), served over real HTTP and called with a real client."""

from __future__ import annotations

import json

import aiohttp

from gateway.http.hosts import REFUSED
from tests.conftest import Serve

REBOUND = "rebind.evil.example:8000"
# What a rebound page sends: its own name as Host and Origin, and the browser calls it
# same-origin (it is, with the attacker's page).
REBINDING = {
    "Host": REBOUND,
    "Origin": f"http://{REBOUND}",
    "Sec-Fetch-Site": "same-origin",
    "Sec-Fetch-Mode": "cors",
}
BILLING = {"path": "team/billing", "language": "python", "code": "def handler(x):\n    return 1\n"}


async def send(
    method: str, url: str, headers: dict[str, str] | None = None, body: bytes | str = b""
) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, data=body, headers=headers or {}) as resp,
    ):
        return resp.status, await resp.text()


async def refused(method: str, url: str, body: bytes | str = b"", **extra: str) -> None:
    for headers in (REBINDING, {"Host": REBOUND}, {"Host": "10.9.9.9"}):
        status, text = await send(method, url, {**headers, **extra}, body)
        assert status == 403, (method, url, headers, text)
        assert REFUSED in text and "CAIRN_ALLOWED_HOSTS" in text


async def test_vm_refuses_a_rebound_host_on_every_route(serve: Serve) -> None:
    base = await serve("vm", flags=frozenset({"sim"}))
    for method, path in (
        ("GET", "/api/vm/list"),
        ("GET", "/api/vm/102"),
        ("GET", "/health"),
        ("GET", "/sh/ubuntu.sh"),
        ("GET", "/no/such/route"),
        ("POST", "/api/vm/102/stop"),
        ("POST", "/api/vm/install"),
        ("PUT", "/api/vm/list"),
    ):
        await refused(method, base + path, b'{"os": "ubuntu"}')
    # The same calls with the service's own name are answered.
    status, text = await send("GET", f"{base}/api/vm/list")
    assert status == 200, text
    status, _ = await send("GET", f"{base}/api/vm/list", {"Host": "localhost:8100"})
    assert status == 200


async def test_functions_store_nothing_for_a_rebound_page(serve: Serve) -> None:
    base = await serve("functions")
    await refused("POST", f"{base}/upload", json.dumps(BILLING))
    await refused("POST", f"{base}/run-now", '{"language": "python", "code": "x"}')
    await refused("GET", f"{base}/functions")
    await refused("GET", f"{base}/code/team/billing")
    status, text = await send("GET", f"{base}/functions")
    assert (status, json.loads(text)["count"]) == (200, 0)  # the upload never happened
    status, text = await send("POST", f"{base}/upload", body=json.dumps(BILLING))
    assert status == 200, text


async def test_images_store_nothing_for_a_rebound_page(serve: Serve) -> None:
    base = await serve("images")
    form = aiohttp.FormData()
    form.add_field("filepath", b"GIF89a", filename="a.gif", content_type="image/gif")
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base}/upload/a", data=form, headers=REBINDING) as resp,
    ):
        assert resp.status == 403
        assert REFUSED in await resp.text()
    await refused("GET", f"{base}/ls")
    await refused("GET", f"{base}/c/img/a/a.gif")
    await refused("DELETE", f"{base}/del/a/a.gif")
    status, text = await send("GET", f"{base}/ls/a")
    assert status == 404, text  # nothing was stored under a/


async def test_search_and_its_mcp(serve: Serve) -> None:
    base = await serve("search", SEARCH_REMOTE="1")
    for method, path in (("GET", "/api/search?q=x"), ("GET", "/api/list"), ("POST", "/mcp")):
        for headers in (REBINDING, {"Host": REBOUND}):
            status, text = await send(method, base + path, headers, b"{}")
            assert status == 403
            assert REFUSED in json.loads(text)["error"]


async def test_the_console_refuses_before_forwarding(serve: Serve) -> None:
    """The issue's attack, through the console: a rebound page stopped a VM, ran code and read
    a private document. Refused now at the console, before the call is forwarded; the same
    call from the console's own page reaches the functions service and stores."""
    functions = await serve("functions")
    port = int(functions.rsplit(":", 1)[1])
    base = await serve("status", listen={"functions": ("127.0.0.1", port)})
    mcp_call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "search_rag", "arguments": {"query": "secret"}},
    }
    for method, path, body in (
        ("POST", "/console/svc/vm/api/vm/102/stop", ""),
        ("POST", "/console/svc/functions/run-now", '{"language": "python", "code": "x"}'),
        ("POST", "/console/svc/functions/upload", json.dumps(BILLING)),
        ("POST", "/console/svc/search/mcp", json.dumps(mcp_call)),
        ("GET", "/console/svc/search/api/search?q=secret", ""),
        ("GET", "/console/events", ""),
        ("GET", "/", ""),
        ("GET", "/status", ""),
    ):
        await refused(method, base + path, body)
    status, text = await send("GET", f"{functions}/functions")
    assert json.loads(text)["count"] == 0
    own = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
    status, text = await send(
        "POST", f"{base}/console/svc/functions/upload", own, json.dumps(BILLING)
    )
    assert status == 200, text
    status, text = await send("GET", f"{functions}/functions")
    assert json.loads(text)["count"] == 1


async def test_a_listed_name_is_answered(serve: Serve) -> None:
    """Behind a reverse proxy that passes its own name on (proxy_set_header Host $host)."""
    base = await serve("functions", CAIRN_ALLOWED_HOSTS="cairn.example.org")
    headers = {
        "Host": "cairn.example.org",
        "Origin": "https://cairn.example.org",
        "Sec-Fetch-Site": "same-origin",
    }
    status, text = await send("POST", f"{base}/upload", headers, json.dumps(BILLING))
    assert status == 200, text
    await refused("POST", f"{base}/upload", json.dumps(BILLING))
