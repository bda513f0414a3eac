"""The console's routes on the gateway's own app (``CAIRN_PORT``).

| route | what |
|---|---|
| ``GET /`` | the page (a Preact app in ES modules, ``static/``) |
| ``GET /console/static/…``, ``/console/vendor/…`` | its scripts and styles, all local |
| ``GET /console/vendor/codemirror/editor.js`` | the code editor, bundled once (``editor.py``) |
| ``GET /console/vendor/xterm/terminal.js`` | a VM's serial console's terminal, likewise |
| ``GET /console/tables/stages.js`` | the install's stage names, from Python (``tables.py``) |
| ``GET|POST|DELETE /console/svc/<service>/<path>`` | the service's own API (``proxy.py``) |
| ``GET /console/events`` | every event, live, as SSE (``feed.py``) |
| ``GET /console/api/search/<db>/documents`` | a database's files: indexed or dismissed |
| ``/console/login``, ``/console/logout``, ``/console/whoami`` | sign-in (``login.py``) |

The last is a projection of the events (``readmodels.py``), for what no service route offers.
The console holds no state: every answer is read from a service, the store or NATS.
"""

from __future__ import annotations

from aiohttp import web

from actors.platform import Runtime
from gateway.console import assets, editor, login, tables
from gateway.console.access import ConsoleAccess, check_exposure
from gateway.console.feed import EventFeed
from gateway.console.headers import on_prepare
from gateway.console.proxy import ServiceProxy
from gateway.console.readmodels import project_documents
from gateway.console.sessions import SESSIONS, Sessions
from gateway.http.tokens import FILE_NAME, TokenStore


class ReadModels:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

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
    sessions = Sessions.from_env(runtime.env)
    app[SESSIONS] = sessions  # gateway.services.build_app's identity check reads it
    proxy = ServiceProxy(runtime.listen, access, sessions)
    feed = EventFeed(runtime.gateway_nc, runtime.store, runtime.signer)
    models = ReadModels(runtime)
    assets.add_routes(app)
    editor.add_routes(app)
    tables.add_routes(app)
    login.add_routes(app, login.SignIn(TokenStore(runtime.data_dir / FILE_NAME), sessions))
    app.router.add_get("/console/events", feed.stream)
    app.router.add_get("/console/api/search/{db}/documents", models.documents)
    # The methods the services take; any other is 405 here, not a trip to the service.
    for method in ("GET", "POST", "DELETE"):
        app.router.add_route(method, "/console/svc/{service}/{tail:.*}", proxy.forward)
    app.on_startup.append(proxy.start)
    app.on_cleanup.append(proxy.stop)
    app.on_response_prepare.append(on_prepare)
    app.middlewares.append(access.middleware())
