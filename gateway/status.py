"""The gateway's own service: health and what runs where.

``GET /health`` is 200 ``ok`` when the process can do its work, else 503 with one line per
problem (NATS unreachable, the event store refusing writes), so a load balancer or an operator
sees the cause. ``GET /status`` says what runs where, and the state of each dependency,
including the streams quarantined at start-up.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.runtime import Runtime
from gateway.services import ServiceDef


def problems(runtime: Runtime) -> list[str]:
    found = []
    if not runtime.nc.is_connected:
        found.append(f"nats: not connected to {runtime.nats_url}; reconnecting")
    if runtime.actors.store_refusal is not None:
        found.append(f"event store: {runtime.actors.store_refusal}")
    return found


async def build(runtime: Runtime) -> web.Application:
    app = web.Application()

    async def health(_: web.Request) -> web.Response:
        found = problems(runtime)
        if found:
            return web.Response(status=503, text="\n".join(found))
        return web.Response(text="ok")

    async def status(_: web.Request) -> web.Response:
        services = {name: f"http://{host}:{port}" for name, (host, port) in runtime.listen.items()}
        embedded = runtime.embedded_nats
        nats: dict[str, Any] = {"url": runtime.nats_url, "connected": runtime.nc.is_connected}
        if embedded is not None:
            nats.update(embedded=True, pid=embedded.pid, restarts=embedded.restarts)
        return web.json_response(
            {
                "nats": runtime.nats_url,
                "services": services,
                **runtime.reports,
                "health": problems(runtime) or ["ok"],
                "bus": nats,
                "store": {"refusing_writes": runtime.actors.store_refusal},
                "quarantined": runtime.actors.quarantined(),
            }
        )

    app.router.add_get("/health", health)
    app.router.add_get("/status", status)
    return app


SERVICE = ServiceDef(
    name="status",
    port_env="CAIRN_PORT",
    default_port=8000,
    build=build,
    summary="health and the addresses of the running services",
)
