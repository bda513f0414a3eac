"""Which ``Host`` headers a service answers: loopback names, its own bind address, and the names
the operator lists in ``CAIRN_ALLOWED_HOSTS``. Everything else gets 403 before any handler.

Why: DNS rebinding. A page at ``http://rebind.evil.example:8000/`` whose name the attacker
then points at 127.0.0.1 is, to the browser, the same origin as itself: its requests reach
cairn with ``Host: rebind.evil.example:8000``, a matching ``Origin`` and ``Sec-Fetch-Site:
same-origin``. Nothing in such a request is foreign except the ``Host``, so the ``Host`` is
what is checked, on every route and every method (reads leak as much as writes change).

The rule, on the host part of the header (the port is not compared: a rebound page already
uses the service's own port), lower-cased, a trailing dot dropped:

- a loopback name (``localhost``, ``127.x.x.x``, ``::1``) is always allowed;
- so is the address the service listens on; when it listens on a wildcard (``0.0.0.0``,
  ``::``), any IP address literal is allowed: a browser sends ``Host: 10.0.0.5`` only to a page
  it loaded from 10.0.0.5 itself, no DNS answer involved, so a literal cannot be rebound;
- and every entry of ``CAIRN_ALLOWED_HOSTS`` (comma-separated names or addresses, e.g. the
  name a reverse proxy passes on with ``proxy_set_header Host $host``); ``*`` allows any
  ``Host`` (not advised: it turns the check off);
- a request without ``Host`` (no browser sends one) is refused like a foreign one.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping

import attrs
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from actors.config import env_list, is_ip
from gateway.http.loopback import is_loopback_address

ENV = "CAIRN_ALLOWED_HOSTS"
REFUSED = "host not allowed"
_WILDCARDS = ("0.0.0.0", "::", "")


def host_name(header: str) -> str | None:
    """The host part of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower
    case without a trailing dot; None when it is not a plausible host."""
    value = header.strip().lower()
    if not value or len(value) > 300 or any(c in value for c in " /\\@?#\t"):
        return None
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :]
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        name = value[1:end]
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
        return name
    if value.count(":") == 1:
        value, port = value.split(":", 1)
        if port and not port.isdigit():
            return None
    elif ":" in value:
        return None  # an IPv6 literal must be in brackets
    value = value.rstrip(".")
    return value or None


@attrs.frozen
class HostPolicy:
    names: frozenset[str]
    any_ip_literal: bool = False
    any_host: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str], bind: str) -> HostPolicy:
        """The policy of a service listening on ``bind``, with ``CAIRN_ALLOWED_HOSTS``."""
        listed = [e.strip().lower().rstrip(".") for e in env_list(env, ENV)]
        any_host = "*" in listed
        names = {n.strip("[]") for n in listed if n and n != "*"}
        bind_name = bind.strip().strip("[]").lower()
        wildcard = bind_name in _WILDCARDS
        if not wildcard:
            names.add(bind_name)
        return cls(frozenset(names), any_ip_literal=wildcard, any_host=any_host)

    def allows(self, header: str | None) -> bool:
        if self.any_host:
            return True
        if header is None:
            return False
        name = host_name(header)
        if name is None:
            return False
        if is_loopback_address(name) or name in self.names:
            return True
        return self.any_ip_literal and is_ip(name)


def message(header: str | None) -> str:
    shown = "no Host header" if header is None else f"Host: {header[:200]}"
    return (
        f"{REFUSED}: this service answers only loopback names, its own address and the names "
        f"in {ENV} ({shown})"
    )


def forbidden(text: str, json_errors: bool) -> web.Response:
    """A 403 saying `text`, as `{"error": ...}` for a service whose errors are JSON: how both
    guards (the Host header's and the cross-site one) refuse."""
    if json_errors:
        return web.Response(
            status=403, text=json.dumps({"error": text}), content_type="application/json"
        )
    return web.Response(status=403, text=text)


def host_guard(policy: HostPolicy, *, json_errors: bool = False) -> Middleware:
    """The middleware, first of every service's app (``gateway.services.build_app``)."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Host")
        if policy.allows(header):
            return await handler(request)
        return forbidden(message(header), json_errors)

    return guard
