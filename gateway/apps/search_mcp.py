"""The search service over the Model Context Protocol: tools `list_rag` and `search_rag`.

Two transports, one tool layer, both from the official `mcp` SDK:

- Streamable HTTP at `/mcp` inside the search service's aiohttp app (only with SEARCH_REMOTE=1).
  The SDK's transport is an ASGI application (`StreamableHTTPSessionManager.handle_request`);
  `serve_asgi` hands it each aiohttp request and streams its answer back, so the protocol is the
  SDK's own while `/mcp` shares the service's port, its Host/Origin guard and its lifetime.
  Stateless with JSON answers: the tools are read-only and never call back to the client, so
  the daemon keeps no per-client session and no long-lived stream.
- stdio (`cairn search mcp`): a thin client of the running service, found through the
  `endpoint` file, so there is one owner of the databases and the answers are the HTTP ones
  (gateway/cli/search_mcp.py).

Results are the HTTP response bodies (`{"loaded", "registered"}`; `{"hybrid"}`, or
`{"keyword"?, "semantic"?}`, grouped by source), as JSON text and as structured content.
`search_rag` answers with the best mode unless told otherwise: `hybrid` with snippets; `mode`
`keyword`, `semantic` or `both` with `highlight: false` are the HTTP service's answers. Bad
arguments are tool errors (`isError`) with the HTTP service's messages, so an agent can read
and correct them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Protocol

import attrs
import mcp_types as types
from aiohttp import web
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from multidict import CIMultiDict

from gateway.apps.search_query import BadRequest, Options, SearchService

log = logging.getLogger(__name__)

SERVER_NAME = "cairn-search"
MODES = ("hybrid", "keyword", "semantic", "both")
DEFAULT_MODE = "hybrid"
RANKS = ("bm25", "spec")
DEFAULT_LIMIT = 10
MAX_LIMIT = 100
# Queries are short; this only bounds what a client can make the service buffer.
MAX_BODY = 1024 * 1024

LIST_RAG = types.Tool(
    name="list_rag",
    title="List search databases",
    description=(
        "The search databases: `loaded` (names searchable now) and `registered` "
        "(every registered database, {db, createAt}; a new one is loaded at the next restart)."
    ),
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
)

SEARCH_RAG = types.Tool(
    name="search_rag",
    title="Search a database",
    description=(
        "Search a loaded database. By default (mode hybrid) words (BM25) and meaning (semantic) "
        'are fused into one list: {"hybrid": [...]}; mode keyword, semantic or both gives '
        '{"keyword": [...]}, {"semantic": [...]} or both. Each list holds {source, matches: '
        "[{chunk, content, snippet, highlights}]} grouped by source file, best first; snippet "
        "is the part of content around the query's words, highlights their [start, end) "
        "character offsets in it (highlight false leaves both out)."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "db": {"type": "string", "description": "a loaded database (see list_rag)"},
            "q": {"type": "string", "minLength": 1, "description": "the query text"},
            "mode": {
                "type": "string",
                "enum": list(MODES),
                "default": DEFAULT_MODE,
                "description": "hybrid (one fused list, the default), keyword, semantic or both",
            },
            "rank": {
                "type": "string",
                "enum": list(RANKS),
                "default": "spec",
                "description": "the keyword branch's ranking (modes keyword and both): spec "
                "(words matched, then row: the service's contract) or bm25",
            },
            "highlight": {
                "type": "boolean",
                "default": True,
                "description": "add snippet and highlights to each match",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "default": DEFAULT_LIMIT,
                "description": "matches per branch, 1-100 (anything else means 10)",
            },
        },
        "required": ["db", "q"],
        "additionalProperties": False,
    },
    annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
)

TOOLS = (LIST_RAG, SEARCH_RAG)


class ToolFailure(Exception):
    """A tool call that failed with a message meant for the caller."""


class Backend(Protocol):
    async def listing(self) -> dict[str, Any]: ...

    async def search(self, args: SearchArguments) -> dict[str, Any]: ...


# -- arguments ------------------------------------------------------------------------------------


@attrs.frozen
class SearchArguments:
    db: str
    q: str
    mode: str
    limit: int
    rank: str = "spec"
    highlight: bool = True

    @property
    def target(self) -> str:
        """The HTTP `target`."""
        return self.mode

    @property
    def options(self) -> Options:
        return Options(rank="bm25" if self.rank == "bm25" else None, highlight=self.highlight)


def _limit(raw: Any) -> int:
    """As over HTTP, so both doors answer alike: 1-100, anything else (missing, non-numeric,
    out of range) is 10."""
    if isinstance(raw, bool):
        return DEFAULT_LIMIT
    try:
        value = int(raw) if isinstance(raw, int | str) else DEFAULT_LIMIT
    except ValueError:
        return DEFAULT_LIMIT
    return value if 1 <= value <= MAX_LIMIT else DEFAULT_LIMIT


def parse_search_arguments(arguments: Mapping[str, Any] | None) -> SearchArguments:
    """Check `search_rag`'s arguments; ToolFailure carries the message for the caller."""
    arguments = arguments or {}
    unknown = sorted(set(arguments) - {"db", "q", "mode", "limit", "rank", "highlight"})
    if unknown:
        names = ", ".join(json.dumps(name) for name in unknown)
        raise ToolFailure(
            f"invalid argument: unknown argument {names} (db, q, mode, limit, rank, highlight)"
        )
    db = arguments.get("db")
    if db is not None and not isinstance(db, str):
        raise ToolFailure("invalid argument: db must be a string")
    if not db:
        raise ToolFailure("db is required")
    q = arguments.get("q")
    if q is not None and not isinstance(q, str):
        raise ToolFailure("invalid argument: q must be a string")
    if not q:
        raise ToolFailure("invalid argument: q is required")
    mode = arguments.get("mode", DEFAULT_MODE)
    if mode not in MODES:
        raise ToolFailure(
            f"invalid argument: unknown mode {_shown(mode)}; "
            "use hybrid (the default), keyword, semantic or both"
        )
    rank = arguments.get("rank", "spec")
    if rank not in RANKS:
        raise ToolFailure(f"invalid argument: unknown rank {_shown(rank)}; use spec or bm25")
    highlight = arguments.get("highlight", True)
    if not isinstance(highlight, bool):
        raise ToolFailure("invalid argument: highlight must be true or false")
    return SearchArguments(db, q, mode, _limit(arguments.get("limit")), rank, highlight)


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else "of that type"


# -- tools ----------------------------------------------------------------------------------------


def _text(body: Mapping[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


def tool_result(body: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=_text(body))], structured_content=body
    )


def tool_error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


async def call_tool(backend: Backend, name: str, arguments: Mapping[str, Any] | None) -> Any:
    """Run one tool; every failure the caller can act on becomes a tool error, not a crash."""
    try:
        if name == LIST_RAG.name:
            if arguments:
                raise ToolFailure("invalid argument: list_rag takes no arguments")
            return tool_result(await backend.listing())
        if name == SEARCH_RAG.name:
            return tool_result(await backend.search(parse_search_arguments(arguments)))
        raise ToolFailure(f"unknown tool {json.dumps(name)} (list_rag, search_rag)")
    except ToolFailure as exc:
        return tool_error(str(exc))


def make_server(backend: Backend) -> Server[Any]:
    async def on_list_tools(
        _: ServerRequestContext[Any], __: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(TOOLS))

    async def on_call_tool(
        _: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        result: types.CallToolResult = await call_tool(backend, params.name, params.arguments)
        return result

    schemas = {tool.name: tool.input_schema for tool in TOOLS}
    return Server(
        SERVER_NAME,
        version="1",
        instructions=(
            "Read-only search over the user's document databases. Call list_rag for the "
            "database names, then search_rag."
        ),
        get_tool_input_schema=schemas.get,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


class ServiceBackend:
    """The tools over the service's own objects (the `/mcp` endpoint, same process)."""

    def __init__(self, service: SearchService) -> None:
        self._service = service

    async def listing(self) -> dict[str, Any]:
        return self._service.listing()

    async def search(self, args: SearchArguments) -> dict[str, Any]:
        try:
            return await self._service.search(
                args.db, args.q, args.target, args.limit, args.options
            )
        except BadRequest as exc:
            raise ToolFailure(str(exc)) from None
        except Exception as exc:
            log.exception("mcp: search failed")
            raise ToolFailure(str(exc) or type(exc).__name__) from None


# -- Streamable HTTP inside aiohttp ---------------------------------------------------------------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


def asgi_scope(request: web.Request) -> Scope:
    """The ASGI HTTP scope of an aiohttp request."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1"),
        "query_string": request.query_string.encode("latin-1"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": tuple(peer[:2]) if peer else None,
        "server": tuple(sock[:2]) if sock else None,
        "state": {},
    }


async def serve_asgi(app: ASGIApp, request: web.Request) -> web.StreamResponse:
    """Run one request through an ASGI app, streaming its answer (SSE included).

    The body is passed on in chunks; after it, `receive` waits until the answer is complete,
    since aiohttp tells a handler about a vanished client only through a failing write, which
    ends the exchange here as well.
    """
    response: web.StreamResponse | None = None
    finished = asyncio.Event()
    body = request.content
    body_done = False

    async def receive() -> Message:
        nonlocal body_done
        if not body_done:
            chunk = await body.readany()
            body_done = body.at_eof()
            return {"type": "http.request", "body": chunk, "more_body": not body_done}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            headers: CIMultiDict[str] = CIMultiDict()
            for name, value in message.get("headers", []):
                headers.add(name.decode("latin-1"), value.decode("latin-1"))
            # The SDK answers some refusals with a bare sentence and no Content-Type
            # ("Invalid Content-Type header"); aiohttp would call that application/octet-stream.
            headers.setdefault("Content-Type", "text/plain; charset=utf-8")
            response = web.StreamResponse(status=message["status"], headers=headers)
            await response.prepare(request)
        elif message["type"] == "http.response.body":
            if response is None:
                raise RuntimeError("ASGI app sent a body before the response start")
            chunk = message.get("body", b"")
            if chunk:
                await response.write(chunk)
            if not message.get("more_body", False):
                await response.write_eof()
                finished.set()

    try:
        await app(asgi_scope(request), receive, send)
    finally:
        finished.set()
    if response is None:
        return web.json_response({"error": "the MCP transport sent no answer"}, status=500)
    return response


class _ManagerTask:
    """Runs the SDK's session manager in a task of its own for the app's lifetime.

    Its `run()` holds an anyio task group, which must be entered and left by one task;
    aiohttp's start-up and clean-up hooks need not run in the same task.
    """

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self.manager = manager
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self, ready: asyncio.Future[None]) -> None:
        try:
            async with self.manager.run():
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    async def start(self, _: web.Application) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(ready))
        await ready

    async def stop(self, _: web.Application) -> None:
        # On shutdown, before aiohttp waits for open requests: in-flight MCP calls end now.
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def mount_mcp(app: web.Application, service: SearchService) -> None:
    """Serve the tools at `/mcp` (every method; the SDK answers the ones it does not take)."""
    manager = StreamableHTTPSessionManager(
        app=make_server(ServiceBackend(service)),
        json_response=True,
        stateless=True,
        # The service's own Host/Origin guard (gateway.apps.search.rebinding_guard) already covers
        # /mcp like every route, so both parts accept exactly the same hosts.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=MAX_BODY,
    )
    runner = _ManagerTask(manager)
    app.on_startup.append(runner.start)
    app.on_shutdown.append(runner.stop)
    app.on_cleanup.append(runner.stop)

    async def handler(request: web.Request) -> web.StreamResponse:
        return await serve_asgi(manager.handle_request, request)

    async def no_stream(_: web.Request) -> web.Response:
        # A GET asks for a stream of server-initiated messages. This server never sends any
        # (stateless, JSON answers), and the SDK would hold the GET open forever, so answer
        # as the transport spec allows for a server without that stream.
        return web.Response(
            status=405,
            headers={"Allow": "POST"},
            text="this MCP endpoint sends no server-initiated messages: POST JSON-RPC requests",
        )

    app.router.add_get("/mcp", no_stream)
    app.router.add_route("*", "/mcp", handler)
