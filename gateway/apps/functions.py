"""The script execution service over HTTP: upload, run and follow functions.

A translator only: uploads and version lookups are NATS commands to the registry, runs are NATS
requests to the runner hosts' queue group, whose messages become a JSON body or an SSE stream.
Error bodies are text/plain, one sentence a person can act on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import attrs
from aiohttp import web

from actors.functions import protocol
from actors.functions.host import FunctionsHost, leased_registry
from actors.functions.languages import Language
from actors.functions.registry import SCRIPT_NOT_FOUND
from actors.functions.requests import (
    FAILED_TO_RUN,
    SAVE_FAILED,
    BadRequest,
    normalize_path,
    parse_run,
    parse_run_now,
    parse_upload,
    parse_version,
    too_large,
)
from actors.functions.results import ResultType, RunResult
from actors.functions.runs import NO_RUNNER, RunClient, RunFailed
from actors.functions.settings import FunctionsSettings
from actors.platform import Runtime
from events.bus import (
    CommandFailed,
    CommandTimeout,
    NoResponders,
    command,
)
from gateway.http.allow_ips import ClientFilter
from gateway.http.exposure import require_allow_ips_or_tokens
from gateway.http.health import add_health, quarantined
from gateway.http.identity import asked_by
from gateway.http.sse import SSE_HEADERS, EventStream
from gateway.http.tokens import FILE_NAME
from gateway.openapi import add_openapi
from gateway.services import ServiceDef

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 10.0
DISCONNECT_POLL_S = 0.2
REGISTRY_SILENT = "the function registry is not answering"


def _summary(path: str, versions: list[dict[str, Any]]) -> dict[str, Any]:
    latest = versions[-1]
    return {
        "path": path,
        "language": latest["language"],
        "latest": latest["version"],
        "versions": [v["version"] for v in versions],
    }


def text_error(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message, content_type="text/plain")


async def read_body(request: web.Request, limit: int) -> bytes:
    """The body, refused as soon as it is known to pass ``limit`` (``CODE_MAX_SIZE``)."""
    if request.content_length is not None and request.content_length > limit:
        raise BadRequest(too_large(limit))
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(65536):
        size += len(chunk)
        if size > limit:
            raise BadRequest(too_large(limit))
        chunks.append(chunk)
    return b"".join(chunks)


_Handler = Callable[["FunctionsGateway", web.Request], Awaitable[web.StreamResponse]]


def _refusals_as_text(handler: _Handler) -> _Handler:
    """A request the parser refuses, or a refusal (or silence) of the registry, is answered
    with its status and message as text: every route of the API fails this one way."""

    @functools.wraps(handler)
    async def answered(gateway: FunctionsGateway, request: web.Request) -> web.StreamResponse:
        try:
            return await handler(gateway, request)
        except (BadRequest, CommandFailed) as exc:
            return text_error(exc.status, exc.message)

    return answered


@attrs.define(eq=False)
class FunctionsGateway:
    runtime: Runtime
    settings: FunctionsSettings
    client: RunClient
    # ALLOW_IPS and TRUSTED_PROXIES: who the client is, for the audit trail's `by`.
    clients: ClientFilter

    async def _registry(
        self, subject: str, payload: dict[str, Any], unavailable: str, status: int = 500
    ) -> Any:
        """The registry's answer; its refusals raise CommandFailed, and so does its absence
        (no host, or none answering), as ``status`` (500, the status the API gives its own failures)
        saying ``unavailable``."""
        try:
            return await command(self.runtime.gateway_nc, subject, payload, COMMAND_TIMEOUT_S)
        except (NoResponders, CommandTimeout):
            raise CommandFailed(status, unavailable) from None

    @_refusals_as_text
    async def upload(self, request: web.Request) -> web.StreamResponse:
        upload = parse_upload(await read_body(request, self.settings.code_max_size))
        upload_command = {
            "path": upload.path,
            "language": str(upload.language),
            "code": upload.code,
            "by": asked_by(request, self.clients),  # recorded in the event (audit trail)
        }
        stored = await self._registry(protocol.UPLOAD_SUBJECT, upload_command, SAVE_FAILED)
        return web.json_response(stored)

    @_refusals_as_text
    async def run_stored(self, request: web.Request) -> web.StreamResponse:
        options = parse_run(await read_body(request, self.settings.code_max_size))
        lookup = {
            "path": normalize_path(request.match_info["target"]),
            "version": parse_version(request.query.get("version")),
        }
        silent = f"{FAILED_TO_RUN}the function registry is not answering"
        found = await self._registry(protocol.RESOLVE_SUBJECT, lookup, silent)
        run = {
            "language": found["language"],
            "code": found["code"],
            "input": options.input_json,
            "stream": options.stream,
            "stored": True,  # its transpiled TypeScript is kept on disk (a /run-now body's not)
            "name": f"{found['path']} version {found['version']}",
            "by": asked_by(request, self.clients),  # named in the run's journal line
        }
        return await self._respond(request, run, options.stream)

    # -- what is stored ----------------------------------------------------------------------

    @_refusals_as_text
    async def list(self, _: web.Request) -> web.Response:
        """`GET /functions`: every stored path, its language and versions (oldest first)."""
        listing = await self._registry(protocol.LIST_SUBJECT, {}, REGISTRY_SILENT, 503)
        functions = [_summary(path, versions) for path, versions in listing.items()]
        return web.json_response({"count": len(functions), "functions": functions})

    @_refusals_as_text
    async def describe(self, request: web.Request) -> web.Response:
        """`GET /functions/<path>`: one function's versions."""
        path = normalize_path(request.match_info["target"])
        listing = await self._registry(protocol.LIST_SUBJECT, {}, REGISTRY_SILENT, 503)
        if path not in listing:
            return text_error(404, SCRIPT_NOT_FOUND)
        return web.json_response({**_summary(path, listing[path]), "versions": listing[path]})

    @_refusals_as_text
    async def code(self, request: web.Request) -> web.Response:
        """`GET /code/<path>[?version=N]`: the source of a version (the latest by default),
        as text; which version and language it is travel in headers."""
        lookup = {
            "path": normalize_path(request.match_info["target"]),
            "version": parse_version(request.query.get("version")),
        }
        found = await self._registry(protocol.RESOLVE_SUBJECT, lookup, REGISTRY_SILENT, 503)
        return web.Response(
            text=found["code"],
            content_type="text/plain",
            headers={
                "X-Function-Version": str(found["version"]),
                "X-Function-Language": found["language"],
            },
        )

    @_refusals_as_text
    async def delete(self, request: web.Request) -> web.Response:
        """`DELETE /functions/<path>`: every version goes; runs then answer 404."""
        path = normalize_path(request.match_info["target"])
        done = await self._registry(
            protocol.DELETE_SUBJECT,
            {"path": path, "by": asked_by(request, self.clients)},
            REGISTRY_SILENT,
            503,
        )
        return web.json_response(done)

    @_refusals_as_text
    async def runtimes(self, _: web.Request) -> web.Response:
        """`GET /runtimes`: the languages and the versions of what runs them (as Piston)."""
        found = await self._registry(protocol.RUNTIMES_SUBJECT, {}, NO_RUNNER, 503)
        return web.json_response(found)

    @_refusals_as_text
    async def run_now(self, request: web.Request) -> web.StreamResponse:
        body = parse_run_now(await read_body(request, self.settings.code_max_size))
        run = {
            "language": str(body.language),
            "code": body.code,
            "input": body.input_json,
            "stream": body.stream,
            "by": asked_by(request, self.clients),  # named in the run's journal line
        }
        return await self._respond(request, run, body.stream)

    async def _respond(
        self, request: web.Request, run: dict[str, Any], stream: bool
    ) -> web.StreamResponse:
        messages = self.client.run(run)
        try:
            if stream:
                return await self._stream(request, messages)
            while (message := await _next(request, messages)) is not None:
                if message["t"] == protocol.RESULT:
                    return web.json_response({"data": message["data"], "type": message["type"]})
                if message["t"] == protocol.ERROR:
                    return text_error(500, f"{FAILED_TO_RUN}{message['message']}")
            return text_error(500, f"{FAILED_TO_RUN}the client went away")
        except RunFailed as exc:
            return text_error(exc.status, exc.message)
        except StopAsyncIteration:
            return text_error(500, f"{FAILED_TO_RUN}the runner stopped answering")
        finally:
            with contextlib.suppress(RuntimeError):  # still running only if never awaited
                await messages.aclose()

    async def _stream(
        self, request: web.Request, messages: AsyncGenerator[dict[str, Any], None]
    ) -> web.StreamResponse:
        # The first message says whether a runner took the run: a full queue is still an
        # HTTP status, not an event in a stream that already said 200.
        first = await _next(request, messages)
        if first is None:  # the client left before anything was sent
            return web.StreamResponse(status=200, headers=SSE_HEADERS)
        # No ids (a run cannot be re-attached) and no close event (every data line is a stream
        # event, which clients rely on); heartbeats keep a proxy from cutting a long quiet run.
        async with EventStream(
            request,
            close_event=False,
            numbered=False,
            follows_work=True,
            stopping=_stopping,
            revoked=_revoked,
        ) as sse:
            message: dict[str, Any] | None = first
            try:
                while message is not None:
                    event = _stream_event(message)
                    if event is not None and not await sse.send(event):
                        break  # the client left: aclose in _respond cancels the run
                    if message["t"] in protocol.FINAL:
                        break
                    message = await _next(request, messages)
            except RunFailed as exc:
                await sse.send({"event": "error", "data": exc.message, "type": "text"})
            except StopAsyncIteration:
                pass  # the runner went away
        return sse.response


def _stopping(reason: str) -> tuple[str | None, dict[str, Any]]:
    """A run's last event when a stop of cairn ends its stream: the run is cancelled (a run
    cannot be followed again), said as the stream's error event, which clients already handle."""
    said = f"{FAILED_TO_RUN}cairn is stopping: the run was cancelled ({reason.split(':')[0]})"
    return None, {"event": "error", "data": said, "type": "text"}


def _revoked(reason: str) -> tuple[str | None, dict[str, Any]]:
    """A run's last event when the token that started it is revoked, or its console session
    ends, while it runs: the run is cancelled, said as the stream's error event."""
    return None, {"event": "error", "data": f"{reason}: the run was cancelled", "type": "text"}


async def _next(
    request: web.Request, messages: AsyncGenerator[dict[str, Any], None]
) -> dict[str, Any] | None:
    """The run's next message, or None as soon as the client has gone: then the wait is
    cancelled, which cancels the run on its runner host (a client that leaves must not keep
    a sandbox busy until its time-out)."""
    waiting = asyncio.ensure_future(anext(messages))
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=DISCONNECT_POLL_S)
            if done:
                return waiting.result()
            transport = request.transport
            if transport is None or transport.is_closing():
                await _abandon(waiting)
                return None
    except asyncio.CancelledError:
        # aiohttp cancels the handler when the client disconnects.
        await _abandon(waiting)
        raise


async def _abandon(waiting: asyncio.Future[Any]) -> None:
    waiting.cancel()  # the generator's clean-up sends the cancel to the runner host
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await waiting


FUNCTIONS = web.AppKey("functions", FunctionsGateway)
FUNCTIONS_HOST = web.AppKey("functions-host", FunctionsHost)


def _stream_event(message: dict[str, Any]) -> dict[str, Any] | None:
    kind = message["t"]
    if kind == protocol.LOG:
        return {"event": "log", "data": message["data"], "type": "text"}
    if kind == protocol.RESULT:
        result = RunResult(message["data"], ResultType(message["type"]))
        return {"event": "result", "data": result.stream_data(), "type": str(result.type)}
    if kind == protocol.ERROR:
        return {"event": "error", "data": message["message"], "type": "text"}
    return None


async def build(runtime: Runtime) -> web.Application:
    require_allow_ips_or_tokens(
        "the functions service (FUNCTIONS_HOST)",
        runtime.listen.get("functions", ("127.0.0.1", 0))[0],
        runtime.env,
        "whoever reaches it stores, deletes and runs code",
        runtime.data_dir / FILE_NAME,
    )
    settings = FunctionsSettings.from_env(runtime.env)
    cluster = leased_registry(runtime, runtime.cluster) if runtime.cluster is not None else None
    host = await FunctionsHost.start(runtime, settings, cluster=cluster)
    client = RunClient(runtime.gateway_nc, settings)
    await client.start()
    clients = ClientFilter.from_env(runtime.env)
    service = FunctionsGateway(runtime, settings, client, clients)

    app = web.Application()
    app[FUNCTIONS] = service
    app[FUNCTIONS_HOST] = host
    # ALLOW_IPS, as on the VM service: whatever stores, deletes, runs or shows code.
    allowed = clients.gate
    app.router.add_post("/upload", allowed(service.upload))
    app.router.add_post("/run-now", allowed(service.run_now))
    # The rest of the path, every character: "." would stop at an encoded newline (%0A), and
    # that request would miss the route (aiohttp's own 404) instead of getting the path's answer.
    app.router.add_post(r"/run/{target:[\s\S]*}", allowed(service.run_stored))
    app.router.add_get("/functions", service.list)
    app.router.add_get(r"/functions/{target:[\s\S]+}", service.describe)
    app.router.add_delete(r"/functions/{target:[\s\S]+}", allowed(service.delete))
    app.router.add_get(r"/code/{target:[\s\S]+}", allowed(service.code))
    app.router.add_get("/runtimes", service.runtimes)
    add_health(
        app,
        "functions",
        runtime,
        warnings=quarantined(runtime, "functions"),
        details=lambda: {"languages": [language.value for language in Language], **host.facts()},
    )
    add_openapi(app, "functions", runtime.env)

    async def cleanup(_: web.Application) -> None:
        await client.stop()
        await host.stop()

    app.on_cleanup.append(cleanup)
    return app


SERVICE = ServiceDef(
    name="functions",
    port_env="FUNCTIONS_PORT",
    default_port=8200,
    build=build,
    summary="store versioned functions and run them in a sandbox",
)
