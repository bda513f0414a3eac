"""A browser that opens a service's API reference page without a token, once this cairn has
tokens, gets a page that says how to get in, not the route's bare 401 text: a link to the
console's sign-in, and one to the same reference served through the console
(``/console/svc/<service>/…/docs/``; the console's own at its ``/docs/``), where the console
session signs every call, "Try it out" included. A script (no ``text/html`` in ``Accept``)
keeps the plain 401."""

from __future__ import annotations

import html
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.console.login import LOGIN

# The console's address as (host, port), or None where no console runs in this process.
ConsoleAddress = Callable[[], tuple[str, int] | None]

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
PAGE = """<!DOCTYPE html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <title>Sign in · cairn API reference</title>
    <style>body {{ font: 16px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 3rem auto;
      padding: 0 1rem; }} code {{ background: #eee; padding: 0 .2em; }}</style>
  </head>
  <body>
    <h1>This API reference needs a token</h1>
    <p>This cairn has tokens, and this page asks for one with role viewer or above.</p>
    {how}
    <p>From a script or <code>curl</code>, send <code>Authorization: Bearer &lt;token&gt;</code>
      (an admin makes one with <code>cairn token create</code>).</p>
  </body>
</html>
"""


def is_reference_page(path: str) -> bool:
    return path.endswith(("/docs", "/docs/"))


def wants_html(request: web.BaseRequest) -> bool:
    return "text/html" in request.headers.get("Accept", "")


def console_link(request: web.BaseRequest, console: tuple[str, int]) -> str:
    """The console's base URL as this browser reaches it: a wildcard bind address is the
    host the browser asked for."""
    host, port = console
    if host in ("0.0.0.0", "::", ""):
        host = request.url.host or "127.0.0.1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def page(request: web.BaseRequest, service: str, console: tuple[str, int] | None) -> str:
    if console is None:
        how = (
            "<p>Sign in on cairn's web console, where every service's reference is served "
            "with your session; the console does not run in this process.</p>"
        )
        return PAGE.format(how=how)
    base = console_link(request, console)
    login = html.escape(base + LOGIN)
    path = request.path if request.path.endswith("/") else request.path + "/"
    # The console's own reference takes the session as it is; another service's goes through
    # the console's way to the services.
    there = html.escape(base + (path if service == "status" else f"/console/svc/{service}{path}"))
    how = (
        f'<p><a href="{login}">Sign in on the console</a>, then open this reference there: '
        f'<a href="{there}">{there}</a>. Its calls, "Try it out" too, go with your '
        "session.</p>"
    )
    return PAGE.format(how=how)


def reference_sign_in(service: str, console: ConsoleAddress) -> Middleware:
    """Outside the identity check: turns its 401 on a reference page asked for by a browser
    into the page above (still 401, with the check's ``WWW-Authenticate``)."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if (
            response.status != 401
            or request.method != "GET"
            or not is_reference_page(request.path)
            or not wants_html(request)
        ):
            return response
        headers = {"Content-Security-Policy": CSP, "Cache-Control": "no-store"}
        if "WWW-Authenticate" in response.headers:
            headers["WWW-Authenticate"] = response.headers["WWW-Authenticate"]
        return web.Response(
            status=401,
            text=page(request, service, console()),
            content_type="text/html",
            headers=headers,
        )

    return guard
