"""The console's routes on the gateway's own app (``CAIRN_PORT``).

| route | what |
|---|---|
| ``GET /`` | the page (a Preact app in ES modules, ``static/``) |
| ``GET /console/static/…``, ``/console/vendor/…`` | its scripts and styles, all local |
| ``* /console/svc/<service>/<path>`` | the service's own API (``proxy.py``) |
| ``GET /console/events`` | every event, live, as SSE (``feed.py``) |
| ``GET /console/api/functions`` | stored functions ``[{path, language, versions, latest}]`` |
| ``GET /console/api/functions/<path>/code`` | one version's code (``?version=N``; the latest) |
| ``GET /console/api/vm/<id>`` | one VM's details and last task |
| ``GET /console/api/search/<db>/documents`` | a database's files: indexed or dismissed |

The last four are projections of the events (``readmodels.py``) for what no service route
offers yet. The console holds no state: every answer is read from a service, the store or NATS.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from actors.functions import protocol
from actors.functions.requests import normalize_path, parse_version
from events.bus import CommandFailed, CommandTimeout, NoResponders, command
from gateway.console import assets
from gateway.console.access import ConsoleAccess, check_exposure
from gateway.console.feed import EventFeed
from gateway.console.headers import on_prepare
from gateway.console.proxy import ServiceProxy
from gateway.console.readmodels import project_documents, project_functions, project_vm
from gateway.runtime import Runtime

REGISTRY_STREAM = "functions:registry"
COMMAND_TIMEOUT = 10.0


class ReadModels:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def functions(self, _: web.Request) -> web.Response:
        records = await self.runtime.store.read_stream(REGISTRY_STREAM)
        return web.json_response(project_functions(records))

    async def code(self, request: web.Request) -> web.Response:
        lookup: dict[str, Any] = {
            "path": normalize_path(request.match_info["path"]),
            "version": parse_version(request.query.get("version")),
        }
        try:
            found = await command(
                self.runtime.nc, protocol.RESOLVE_SUBJECT, lookup, COMMAND_TIMEOUT
            )
        except (NoResponders, CommandTimeout):
            return web.Response(status=503, text="the function registry is not answering")
        except CommandFailed as exc:
            return web.Response(status=exc.status, text=exc.message)
        return web.Response(
            text=found["code"],
            headers={
                "X-Function-Version": str(found["version"]),
                "X-Function-Language": found["language"],
            },
        )

    async def vm(self, request: web.Request) -> web.Response:
        raw = request.match_info["id"]
        if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
            return web.Response(status=400, text=f"invalid VM id {raw[:20]!r}")
        vmid = int(raw)
        found = project_vm(vmid, await self.runtime.store.read_stream(f"vm:{vmid}"))
        if found is None:
            return web.Response(status=404, text=f"VM {vmid} not found")
        return web.json_response(found)

    async def documents(self, request: web.Request) -> web.Response:
        db = request.match_info["db"]
        if len(db) > 200:
            return web.Response(status=400, text="database name too long")
        records = await self.runtime.store.read_stream(f"search:{db}")
        return web.json_response(project_documents(records))


def mount(app: web.Application, runtime: Runtime) -> None:
    host = runtime.listen.get("status", ("127.0.0.1", 0))[0]
    check_exposure(host, runtime.env)
    access = ConsoleAccess(runtime.env)
    proxy = ServiceProxy(runtime.listen, access)
    feed = EventFeed(runtime.nc, runtime.store)
    models = ReadModels(runtime)
    assets.add_routes(app)
    app.router.add_get("/console/events", feed.stream)
    app.router.add_get("/console/api/functions", models.functions)
    app.router.add_get("/console/api/functions/{path:.+}/code", models.code)
    app.router.add_get("/console/api/vm/{id}", models.vm)
    app.router.add_get("/console/api/search/{db}/documents", models.documents)
    app.router.add_route("*", "/console/svc/{service}/{tail:.*}", proxy.forward)
    app.on_startup.append(proxy.start)
    app.on_cleanup.append(proxy.stop)
    app.on_response_prepare.append(on_prepare)
