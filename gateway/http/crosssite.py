"""Refuse state-changing requests that a page of another site sends through a user's browser.

Every cairn service answers on a local address without credentials, so the one thing between a
web page somewhere else and a "destroy this VM" is that browsers say where a request comes
from. A browser marks every request it sends with ``Sec-Fetch-Site`` (current browsers) and a
state-changing one with ``Origin``; a page cannot forge either. Clients that are not browsers
(curl, scripts, MCP clients) send neither and are let through: they are not driven by a page.

The rule, for every method but GET, HEAD and OPTIONS:

1. ``Sec-Fetch-Site`` present: allowed only when it is ``same-origin`` (a page of this very
   service, such as the console on its own port) or ``none`` (the user typed or bookmarked it).
   ``same-site`` is refused too: another port on the same host is another application.
   ``same-origin`` is proof only when the ``Host`` is one the service answers
   (``gateway/http/hosts.py``): a page of a rebound name (DNS rebinding) is "same-origin" with
   itself, not with cairn.
2. No ``Sec-Fetch-Site`` but an ``Origin`` (older browsers): allowed only when the origin's
   host and port are those the request was sent to (the ``Host`` header).
3. Neither: allowed (not a browser, or a browser that sends no ``Origin`` on a same-origin
   request).

The same check as Go's ``net/http.CrossOriginProtection``. It is one middleware, put in front
of every service's app by ``gateway.services.build_app``.
"""

from __future__ import annotations

import re

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.http.hosts import HostPolicy, forbidden

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ALLOWED_FETCH_SITES = frozenset({"same-origin", "none"})
REFUSED = "cross-site request refused"
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def host_port(netloc: str, scheme: str) -> str:
    """``host:port`` in lower case with the scheme's default port made explicit, so
    ``https://a.example`` and ``Host: a.example:443`` compare equal."""
    netloc = netloc.strip().lower()
    if netloc.endswith("]") or ":" not in netloc.rsplit("]", 1)[-1]:
        return f"{netloc}:{_DEFAULT_PORTS.get(scheme, '')}"
    return netloc


# What a browser sends as Origin: a scheme and a host with its port, nothing else (no path, no
# user, no spaces); "null", a file: page or anything else never names a host of ours.
_ORIGIN = re.compile(r"(https?)://([^/?#@\s]+)", re.IGNORECASE)


def same_origin(origin: str, host: str) -> bool:
    """Whether the ``Origin`` header ``origin`` names ``host`` (the request's ``Host``): the
    cross-site guard's check for older browsers and the serial console's for websockets."""
    match = _ORIGIN.fullmatch(origin.strip())
    if match is None:
        return False
    scheme = match.group(1).lower()
    return host_port(match.group(2), scheme) == host_port(host, scheme)


def refusal(request: web.BaseRequest, hosts: HostPolicy | None = None) -> str | None:
    """Why this request is refused, or None when it may go on; ``hosts``: the Host names
    the service answers (without it, any Host counts as the service's own)."""
    if request.method in SAFE_METHODS:
        return None
    fetch_site = request.headers.get("Sec-Fetch-Site")
    origin = request.headers.get("Origin")
    shown = f"Origin: {origin[:200]!s}" if origin is not None else "no Origin"
    if fetch_site is not None:
        if fetch_site.strip().lower() in ALLOWED_FETCH_SITES:
            host = request.headers.get("Host")
            if hosts is None or hosts.allows(host):
                return None
            return f"{shown}, Sec-Fetch-Site: {fetch_site[:40]}, Host: {(host or '')[:200]}"
        return f"{shown}, Sec-Fetch-Site: {fetch_site[:40]}"
    if origin is None:
        return None
    if same_origin(origin, request.host):
        return None
    return f"{shown}, Host: {request.host[:200]}"


def message(why: str) -> str:
    return (
        f"{REFUSED}: this service does not take state-changing requests from pages of "
        f"another site ({why})"
    )


def cross_site_guard(*, json_errors: bool = False, hosts: HostPolicy | None = None) -> Middleware:
    """The middleware; ``json_errors`` for a service whose errors are ``{"error": ...}``."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        why = refusal(request, hosts)
        if why is None:
            return await handler(request)
        return forbidden(message(why), json_errors)

    return guard
