"""The SSE helper over a real aiohttp server and client."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.http.sse import EventStream, format_event

HOSTILE = 'line one\nline two\r\n"quoted" \\ back\u2028sep\x00nul data: fake\n\nid: 9'

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def parse_frames(body: str) -> list[dict[str, str]]:
    frames = []
    for block in body.split("\n\n"):
        if not block.strip():
            continue
        frame: dict[str, str] = {}
        for line in block.split("\n"):
            key, _, value = line.partition(": ")
            frame[key] = value
        frames.append(frame)
    return frames


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers: list[TestServer] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_get("/s", handler)
        server = TestServer(app)
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/s"))

    yield start
    for server in servers:
        await server.close()


async def test_events_are_json_with_ids_then_close(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        async with EventStream(request) as sse:
            await sse.send({"message": HOSTILE})
            await sse.send({"step": "two"}, id="custom-7")
        return sse.response

    url = await serve(handler)
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream"
        assert resp.headers["Cache-Control"] == "no-cache"
        body = await resp.text()
    frames = parse_frames(body)
    assert len(frames) == 3
    assert json.loads(frames[0]["data"]) == {"message": HOSTILE}
    assert frames[0]["id"] == "1"
    assert frames[1]["id"] == "custom-7"
    assert frames[2]["event"] == "close"
    assert frames[2]["data"] == "{}"
    assert "id" in frames[2]


def test_a_frame_is_one_data_line_whatever_the_message() -> None:
    frame = format_event({"m": HOSTILE}, event="ev\nil", id="1\n2").decode()
    assert frame.endswith("\n\n")
    lines = frame[:-2].split("\n")
    assert lines == [
        "id: 1 2",
        "event: ev il",
        lines[2],
    ]
    assert lines[2].startswith("data: ")
    assert json.loads(lines[2][len("data: ") :]) == {"m": HOSTILE}


async def test_heartbeat_comments_keep_a_quiet_stream_alive(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        async with EventStream(request, heartbeat=0.02) as sse:
            await release.wait()
            await sse.send({"done": True})
        return sse.response

    url = await serve(handler)
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        first = await resp.content.readuntil(b"\n\n")
        assert first == b": keep-alive\n\n"
        release.set()
        rest = (await resp.read()).decode()
    assert [f.get("data") for f in parse_frames(rest) if "data" in f] == ['{"done":true}', "{}"]


async def test_a_client_that_leaves_ends_the_stream_quietly(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    """aiohttp cancels the handler of a vanished client, or ``send`` reports ``False``: either
    way the producer stops, nothing is raised past the handler, the server keeps serving."""
    outcome: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("again"):
            async with EventStream(request) as sse:
                await sse.send({"again": True})
            return sse.response
        try:
            async with EventStream(request) as sse:
                await sse.send({"n": 0})
                for n in range(1, 10_000):
                    if not await sse.send({"n": n, "pad": "x" * 4096}):
                        outcome.set_result("send returned False")
                        break
                    await asyncio.sleep(0.001)  # pacing the producer, not synchronising
        except asyncio.CancelledError:
            outcome.set_result("cancelled")
            raise
        except Exception as exc:  # pragma: no cover - the failure this test looks for
            outcome.set_result(f"raised {exc!r}")
        return sse.response

    url = await serve(handler)
    session = aiohttp.ClientSession()
    resp = await session.get(url)
    await resp.content.readuntil(b"\n\n")
    resp.close()
    await session.close()
    assert await asyncio.wait_for(outcome, 10) in {"cancelled", "send returned False"}

    async with aiohttp.ClientSession() as again, again.get(url + "?again=1") as resp2:
        frames = parse_frames(await resp2.text())
    assert [f["data"] for f in frames] == ['{"again":true}', "{}"]


async def test_send_after_the_stream_closed_returns_false(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    results: list[bool] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        async with EventStream(request) as sse:
            results.append(await sse.send({"n": 1}))
        results.append(await sse.send({"n": 2}))
        return sse.response

    url = await serve(handler)
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        frames = parse_frames(await resp.text())
    assert results == [True, False]
    assert [f["data"] for f in frames] == ['{"n":1}', "{}"]


async def test_a_stream_without_the_close_event_still_ends_cleanly(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        async with EventStream(request, close_event=False) as sse:
            await sse.send({"event": "result", "data": "1", "type": "number"})
        return sse.response

    url = await serve(handler)
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        frames = parse_frames(await resp.text())
    assert frames == [{"id": "1", "data": '{"event":"result","data":"1","type":"number"}'}]


async def test_an_unnumbered_stream_has_no_id_lines_unless_given_one(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        async with EventStream(request, close_event=False, numbered=False) as sse:
            await sse.send({"event": "log", "data": "a", "type": "text"})
            await sse.send({"n": 2}, id="explicit")
        return sse.response

    url = await serve(handler)
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        text = await resp.text()
    assert text == (
        'data: {"event":"log","data":"a","type":"text"}\n\nid: explicit\ndata: {"n":2}\n\n'
    )


async def test_a_client_gone_before_the_headers_ends_the_stream_quietly(
    serve: Callable[[Handler], Awaitable[str]], caplog: pytest.LogCaptureFixture
) -> None:
    """A page reloaded while its stream was being set up: the connection is already closing
    when the headers go out (aiohttp raised "Cannot write to closing transport" there, and the
    server logged a traceback for a client that simply left). The stream starts closed,
    ``send`` says ``False``, the handler ends normally, nothing is logged as an error."""
    outcomes: list[list[bool]] = []  # one per attempt: the client may try a GET again

    async def handler(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        # The state a client's reset leaves until aiohttp hears of it: closing, not yet lost.
        request.transport.close()
        async with EventStream(request) as sse:
            sent = [await sse.send({"n": 1})]
        outcomes.append([*sent, sse.closed])
        return sse.response

    url = await serve(handler)
    async with aiohttp.ClientSession() as session:
        with contextlib.suppress(aiohttp.ClientError):
            await session.get(url)
    assert outcomes and all(outcome == [False, True] for outcome in outcomes)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert not errors, [r.getMessage() for r in errors]
