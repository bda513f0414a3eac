"""What a served app is: each service module ``gateway/apps/<name>.py`` exposes ``SERVICE``, a
:class:`ServiceDef`, and :func:`build_app` puts the middlewares every service shares in front
of it. The list of services is the composition root's (gateway/server.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
from aiohttp import web

from actors.platform import Runtime
from gateway.console.login import LOGIN
from gateway.console.sessions import SESSIONS
from gateway.http.crosssite import cross_site_guard
from gateway.http.hosts import HostPolicy, host_guard
from gateway.http.identity import auth_guard
from gateway.http.roles import RouteRoles
from gateway.http.tokens import FILE_NAME, TokenStore
from gateway.openapi.sign_in import reference_sign_in

AppFactory = Callable[[Runtime], Awaitable[web.Application]]


@attrs.frozen
class ServiceDef:
    name: str
    port_env: str
    default_port: int | None  # None: a free port
    build: AppFactory
    default_host: str = "127.0.0.1"
    summary: str = ""
    # True for a service whose contract says it listens on loopback only (search).
    loopback_only: bool = False
    # True for a service whose error bodies are JSON ``{"error": ...}`` (search).
    json_errors: bool = False
    # True for a service its clients find through a file it writes (search's `endpoint`), not
    # through a port setting: when its default port is taken it listens on a free one.
    free_port_fallback: bool = False

    @property
    def host_env(self) -> str:
        """``VM_HOST``, ``FUNCTIONS_HOST``…: the address this service listens on."""
        return f"{self.name.upper()}_HOST"


async def build_app(service: ServiceDef, runtime: Runtime) -> web.Application:
    """The service's app as cairn serves it: what its module builds, behind the middlewares
    every service shares, in this order: the Host allow-list (gateway/http/hosts.py), the
    cross-site refusal (gateway/http/crosssite.py), then who is asking and may they, once tokens
    exist (gateway/http/identity.py); all answer before any handler runs."""
    routes = RouteRoles.from_env(runtime.env)
    app = await service.build(runtime)
    bind = runtime.listen.get(service.name, (service.default_host, 0))[0]
    hosts = HostPolicy.from_env(runtime.env, bind)
    sessions = app.get(SESSIONS)
    auth = auth_guard(
        service.name,
        TokenStore(runtime.data_dir / FILE_NAME),
        routes,
        json_errors=service.json_errors,
        session_token=sessions.token if sessions is not None else None,
        sign_in=LOGIN if sessions is not None else None,
    )
    app.middlewares.insert(0, auth)

    def console() -> tuple[str, int] | None:
        return runtime.listen.get("status")

    app.middlewares.insert(0, reference_sign_in(service.name, console))
    app.middlewares.insert(0, cross_site_guard(json_errors=service.json_errors, hosts=hosts))
    app.middlewares.insert(0, host_guard(hosts, json_errors=service.json_errors))
    return app
