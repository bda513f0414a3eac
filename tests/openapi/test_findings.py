"""What the schemathesis run (test_schemathesis.py) found in the services, each fixed and
kept fixed here."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from events.nats_server import EmbeddedNats
from tests.openapi.conftest import served, start


async def raw_exchange(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


@pytest.mark.usefixtures("cairn_log_filters")
async def test_a_request_aiohttp_cannot_parse_is_one_info_line_not_an_error_traceback(
    tmp_path: Path, nats_server: EmbeddedNats, caplog: pytest.LogCaptureFixture
) -> None:
    # Found: a header value holding a NUL got the client its 400, and the log an ERROR with a
    # 15-line traceback, as if cairn had failed.
    caplog.set_level(logging.INFO)
    async with start("status", tmp_path, nats_server) as service:
        answer = await raw_exchange(
            service.url, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Probe: a\x00b\r\n\r\n"
        )
    assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request")
    [record] = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert record.levelno == logging.INFO
    assert record.exc_info is None
    assert record.getMessage().startswith(
        "malformed request from 127.0.0.1: 400 Invalid header value char"
    )


@pytest.mark.usefixtures("cairn_log_filters")
async def test_a_handler_that_crashes_is_still_an_error_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(_: web.Request) -> web.Response:
        raise RuntimeError("a bug of ours")

    app = web.Application()
    app.router.add_get("/", broken)
    async with served(app) as url, aiohttp.ClientSession() as http, http.get(url) as response:
        assert response.status == 500
    [record] = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and "a bug of ours" in str(record.exc_info[1])


async def test_mcp_refusals_without_a_content_type_are_text(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    # Found: the SDK's bare-sentence refusals went out as application/octet-stream.
    accept = {"Accept": "application/json, text/event-stream"}
    async with (
        start("search", tmp_path, nats_server) as service,
        aiohttp.ClientSession() as http,
        http.post(service.url + "/mcp", headers=accept) as response,
    ):
        assert response.status == 400
        assert response.content_type == "text/plain"
        assert await response.text() == "Invalid Content-Type header"


async def test_vm_init_scripts_unknown_names_and_the_install_route(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    async with start("vm", tmp_path, nats_server) as service, aiohttp.ClientSession() as http:
        # Found: an unknown script was an empty 404 labelled application/octet-stream.
        async with http.get(service.url + "/sh/nope.sh") as response:
            assert response.status == 404
            assert response.content_type == "text/plain"
            text = await response.text()
            assert text.startswith("no init script 'nope.sh'; there are debian_11.sh, ")
            assert "ubuntu_24.04.sh" in text
        async with http.get(service.url + "/sh/debian_12.sh") as response:
            assert response.status == 200
            assert response.content_type == "text/plain"  # readable in a browser
            assert "qemu-guest-agent" in await response.text()
        # Found: GET /api/vm/install was taken for a VM's detail: 400 invalid VM id 'install'.
        async with http.get(service.url + "/api/vm/install") as response:
            assert response.status == 405
            assert response.headers["Allow"] == "POST"
        async with http.get(service.url + "/api/vm/list") as response:
            assert response.status == 200
            assert (await response.json())["count"] == 0
        async with http.get(service.url + "/api/vm/web") as response:
            assert response.status == 400
            assert await response.text() == "invalid VM id 'web'"


async def test_image_paths_holding_a_newline_get_the_paths_answer_not_a_bare_404(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    # Found: `{path:.*}` stops at an encoded newline, so such a path missed its route: a read
    # got `Not Found` (text) instead of the placeholder, an upload or delete `Not Found`
    # instead of `invalid path`.
    async with start("images", tmp_path, nats_server) as service, aiohttp.ClientSession() as http:
        async with http.get(service.url + "/c/img/a%0Ab.png?w=40") as response:
            assert response.status == 404
            assert response.content_type == "image/svg+xml"
            assert 'width="40"' in await response.text()
        form = aiohttp.FormData()
        form.add_field("filepath", b"\x89PNG\r\n\x1a\n", filename="a.png")
        async with http.post(service.url + "/upload/a%0Ab", data=form) as response:
            assert (response.status, await response.text()) == (400, "invalid path")
        async with http.delete(service.url + "/del/a%0Ab.png") as response:
            assert (response.status, await response.text()) == (400, "invalid path")


async def test_function_paths_holding_a_newline_get_the_paths_answer_not_a_bare_404(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    # Found: the same for `/run/*`, `/functions/*` and `/code/*`: aiohttp's `404: Not Found`.
    async with (
        start("functions", tmp_path, nats_server) as service,
        aiohttp.ClientSession() as http,
    ):
        async with http.post(service.url + "/run/a%0Ab", json={}) as response:
            assert (response.status, await response.text()) == (404, "script not found")
        for method, path in (
            ("GET", "/functions/a%0Ab"),
            ("DELETE", "/functions/a%0Ab"),
            ("GET", "/code/a%0Ab"),
        ):
            async with http.request(method, service.url + path) as response:
                assert (response.status, await response.text()) == (404, "script not found")
        body = {"path": "a\nb", "language": "python", "code": "return 1"}
        async with http.post(service.url + "/upload", json=body) as response:
            assert (response.status, await response.text()) == (400, "Invalid path")
