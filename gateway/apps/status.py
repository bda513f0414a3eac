"""The gateway's own service: health, what runs where, and the web console (gateway/console).

``GET /health`` is the one health shape (gateway/http/health.py) for the process itself: NATS and
the event store. ``GET /status`` says what runs where and, per service, ``up`` or ``down`` and
why, with the state of each dependency and the streams quarantined at start-up; it answers
503 when anything is down.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from actors.platform import Runtime
from gateway.console import serial
from gateway.console.app import mount as mount_console
from gateway.http.health import add_health, runtime_problems
from gateway.openapi import add_openapi
from gateway.services import ServiceDef


def status_of(runtime: Runtime) -> dict[str, Any]:
    services: dict[str, Any] = {}
    for name, (host, port) in runtime.listen.items():
        if name == "status":
            continue
        entry: dict[str, Any] = {"url": f"http://{host}:{port}"}
        current = runtime.health.get(name)
        if current is None:
            entry.update(status="down", problems=["not started"])
        else:
            body = current()
            body.pop("service", None)
            entry.update(body, status="down" if body["status"] == "down" else "up")
        services[name] = entry
    bus: dict[str, Any] = {
        "url": runtime.shown_nats_url,
        "connected": all(nc.is_connected for nc in runtime.connections.values()),
        "roles": {role: nc.is_connected for role, nc in runtime.connections.items()},
        "credentials": "nkeys" if runtime.bus.keyring is not None else "none",
        "tls": runtime.bus.uses_tls,
        "signed_events": runtime.signer is not None,
    }
    embedded = runtime.embedded_nats
    if embedded is not None:
        bus.update(embedded=True, pid=embedded.pid, restarts=embedded.restarts)
    problems = runtime_problems(runtime)
    down = bool(problems) or any(s["status"] == "down" for s in services.values())
    return {
        "status": "down" if down else "up",
        "problems": problems,
        "nats": runtime.shown_nats_url,
        "services": services,
        "bus": bus,
        "store": {
            "refusing_writes": runtime.actors.store_refusal,
            "damaged": runtime.store_damage,  # the start-up check (events/integrity.py)
        },
        "quarantined": runtime.actors.quarantined(),
    }


async def build(runtime: Runtime) -> web.Application:
    app = web.Application()
    add_health(app, "status", runtime)

    async def status(_: web.Request) -> web.Response:
        body = status_of(runtime)
        return web.json_response(body, status=503 if body["status"] == "down" else 200)

    app.router.add_get("/status", status)
    mount_console(app, runtime)
    serial.add_routes(app, runtime.env)  # here, not in console/app.py, which H edits now
    add_openapi(app, "status", runtime.env)
    return app


SERVICE = ServiceDef(
    name="status",
    port_env="CAIRN_PORT",
    default_port=8000,
    build=build,
    summary="health, the addresses of the running services, and the web console",
)
