"""Who may use the console: ``ALLOW_IPS``, as the VM API applies it, on every console route.

The console forwards to services that listen on loopback, where they see the console's own
address, not the browser's. So the console checks the browser's address itself, with the VM
API's rule and message (``TRUSTED_PROXIES`` names the proxies whose ``X-Forwarded-For`` is
believed), on every request of its own: the page, its scripts, the event feed, the read models
and every call it forwards, reads included. Through the console a browser reads search results
and function code that the search service keeps to loopback and the functions service to
``ALLOW_IPS``; a client outside ``ALLOW_IPS`` gets none of it. ``/health`` and ``/status`` of
the same port are not the console's and stay open.

Beyond loopback the console lets whoever reaches it install and destroy VMs, so it does not
start there unless ``ALLOW_IPS`` says who may (the VM service's own rule).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.http.allow_ips import ClientFilter
from gateway.http.exposure import require_allow_ips


def client_filter(env: Mapping[str, str]) -> ClientFilter:
    return ClientFilter.from_env(env)


def check_exposure(host: str, env: Mapping[str, str]) -> None:
    could = "through it a browser installs, stops and destroys VMs"
    require_allow_ips("the console (CAIRN_PORT)", host, env, could)


def is_console_path(path: str) -> bool:
    """The console's own routes: the page and everything under ``/console/``."""
    return path == "/" or path.startswith("/console/")


class ConsoleAccess:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.filter = client_filter(env)

    def refusal(self, request: web.Request) -> web.Response | None:
        return self.filter.refusal(request)

    def middleware(self) -> Middleware:
        @web.middleware
        async def allow_ips(request: web.Request, handler: Handler) -> web.StreamResponse:
            if is_console_path(request.path) and (refused := self.refusal(request)):
                return refused
            return await handler(request)

        return allow_ips
