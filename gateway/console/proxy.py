"""The console's way to the services: ``/console/svc/<service>/<path>`` is ``<path>`` of that
service's own HTTP API, forwarded as it is and streamed back as it comes.

The browser so talks to one origin (the console's), whatever address each service listens on,
and the page's Content-Security-Policy can say ``connect-src 'self'``. Everything the page
shows comes from the services' answers, errors included, with their status and message.

Forwarded: the method, the query, the body (streamed), and the headers the APIs read (content
type, ``Accept``, ``Last-Event-ID``, conditional and range headers). Not forwarded: cookies,
``Origin``, ``Sec-Fetch-*`` and the like; the console checked them itself (the Host and
cross-site guards in front of it, ``ALLOW_IPS`` in ``access.py``, all before the route) and
towards the service it is a plain client. The browser's address goes along in
``X-Forwarded-For``, and, when tokens exist, the caller's identity as ``Authorization:
Bearer`` (its own, or its console session's).

An answer still streaming when the caller's token is revoked or its console session signed
out is cut (``gateway/http/revocation.py``); an event stream's last event then says why (``event:
revoked``). The service ends its own stream at a revocation too, but a signed-out session's
token may still be valid: only the console knows the session ended.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from gateway.console.access import ConsoleAccess
from gateway.console.sessions import Sessions
from gateway.http import revocation
from gateway.http.crosssite import SAFE_METHODS
from gateway.http.identity import bearer
from gateway.http.sse import format_event, revoked_event

log = logging.getLogger(__name__)

SERVICES = ("vm", "functions", "search", "images")
REQUEST_HEADERS = (
    "Accept",
    "Content-Type",
    "Last-Event-ID",
    "Range",
    "If-Range",
    "If-None-Match",
    "If-Modified-Since",
)
RESPONSE_HEADERS = (
    "Content-Type",
    "Content-Length",
    "Content-Range",
    "Content-Disposition",
    "Content-Security-Policy",
    "Accept-Ranges",
    "Cache-Control",
    "ETag",
    "Last-Modified",
    "Vary",
    "Retry-After",
    "X-Content-Type-Options",
    "X-Accel-Buffering",
    "X-VM-Id",
    "X-Task-Id",
    "X-Function-Version",
    "X-Function-Language",
)
CHUNK = 64 * 1024


def upstream_host(host: str) -> str:
    """Where to reach a service that listens on ``host``: a wildcard address through loopback."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


class ServiceProxy:
    def __init__(
        self,
        listen: Mapping[str, tuple[str, int]],
        access: ConsoleAccess,
        sessions: Sessions | None = None,
    ) -> None:
        self.listen = listen
        self.access = access
        self.sessions = sessions
        self.session: aiohttp.ClientSession | None = None

    async def start(self, _: web.Application) -> None:
        self.session = aiohttp.ClientSession(
            # Streams (an install, a run, a task) stay quiet for as long as their work does.
            timeout=aiohttp.ClientTimeout(total=None, connect=10),
            connector=aiohttp.TCPConnector(limit=256),
            auto_decompress=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent"),
        )

    async def stop(self, _: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    def base_url(self, service: str) -> str | None:
        where = self.listen.get(service)
        if where is None:
            return None
        host, port = where
        return f"http://{upstream_host(host)}:{port}"

    async def forward(self, request: web.Request) -> web.StreamResponse:
        service = request.match_info["service"]
        if service not in SERVICES:
            return web.Response(status=404, text=f"unknown service {service[:40]!r}")
        base = self.base_url(service)
        if base is None:
            return web.Response(
                status=503, text=f"the {service} service does not run in this cairn process"
            )
        assert self.session is not None
        headers = CIMultiDict(
            (name, value) for name in REQUEST_HEADERS for value in request.headers.getall(name, ())
        )
        # The browser's address as the console's own ALLOW_IPS check saw it (behind a trusted
        # proxy, the address that proxy forwarded), for the service's log and its own check.
        headers["X-Forwarded-For"] = self.access.filter.client(request)
        # Who is asking, for the service's own role check: the caller's bearer token, or the
        # token of the browser's console session.
        token = bearer(request) or (self.sessions.token(request) if self.sessions else None)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        body = None
        if request.method not in SAFE_METHODS and request.body_exists:
            body = request.content.iter_chunked(CHUNK)
        # The path and query as the browser encoded them: the service decodes them once, as if
        # the browser had called it directly (a decoded `%2F` would become a separator).
        raw_tail = request.rel_url.raw_path.split("/", 4)[4]
        query = request.rel_url.raw_query_string
        url = URL(f"{base}/{raw_tail}" + (f"?{query}" if query else ""), encoded=True)
        try:
            upstream = await self.session.request(
                request.method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
            )
        except aiohttp.ClientError as exc:
            log.warning("console: %s service at %s: %s", service, base, exc)
            return web.Response(
                status=502, text=f"the {service} service at {base} is not reachable: {exc}"
            )
        async with upstream:
            return await self._relay(request, upstream)

    @staticmethod
    async def _relay(request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        headers = CIMultiDict(
            (name, value)
            for name in RESPONSE_HEADERS
            for value in upstream.headers.getall(name, ())
        )
        response = web.StreamResponse(
            status=upstream.status, reason=upstream.reason, headers=headers
        )
        try:
            await response.prepare(request)
            lapsed = await revocation.until_lapsed(request, _copy(upstream, response))
            if lapsed and upstream.headers.get("Content-Type", "").startswith("text/event-stream"):
                event, data = revoked_event(lapsed)
                await response.write(format_event(data, event=event))
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            # The browser left: leaving the `async with` closes the upstream connection, which
            # is how the service learns it (a function run is cancelled, a stream ends).
            pass
        except aiohttp.ClientError as exc:
            log.warning("console: the upstream stream of %s broke: %s", request.path, exc)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await response.write_eof()
        return response


async def _copy(upstream: aiohttp.ClientResponse, response: web.StreamResponse) -> None:
    async for chunk in upstream.content.iter_any():
        await response.write(chunk)
