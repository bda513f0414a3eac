"""The gateway's own service: liveness and what runs where."""

from __future__ import annotations

from aiohttp import web

from gateway.runtime import Runtime
from gateway.services import ServiceDef


async def build(runtime: Runtime) -> web.Application:
    app = web.Application()

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def status(_: web.Request) -> web.Response:
        services = {name: f"http://{host}:{port}" for name, (host, port) in runtime.listen.items()}
        return web.json_response(
            {"nats": runtime.nats_url, "services": services, **runtime.reports}
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
