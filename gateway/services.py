"""The service catalogue: each service module ``gateway/apps/<name>.py`` exposes ``SERVICE``."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Awaitable, Callable, Mapping

import attrs
from aiohttp import web

from actors.config import ConfigError
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


# Order is start-up order. "status" is the gateway's own: health and what runs where.
KNOWN = ("status", "vm", "functions", "search", "images")


def module_name(name: str) -> str:
    return f"gateway.apps.{name}"


def load(name: str) -> ServiceDef:
    if name not in KNOWN:
        raise KeyError(f"unknown service {name!r}; known: {', '.join(KNOWN[1:])}")
    module = importlib.import_module(module_name(name))
    service: ServiceDef = module.SERVICE
    return service


def available() -> list[ServiceDef]:
    """Every service whose module exists (an existing module that fails to import is an
    error worth seeing, not a service to skip)."""
    return [load(name) for name in KNOWN if importlib.util.find_spec(module_name(name))]


def chosen(env: Mapping[str, str]) -> list[ServiceDef]:
    """What ``cairn up`` starts: every available service, or only those ``CAIRN_SERVICES``
    names (comma-separated, e.g. ``vm,functions``), in start-up order. "status" (health, the
    console) always runs. A service left out is never imported, so a host without search
    loads no embedding model and needs none installed."""
    raw = (env.get("CAIRN_SERVICES") or "").strip()
    if not raw:
        return available()
    names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in KNOWN[1:]]
    if unknown or not names:
        rule = f"a comma-separated list of {', '.join(KNOWN[1:])}"
        raise ConfigError("CAIRN_SERVICES", rule, raw)
    return [load(name) for name in KNOWN if name == "status" or name in names]


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
