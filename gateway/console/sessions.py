"""The console's sign-in: a token typed once, then a session cookie.

``POST /console/login`` with a valid token sets a cookie holding a random 256-bit id,
``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page sends it),
``Path=/``, and ``Max-Age`` of ``CAIRN_SESSION_HOURS`` (12). Over TLS (directly, or through a
proxy named in ``TRUSTED_PROXIES`` that says ``X-Forwarded-Proto: https``) it is
``__Host-cairn_session``, ``Secure``: the browser then sends it only over HTTPS to this very
host and port, and no other port or subdomain can set one in its place. Over plain HTTP no
browser takes a ``__Host-`` cookie, so it is ``cairn_session``; cookies do not tell ports
apart, so any other port of the same host receives that one (hence loopback or TLS). Each
kind of request reads only its own name: a plain-HTTP cookie never signs in an HTTPS one. An
``X-Forwarded-Proto`` from anyone but a trusted proxy is ignored.
The session lives in the console's memory only (a restart signs everyone out) and keeps the
token, which the console sends on as ``Authorization: Bearer`` with every call it forwards, so
each service checks the same identity. Every request re-checks the token: a revoked token
ends its sessions at once. ``POST /console/logout`` ends the session.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping

import attrs
from aiohttp import web

from actors.config import env_float
from gateway.http.allow_ips import ClientFilter

COOKIE = "cairn_session"
SECURE_COOKIE = "__Host-cairn_session"
SESSIONS: web.AppKey[Sessions] = web.AppKey("console-sessions")


@attrs.frozen
class Session:
    token: str
    expires: float


class Sessions:
    def __init__(self, lifetime: float, clients: ClientFilter | None = None) -> None:
        self.lifetime = lifetime
        self.clients = clients
        self._by_id: dict[str, Session] = {}

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Sessions:
        hours = env_float(env, "CAIRN_SESSION_HOURS", 12.0, min=0.01)
        return cls(hours * 3600, ClientFilter.from_env(env))

    def over_tls(self, request: web.BaseRequest) -> bool:
        """The browser reached the console over HTTPS: its own TLS, or a trusted proxy's."""
        if request.secure:
            return True
        if self.clients is None or not self.clients.from_proxy(request.remote or ""):
            return False
        return request.headers.get("X-Forwarded-Proto", "").strip().lower() == "https"

    def cookie_name(self, request: web.BaseRequest) -> str:
        return SECURE_COOKIE if self.over_tls(request) else COOKIE

    def _sweep(self, now: float) -> None:
        for sid in [s for s, session in self._by_id.items() if session.expires <= now]:
            del self._by_id[sid]

    def start(self, token: str) -> str:
        now = time.time()
        self._sweep(now)
        sid = secrets.token_urlsafe(32)
        self._by_id[sid] = Session(token, now + self.lifetime)
        return sid

    def token(self, request: web.BaseRequest) -> str | None:
        sid = request.cookies.get(self.cookie_name(request))
        if not sid:
            return None
        session = self._by_id.get(sid)
        if session is None:
            return None
        if session.expires <= time.time():
            del self._by_id[sid]
            return None
        return session.token

    def end(self, request: web.BaseRequest) -> None:
        sid = request.cookies.get(self.cookie_name(request))
        if sid:
            self._by_id.pop(sid, None)

    def set_cookie(self, request: web.BaseRequest, response: web.StreamResponse, sid: str) -> None:
        secure = self.over_tls(request)
        response.set_cookie(
            SECURE_COOKIE if secure else COOKIE,
            sid,
            max_age=int(self.lifetime),
            path="/",  # with Secure and no Domain: what a __Host- cookie must have
            httponly=True,
            samesite="Strict",
            secure=secure,
        )

    def clear_cookie(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        secure = self.over_tls(request)
        response.del_cookie(SECURE_COOKIE if secure else COOKIE, path="/", secure=secure)
