"""What listens on the port of a service that could not start.

One service failing at start (its model cache on a full disk, its stored events in a damaged
page) must not take the others down, and its clients should not meet a refused connection
they cannot tell from a stopped cairn: its port answers every request ``503`` with the reason,
and ``GET /health`` with the usual report (``status: down``, the reason as its problem).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gateway.http.hosts import HostPolicy, host_guard


def down_app(
    name: str,
    reason: str,
    report: Callable[[], dict[str, Any]],
    hosts: HostPolicy,
    *,
    json_errors: bool = False,
) -> web.Application:
    """An app answering ``503 <name> is unavailable: <reason>`` (``{"error": …}`` for a
    service whose errors are JSON) and ``/health`` with ``report()``."""
    text = f"{name} is unavailable: {reason}"

    async def health(_: web.Request) -> web.Response:
        return web.json_response(report(), status=503)

    async def unavailable(_: web.Request) -> web.Response:
        if json_errors:
            return web.Response(
                status=503, text=json.dumps({"error": text}), content_type="application/json"
            )
        return web.Response(status=503, text=text)

    app = web.Application(middlewares=[host_guard(hosts, json_errors=json_errors)])
    app.router.add_get("/health", health)
    app.router.add_route("*", "/{tail:.*}", unavailable)
    return app
