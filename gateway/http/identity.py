"""Who is calling, and may they: the middleware every service runs once tokens exist.

With no token in ``$CAIRN_DATA/tokens.json`` nothing is asked, as before tokens existed. With
one or more, every route but the public ones (``gateway/http/roles.py``) needs a token:

- ``Authorization: Bearer <token>``, from any client (curl, scripts, MCP clients on ``/mcp``);
- or, on the console's port, the session cookie its sign-in page set (``sessions.py``).

No token: ``401 sign-in required: this route needs a token with role operator (send
Authorization: Bearer <token>; cairn token create)``. An unknown or revoked token: ``401``.
A token whose role is below the route's: ``403 token 'ana' has role viewer; this route needs
operator``. The request goes on with ``request[IDENTITY]``, and with ``request[GRANT]``: what
let it in, which whatever the request keeps open (an event stream, a serial console) asks
again while it runs (``gateway/http/revocation.py``), so a token revoked or a console session
signed out ends those too. Tokens are never logged: only the token's name travels further
(the access log, the audit ``by``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import attrs
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from actors.audit import BY_MAX
from gateway.http.allow_ips import ClientFilter
from gateway.http.roles import RouteRoles
from gateway.http.tokens import Identity, Role, TokenError, TokenStore

IDENTITY: web.RequestKey[Identity] = web.RequestKey("identity", Identity)
REALM = 'Bearer realm="cairn"'
SessionLookup = Callable[[web.BaseRequest], str | None]


@attrs.frozen
class Grant:
    """The token that let a request in, and the console session it came by (if any)."""

    who: Identity
    token: str = attrs.field(repr=False)
    tokens: TokenStore
    # The token of the request's console session as it is now (None: signed out or expired).
    session: Callable[[], str | None] | None = None

    def lapsed(self) -> str | None:
        """Why this request would no longer be let in, or None while it still would."""
        try:
            self.tokens.enabled()  # re-reads the tokens file when it changed
        except TokenError as exc:
            return f"identities unavailable: {exc}"
        if self.tokens.identify_as_read(self.token) is None:
            return f"token {self.who.name!r} was revoked"
        if self.session is not None and self.session() != self.token:
            return f"the console session of {self.who.name!r} ended (signed out, or expired)"
        return None


GRANT: web.RequestKey[Grant] = web.RequestKey("grant", Grant)


def bearer(request: web.BaseRequest) -> str | None:
    value = request.headers.get("Authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def identity_of(request: web.BaseRequest) -> Identity | None:
    return request.get(IDENTITY)


def asked_by(request: web.Request, clients: ClientFilter) -> str:
    """Who asks, for the audit trail's ``by``: the token's name, or ``ip:<client address>``
    (the address ALLOW_IPS checks) when this cairn has no tokens. Always a short printable
    text, as the actors demand (``actors/audit.py``): a forwarded hop that is not an address
    is quoted and cut short."""
    identity = identity_of(request)
    if identity is not None:
        return identity.name
    return f"ip:{clients.shown_client(request)}"[:BY_MAX]


def needs(role: Role) -> str:
    return role.label if role is Role.ADMIN else f"{role.label} (or above)"


def refusal_401(role: Role, why: str) -> str:
    return (
        f"{why}: this route needs a token with role {needs(role)} "
        "(send Authorization: Bearer <token>; an admin makes one with cairn token create)"
    )


def refusal_403(who: Identity, role: Role) -> str:
    return f"token {who.name!r} has role {who.role.label}; this route needs {needs(role)}"


def auth_guard(
    service: str,
    tokens: TokenStore,
    routes: RouteRoles,
    *,
    json_errors: bool = False,
    session_token: SessionLookup | None = None,
    sign_in: str | None = None,
) -> Middleware:
    """``session_token``: the token of the request's console session, if any; ``sign_in``:
    where a browser asking for a page (``GET /``) without one is sent instead of a 401."""

    def answer(status: int, text: str) -> web.Response:
        headers = {"WWW-Authenticate": REALM} if status == 401 else None
        if json_errors:
            return web.Response(
                status=status,
                text=json.dumps({"error": text}),
                content_type="application/json",
                headers=headers,
            )
        return web.Response(status=status, text=text, headers=headers)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            enabled = tokens.enabled()
        except TokenError as exc:
            return answer(503, f"identities unavailable: {exc}")
        role = routes.needed(service, request.method, request.path) if enabled else None
        if role is None:
            return await handler(request)
        token = bearer(request)
        by_session = session_token if token is None else None
        if by_session is not None:
            token = by_session(request)
        if token is None:
            if sign_in is not None and request.method == "GET" and request.path == "/":
                raise web.HTTPSeeOther(sign_in)
            return answer(401, refusal_401(role, "sign-in required"))
        who = tokens.identify_as_read(token)
        if who is None:
            return answer(401, refusal_401(role, "unknown or revoked token"))
        if who.role < role:
            return answer(403, refusal_403(who, role))
        request[IDENTITY] = who
        session = functools.partial(by_session, request) if by_session is not None else None
        request[GRANT] = Grant(who, token, tokens, session)
        return await handler(request)

    return guard
