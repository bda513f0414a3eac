"""MCP with the official SDK as the client: Streamable HTTP at /mcp and stdio (`cairn search mcp`).

Each tool answer is compared with what the HTTP API answers for the same question, since the
tools promise results shaped like the HTTP ones.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult, TextContent

from gateway.apps.search_mcp import ToolFailure, parse_search_arguments, serve_asgi
from gateway.cli.search_client import ServiceError, read_endpoint
from tests.search.conftest import INITIALIZE, MCP_HEADERS, SearchHarness

NOTES = {
    "cats.md": "The cat sat on the mat and purred.",
    "money.txt": "Invoices must be paid within thirty days of receipt.",
}

# (arguments, the tool error the caller reads)
BAD_ARGUMENTS: list[tuple[dict[str, Any], str]] = [
    ({"db": "nope", "q": "cat"}, '"nope" not exist'),
    ({"db": "../notes", "q": "cat"}, '"../notes" not exist'),
    ({"q": "cat"}, "db is required"),
    ({"db": "", "q": "cat"}, "db is required"),
    ({"db": 7, "q": "cat"}, "invalid argument: db must be a string"),
    ({"db": "notes"}, "invalid argument: q is required"),
    ({"db": "notes", "q": ""}, "invalid argument: q is required"),
    ({"db": "notes", "q": ["cat"]}, "invalid argument: q must be a string"),
    (
        {"db": "notes", "q": "cat", "mode": "all"},
        'invalid argument: unknown mode "all"; use hybrid (the default), keyword, semantic or both',
    ),
    (
        {"db": "notes", "q": "cat", "mode": 1},
        "invalid argument: unknown mode of that type; "
        "use hybrid (the default), keyword, semantic or both",
    ),
    (
        {"db": "notes", "q": "cat", "rank": "tfidf"},
        'invalid argument: unknown rank "tfidf"; use spec or bm25',
    ),
    (
        {"db": "notes", "q": "cat", "highlight": "yes"},
        "invalid argument: highlight must be true or false",
    ),
    (
        {"db": "notes", "q": "cat", "target": "keyword"},
        'invalid argument: unknown argument "target" (db, q, mode, limit, rank, highlight)',
    ),
]


async def start_remote(h: SearchHarness, **env: str) -> None:
    h.registry.add("notes")
    for name, text in NOTES.items():
        h.write(f"notes/{name}", text)
    await h.start(SEARCH_REMOTE="1", **env)
    for name in NOTES:
        await h.event("search.document_indexed", name)
    await h.settled()


def body_of(result: CallToolResult) -> Any:
    """The tool's answer: its JSON text, which must equal its structured content."""
    assert not result.is_error, result.content
    assert isinstance(result.content[0], TextContent)
    body = json.loads(result.content[0].text)
    assert result.structured_content == body
    return body


def error_of(result: CallToolResult) -> str:
    assert result.is_error
    assert isinstance(result.content[0], TextContent)
    return result.content[0].text


async def exercise(client: Client, h: SearchHarness, *, semantic: bool) -> None:
    """The same conversation over any transport: list tools, call both, every bad argument."""
    listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert sorted(tools) == ["list_rag", "search_rag"]
    schema = tools["search_rag"].input_schema
    assert schema["required"] == ["db", "q"]
    assert schema["properties"]["mode"]["enum"] == ["hybrid", "keyword", "semantic", "both"]
    assert tools["list_rag"].annotations is not None
    assert tools["list_rag"].annotations.read_only_hint is True

    _, http_list = await h.get("/api/list")
    assert body_of(await client.call_tool("list_rag", {})) == http_list
    assert body_of(await client.call_tool("list_rag")) == http_list

    for query in (
        {"q": "cat mat", "target": "keyword"},
        {"q": "東京 invoices", "target": "keyword"},
    ):
        _, expected = await h.get("/api/search", db="notes", **query)
        arguments = {"db": "notes", "q": query["q"], "mode": query["target"], "highlight": False}
        assert body_of(await client.call_tool("search_rag", arguments)) == expected
    keyword = body_of(
        await client.call_tool(
            "search_rag", {"db": "notes", "q": "invoices", "mode": "keyword", "highlight": False}
        )
    )
    assert keyword == {
        "keyword": [
            {"source": "money.txt", "matches": [{"chunk": 0, "content": NOTES["money.txt"]}]}
        ]
    }
    # limit follows the HTTP rule: out of range means 10.
    for limit, matches in ((1, 1), (0, 2), (101, 2), ("1", 1)):
        got = body_of(
            await client.call_tool(
                "search_rag",
                {"db": "notes", "q": "cat invoices", "mode": "keyword", "limit": limit},
            )
        )
        assert sum(len(group["matches"]) for group in got["keyword"]) == matches, limit

    # By default: one fused list, with snippets and highlights (BM25 alone without semantic).
    _, expected = await h.get(
        "/api/search", db="notes", q="when are invoices paid", target="hybrid", highlight="1"
    )
    hybrid = body_of(
        await client.call_tool("search_rag", {"db": "notes", "q": "when are invoices paid"})
    )
    assert hybrid == expected
    (match,) = hybrid["hybrid"][0]["matches"]
    assert hybrid["hybrid"][0]["source"] == "money.txt"
    assert [match["snippet"][a:b] for a, b in match["highlights"]] == ["Invoices", "paid"]
    ranked = await client.call_tool(
        "search_rag", {"db": "notes", "q": "invoice", "mode": "keyword", "rank": "bm25"}
    )
    assert body_of(ranked)["keyword"][0]["source"] == "money.txt"

    if semantic:
        _, expected = await h.get("/api/search", db="notes", q="a kitten resting on a rug")
        both = body_of(
            await client.call_tool(
                "search_rag",
                {
                    "db": "notes",
                    "q": "a kitten resting on a rug",
                    "mode": "both",
                    "highlight": False,
                },
            )
        )
        assert both == expected and both["semantic"][0]["source"] == "cats.md"

    for arguments, message in BAD_ARGUMENTS:
        assert error_of(await client.call_tool("search_rag", arguments)) == message, arguments
    assert error_of(await client.call_tool("list_rag", {"db": "notes"})) == (
        "invalid argument: list_rag takes no arguments"
    )
    assert error_of(await client.call_tool("drop_table", {})) == (
        'unknown tool "drop_table" (list_rag, search_rag)'
    )


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_streamable_http(harness: SearchHarness, mode: str) -> None:
    """`legacy` is the initialize handshake; `auto` negotiates the newer per-request era."""
    await start_remote(harness)
    async with Client(harness.base + "/mcp", mode=mode) as client:
        assert client.server_info is not None and client.server_info.name == "cairn-search"
        if mode == "legacy":
            assert client.protocol_version == "2025-11-25"
            assert client.server_capabilities.tools is not None
        await exercise(client, harness, semantic=mode == "legacy")


async def test_semantic_failure_is_a_tool_error(harness: SearchHarness) -> None:
    await start_remote(harness, EMBEDDING_PROVIDER="none")
    async with Client(harness.base + "/mcp", mode="legacy") as client:
        result = await client.call_tool("search_rag", {"db": "notes", "q": "cat", "mode": "both"})
        assert "no embedding provider" in error_of(result)
        arguments = {"db": "notes", "q": "cat", "mode": "keyword"}
        keyword = body_of(await client.call_tool("search_rag", arguments))
        assert keyword["keyword"][0]["source"] == "cats.md"
        # The default, hybrid, is BM25 alone without a provider.
        hybrid = body_of(await client.call_tool("search_rag", {"db": "notes", "q": "cats"}))
        assert [group["source"] for group in hybrid["hybrid"]] == ["cats.md"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example"},
        {"Host": "evil.example:80"},
        {"Host": "localhost.evil.example"},
        {"Origin": "http://evil.example"},
        {"Origin": "http://127.0.0.1.evil.example:8080"},
        {"Origin": "null"},
    ],
)
async def test_mcp_refuses_foreign_host_or_origin(
    harness: SearchHarness, headers: dict[str, str]
) -> None:
    await start_remote(harness, EMBEDDING_PROVIDER="none")
    assert harness.session is not None
    url = harness.base + "/mcp"
    async with harness.session.post(url, json=INITIALIZE, headers=MCP_HEADERS) as resp:
        assert resp.status == 200  # the same request from a loopback page is served
    async with harness.session.post(
        url, json=INITIALIZE, headers={**MCP_HEADERS, **headers}
    ) as resp:
        assert resp.status == 403
        assert "serverInfo" not in await resp.text()


async def test_mcp_transport_rejections_come_from_the_sdk(harness: SearchHarness) -> None:
    await start_remote(harness, EMBEDDING_PROVIDER="none")
    assert harness.session is not None
    url = harness.base + "/mcp"
    async with harness.session.post(url, data=b"{", headers=MCP_HEADERS) as resp:
        assert (await resp.json())["error"]["code"] == -32700  # parse error
    async with harness.session.post(
        url, json=INITIALIZE, headers={**MCP_HEADERS, "Content-Type": "text/plain"}
    ) as resp:
        assert resp.status == 400
    big = {**INITIALIZE, "params": {**INITIALIZE["params"], "pad": "x" * (2 * 1024 * 1024)}}
    async with harness.session.post(url, json=big, headers=MCP_HEADERS) as resp:
        assert resp.status == 413


async def test_a_get_without_a_session_is_answered_at_once(harness: SearchHarness) -> None:
    # `curl :PORT/mcp` used to hang forever on a stream that never sends anything.
    await start_remote(harness, EMBEDDING_PROVIDER="none")
    assert harness.session is not None
    async with harness.session.get(
        harness.base + "/mcp",
        headers={"Accept": "text/event-stream"},
        timeout=aiohttp.ClientTimeout(total=10),
    ) as resp:
        assert resp.status == 405
        assert resp.headers["Allow"] == "POST"
        assert "POST" in await resp.text()


# -- stdio ----------------------------------------------------------------------------------------


def stdio_params(h: SearchHarness, tmp_path: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "gateway.main", "search", "mcp"],
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "XDG_CONFIG_HOME": h.env["XDG_CONFIG_HOME"],
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        },
        cwd=tmp_path,
    )


@pytest.fixture
async def stdio_log(tmp_path: Path) -> AsyncIterator[Any]:
    with (tmp_path / "mcp-stderr.log").open("w") as log:
        yield log


async def test_stdio(harness: SearchHarness, tmp_path: Path, stdio_log: Any) -> None:
    await start_remote(harness)
    endpoint = Path(harness.env["XDG_CONFIG_HOME"]) / "cairn" / "search" / "endpoint"
    transport = stdio_client(stdio_params(harness, tmp_path), errlog=stdio_log)
    async with Client(transport, mode="legacy") as client:
        assert client.server_info is not None and client.server_info.name == "cairn-search"
        await exercise(client, harness, semantic=True)

        # The service stops: a clean stop removes the endpoint file.
        await harness.stop()
        assert not endpoint.exists()
        message = error_of(await client.call_tool("list_rag", {}))
        assert message.startswith("the search service is not running (no ")
        # A stale endpoint (a crashed service) names the address that did not answer.
        endpoint.write_text(harness.base + "\n")
        message = error_of(await client.call_tool("search_rag", {"db": "notes", "q": "cat"}))
        assert message.startswith(f"the search service at {harness.base} did not answer")
        # A tampered endpoint is never contacted.
        endpoint.write_text("http://192.0.2.1:80\n")
        assert error_of(await client.call_tool("list_rag", {})).endswith(
            "does not hold a loopback http address"
        )
    assert "Traceback" not in (tmp_path / "mcp-stderr.log").read_text()


# -- pure parts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("arguments", "message"), BAD_ARGUMENTS[2:])
def test_argument_errors(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolFailure) as caught:
        parse_search_arguments(arguments)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (None, 10),
        (1, 1),
        (100, 100),
        (0, 10),
        (-3, 10),
        (101, 10),
        ("7", 7),
        ("x", 10),
        (2.5, 10),
        (True, 10),
        ({}, 10),
    ],
)
def test_limit_follows_the_http_rule(limit: Any, expected: int) -> None:
    arguments: dict[str, Any] = {"db": "notes", "q": "cat"}
    if limit is not None:
        arguments["limit"] = limit
    assert parse_search_arguments(arguments).limit == expected


@pytest.mark.parametrize(
    ("content", "ok"),
    [
        ("http://127.0.0.1:8123\n", True),
        ("http://localhost:8123", True),
        ("http://[::1]:8123", True),
        ("http://10.0.0.5:8123", False),
        ("https://127.0.0.1:8123", False),
        ("http://127.0.0.1.evil.example:80", False),
        ("http://127.0.0.1:8123/elsewhere", False),
        ("", False),
    ],
)
def test_endpoint_must_be_loopback(tmp_path: Path, content: str, ok: bool) -> None:
    env: Mapping[str, str] = {"XDG_CONFIG_HOME": str(tmp_path)}
    path = tmp_path / "cairn" / "search" / "endpoint"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    if ok:
        assert read_endpoint(env) == content.strip()
    else:
        with pytest.raises(ServiceError, match="does not hold a loopback http address"):
            read_endpoint(env)


async def test_endpoint_file_names_the_served_address(harness: SearchHarness) -> None:
    await start_remote(harness, EMBEDDING_PROVIDER="none")
    endpoint = Path(harness.env["XDG_CONFIG_HOME"]) / "cairn" / "search" / "endpoint"
    assert endpoint.read_text() == harness.base + "\n"
    async with (
        aiohttp.ClientSession() as session,
        session.get(endpoint.read_text().strip() + "/api/health") as resp,
    ):
        assert (resp.status, await resp.text()) == (200, "OK")


# -- the ASGI bridge ------------------------------------------------------------------------------


async def test_bridge_streams_and_passes_the_whole_body() -> None:
    """An ASGI app's body chunks reach the client as they are sent (SSE needs this), and a
    request body of several chunks arrives whole."""
    first_seen = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        received = b""
        while True:
            message = await receive()
            received += message["body"]
            if not message["more_body"]:
                break
        headers = [(b"content-type", b"text/event-stream"), (b"x-got", str(len(received)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
        await first_seen.wait()  # only the client reading the first event releases the second
        await send({"type": "http.response.body", "body": b"data: two\n\n", "more_body": False})

    async def silent(scope: Any, receive: Any, send: Any) -> None:
        return None

    async def stream_handler(request: web.Request) -> web.StreamResponse:
        return await serve_asgi(app, request)

    async def silent_handler(request: web.Request) -> web.StreamResponse:
        return await serve_asgi(silent, request)

    web_app = web.Application()
    web_app.router.add_route("*", "/stream", stream_handler)
    web_app.router.add_route("*", "/silent", silent_handler)
    server = TestServer(web_app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            payload = os.urandom(300_000)
            async with session.post(server.make_url("/stream"), data=payload) as resp:
                assert resp.headers["x-got"] == str(len(payload))
                assert resp.content_type == "text/event-stream"
                assert await asyncio.wait_for(resp.content.readline(), 10) == b"data: one\n"
                first_seen.set()
                assert await asyncio.wait_for(resp.content.read(), 10) == b"\ndata: two\n\n"
            async with session.get(server.make_url("/silent")) as resp:
                assert resp.status == 500
    finally:
        await server.close()
