"""The console's server side over real HTTP: its files, the forwarding to the services, the
read models, the event feed, ALLOW_IPS and its headers. The functions and image services run
beside it for real; the console reaches them through `runtime.listen`, as under `cairn up`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from actors.config import ConfigError
from actors.images.events import stored
from actors.platform import Runtime
from actors.search.events import DocumentDismissed
from events.bus import BUS_DOWN
from events.nats_server import EmbeddedNats
from gateway import server as root
from gateway.console import assets
from gateway.console.headers import CSP
from gateway.services import build_app
from tests.conftest import wait_for
from tests.functions.conftest import SERVICE_ENV
from tests.images.imagedata import encoded
from tests.ports import free_port


@attrs.define
class Console:
    base: str
    http: aiohttp.ClientSession
    runtime: Runtime

    async def get(self, path: str, **kw: Any) -> tuple[int, str, Any]:
        async with self.http.get(self.base + path, **kw) as resp:
            return resp.status, await resp.text(), resp.headers


async def serve(app: web.Application, servers: list[TestServer]) -> int:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    servers.append(server)
    assert server.port is not None
    return server.port


@pytest.fixture
async def console(runtime: Runtime, tmp_path: Path) -> AsyncIterator[Console]:
    runtime.env = {**runtime.env, **SERVICE_ENV}
    servers: list[TestServer] = []
    for name in ("functions", "images"):
        app = await build_app(root.load(name), runtime)
        runtime.listen[name] = ("127.0.0.1", await serve(app, servers))
    port = await serve(await build_app(root.load("status"), runtime), servers)
    async with aiohttp.ClientSession() as http:
        yield Console(f"http://127.0.0.1:{port}", http, runtime)
    for server in reversed(servers):
        await server.close()


async def test_the_page_and_its_assets_come_from_here_with_a_strict_policy(
    console: Console,
) -> None:
    status, html, headers = await console.get("/")
    assert status == 200
    assert headers["Content-Security-Policy"] == CSP
    assert "script-src 'self'" in CSP and "unsafe" not in CSP and "default-src 'none'" in CSP
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff"
    # Every script and style of the page is local, and none is inline.
    assert "<style" not in html and "style=" not in html
    assert html.count("<script") == 1 and 'src="/console/static/app.js"' in html
    for path, kind in (
        ("/console/static/app.js", "javascript"),
        ("/console/tables/stages.js", "javascript"),
        ("/console/vendor/preact-htm/standalone.module.js", "javascript"),
        ("/console/vendor/eventsource-parser/index.js", "javascript"),
        ("/console/vendor/pico/pico.min.css", "text/css"),
    ):
        status, body, headers = await console.get(path)
        assert status == 200, path
        assert kind in headers["Content-Type"], path
        assert "http://" not in body.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in body or path.endswith(".css")  # pico names its home page


@pytest.mark.parametrize(
    "path",
    [
        "/console/vendor/pico/../package.json",
        "/console/vendor/pico/%2e%2e/package.json",
        "/console/vendor/pico/..%2f..%2f..%2fpackage.json",
        "/console/vendor/esbuild/package.json",
        "/console/static/../app.py",
        "/console/static/%2e%2e/app.py",
        "/console/tables/../app.py",
        "/console/tables/tables.py",
        "/console/tables/stages.json",
    ],
)
async def test_nothing_else_of_the_disk_is_served(console: Console, path: str) -> None:
    status, body, _ = await console.get(path)
    assert status in (403, 404)
    assert "cairn-ops-tools" not in body and "def mount" not in body


async def test_the_stage_table_is_read_only(console: Console) -> None:
    async with console.http.post(console.base + "/console/tables/stages.js", data="x") as resp:
        assert resp.status == 405
    status, body, headers = await console.get("/console/tables/stages.js?x=../../app.py")
    assert status == 200 and body.startswith("export const INSTALL_STAGES = [")
    assert headers["Content-Security-Policy"] == CSP


async def test_without_the_npm_packages_the_page_says_what_to_run(tmp_path: Path) -> None:
    app = web.Application()
    assets.add_routes(app, root=tmp_path / "node_modules")
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http, http.get(server.make_url("/")) as resp:
            assert resp.status == 503
            assert "run ops/setup" in await resp.text()
    finally:
        await server.close()


async def test_forwarding_keeps_status_messages_bodies_and_encoded_paths(
    console: Console,
) -> None:
    svc = console.base + "/console/svc"
    # A service's own refusal, status and message, unchanged.
    async with console.http.post(f"{svc}/functions/upload", data=b"{") as resp:
        assert (resp.status, await resp.text()) == (400, "Invalid request payload")
    # The headers an answer carries its facts in.
    async with console.http.post(
        f"{svc}/functions/upload", json={"path": "f", "language": "python", "code": "return 1"}
    ) as resp:
        version = (await resp.json())["version"]
    async with console.http.get(f"{svc}/functions/code/f") as resp:
        assert await resp.text() == "return 1"
        assert resp.headers["X-Function-Version"] == str(version)
        assert resp.headers["X-Function-Language"] == "python"
    # A multipart upload streamed through, then listed, read and deleted.
    form = aiohttp.FormData(quote_fields=False)  # names as browsers send them
    form.add_field("filepath", encoded("PNG", (6, 4)), filename="a b%.png")
    async with console.http.post(f"{svc}/images/upload/x%2Fy", data=form) as resp:
        assert resp.status == 201, await resp.text()
        assert (await resp.json())["src"] == "/c/img/x/y/a%20b%25.png"
    async with console.http.get(f"{svc}/images/ls/x/y") as resp:
        assert [e["name"] for e in (await resp.json())["entries"]] == ["a b%.png"]
    async with console.http.get(
        f"{svc}/images/c/img/x/y/a%20b%25.png?t=png&w=3", headers={"Accept": "image/png"}
    ) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "image/png"
        assert resp.headers["ETag"]
        etag = resp.headers["ETag"]
    async with console.http.get(
        f"{svc}/images/c/img/x/y/a%20b%25.png?t=png&w=3", headers={"If-None-Match": etag}
    ) as resp:
        assert resp.status == 304
    async with console.http.delete(f"{svc}/images/del/x/y/a%20b%25.png") as resp:
        assert resp.status == 200
    async with console.http.get(f"{svc}/images/ls/..%2f..") as resp:
        assert (resp.status, await resp.text()) == (400, "invalid path")


async def test_a_stream_arrives_through_the_console_as_it_is_written(console: Console) -> None:
    code = "import time\nprint('first', flush=True)\ntime.sleep(1)\nreturn 42\n"
    async with console.http.post(
        console.base + "/console/svc/functions/run-now",
        json={"language": "python", "code": code, "stream": True},
    ) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        first = await resp.content.readline()
        # The log line is here while the run still sleeps: its result has not been sent.
        assert json.loads(first.decode().removeprefix("data: ")) == {
            "event": "log",
            "data": "first",
            "type": "text",
        }
        rest = (await resp.read()).decode()
    assert '"event":"result","data":"42","type":"number"' in rest


async def test_unknown_absent_and_unreachable_services_are_said_so(console: Console) -> None:
    status, text, _ = await console.get("/console/svc/mail/x")
    assert (status, text) == (404, "unknown service 'mail'")
    status, text, _ = await console.get("/console/svc/vm/api/vm/list")
    assert (status, text) == (503, "the vm service does not run in this cairn process")
    console.runtime.listen["search"] = ("127.0.0.1", free_port())
    status, text, _ = await console.get("/console/svc/search/api/list")
    assert status == 502
    assert text.startswith("the search service at http://127.0.0.1:")
    assert "is not reachable" in text


async def test_allow_ips_refuses_other_addresses_changes_and_reads(
    runtime: Runtime, console: Console
) -> None:
    """Reads too: through the console a browser reads search results (loopback-only by
    contract) and function code, which no client outside ALLOW_IPS may (issue 31)."""
    runtime.env = {**runtime.env, "ALLOW_IPS": "10.9.9.9, 192.168.0.0/24"}
    port = free_port()
    app = await build_app(root.load("status"), runtime)
    server = TestServer(app, host="127.0.0.1", port=port)
    await server.start_server()
    try:
        base = f"http://127.0.0.1:{port}/console/svc"
        refused = "this IP is not allowed to perform this action (client address 127.0.0.1)"
        async with console.http.post(f"{base}/functions/upload", data=b"{}") as resp:
            assert (resp.status, await resp.text()) == (403, refused)
        async with console.http.delete(f"{base}/images/del/a.png") as resp:
            assert (resp.status, await resp.text()) == (403, refused)
        async with console.http.get(f"{base}/vm/api/vm/101/task") as resp:
            assert (resp.status, await resp.text()) == (403, refused)
        for read in ("images/ls", "search/api/search?q=secret", "functions/code/a"):
            async with console.http.get(f"{base}/{read}") as resp:
                assert (resp.status, await resp.text()) == (403, refused)
        for page in ("/", "/console/events", "/console/api/search/notes/documents"):
            async with console.http.get(f"http://127.0.0.1:{port}{page}") as resp:
                assert (resp.status, await resp.text()) == (403, refused)
        async with console.http.get(f"http://127.0.0.1:{port}/health") as resp:
            assert resp.status == 200  # not the console's: open, like every health route
    finally:
        await server.close()


async def test_beyond_loopback_the_console_needs_allow_ips(runtime: Runtime) -> None:
    runtime.listen["status"] = ("0.0.0.0", 8000)
    with pytest.raises(ConfigError, match="ALLOW_IPS: must be set when the console"):
        await build_app(root.load("status"), runtime)
    runtime.env = {**runtime.env, "ALLOW_IPS": "10.0.0.0/8"}
    await build_app(root.load("status"), runtime)


async def test_a_databases_documents_from_its_events(console: Console) -> None:
    dismissed = DocumentDismissed(db="notes", source="x.bin", reason="unreadable")
    await console.runtime.store.append("search:notes", 0, [dismissed])
    status, body, _ = await console.get("/console/api/search/notes/documents")
    assert status == 200
    assert [(d["source"], d["status"]) for d in json.loads(body)] == [("x.bin", "dismissed")]
    assert (await console.get("/console/api/search/empty/documents"))[:2] == (200, "[]")


async def read_events(resp: aiohttp.ClientResponse, count: int) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    event_id = ""
    while len(found) < count:
        line = (await asyncio.wait_for(resp.content.readline(), 30)).decode().rstrip("\n")
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            found.append((event_id, json.loads(line[6:])))
    return found


async def test_the_event_feed_sends_the_latest_then_live_events_and_resumes(
    console: Console,
) -> None:
    store = console.runtime.store
    await store.append("images:store", 0, [stored("old.png", "image/png", 1)])
    url = console.base + "/console/events"
    async with console.http.get(url) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        [(first_id, first)] = await read_events(resp, 1)
        assert first["type"] == "images.stored" and first["data"]["path"] == "old.png"
        assert first_id == str(first["position"])
        await store.append("images:store", 1, [stored("new.png", "image/png", 2)])
        [(live_id, live)] = await read_events(resp, 1)
        assert live["data"]["path"] == "new.png" and live["stream"] == "images:store"
    # A client that comes back says where it was, and gets what it missed, from the store.
    await store.append("images:store", 2, [stored("missed.png", "image/png", 3)])
    async with console.http.get(url, headers={"Last-Event-ID": live_id}) as resp:
        [(_, missed)] = await read_events(resp, 1)
        assert missed["data"]["path"] == "missed.png"
    async with console.http.get(url, headers={"Last-Event-ID": "yesterday"}) as resp:
        assert (resp.status, await resp.text()) == (400, "Last-Event-ID: must be an event position")


async def test_behind_a_trusted_proxy_the_browsers_address_decides_and_goes_along(
    runtime: Runtime,
) -> None:
    """nginx in front (docs/deploy.md): the console believes its X-Forwarded-For, checks
    ALLOW_IPS against the browser's address, and hands that address to the VM service, whose
    own check (trusting the console on loopback) passes for the same reason."""
    runtime.env = {
        **runtime.env,
        "ALLOW_IPS": "10.1.2.3",
        "TRUSTED_PROXIES": "127.0.0.1",
    }
    servers: list[TestServer] = []
    sim = attrs.evolve(runtime, flags=frozenset({"sim"}))
    vm = await build_app(root.load("vm"), sim)
    runtime.listen["vm"] = ("127.0.0.1", await serve(vm, servers))
    port = await serve(await build_app(root.load("status"), runtime), servers)
    url = f"http://127.0.0.1:{port}/console/svc/vm/api/vm/999/stop"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(url, headers={"X-Forwarded-For": "10.1.2.3"}) as resp:
                # Past both checks: the VM service's own answer about the VM.
                assert (resp.status, await resp.text()) == (404, "VM 999 not found")
            async with http.post(url, headers={"X-Forwarded-For": "10.9.9.9"}) as resp:
                assert resp.status == 403
                assert "(client address 10.9.9.9)" in await resp.text()
    finally:
        for server in reversed(servers):
            await server.close()


async def test_while_nats_is_down_the_feed_says_so_and_comes_back(
    console: Console, nats_server: EmbeddedNats
) -> None:
    await nats_server.stop()
    await wait_for(lambda: not console.runtime.nc.is_connected, what="the client to notice")
    status, text, _ = await console.get("/console/events")
    assert (status, text) == (503, BUS_DOWN)
    await nats_server.start()  # same port: the client reconnects by itself
    await wait_for(lambda: console.runtime.nc.is_connected, timeout=30, what="the reconnect")
    async with console.http.get(console.base + "/console/events") as resp:
        assert resp.status == 200
