"""The console's sign-in: a token typed once, then a session cookie.

``POST /console/login`` with a valid token sets ``cairn_session``: a random 256-bit id,
``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page sends it),
``Secure`` when the browser came over TLS (directly or through a proxy saying
``X-Forwarded-Proto: https``), ``Path=/``, and ``Max-Age`` of ``CAIRN_SESSION_HOURS`` (12).
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

COOKIE = "cairn_session"
SESSIONS: web.AppKey[Sessions] = web.AppKey("console-sessions")


@attrs.frozen
class Session:
    token: str
    expires: float


class Sessions:
    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self._by_id: dict[str, Session] = {}

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Sessions:
        hours = env_float(env, "CAIRN_SESSION_HOURS", 12.0, min=0.01)
        return cls(hours * 3600)

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
        sid = request.cookies.get(COOKIE)
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
        sid = request.cookies.get(COOKIE)
        if sid:
            self._by_id.pop(sid, None)

    def set_cookie(self, request: web.BaseRequest, response: web.StreamResponse, sid: str) -> None:
        secure = request.secure or request.headers.get("X-Forwarded-Proto", "") == "https"
        response.set_cookie(
            COOKIE,
            sid,
            max_age=int(self.lifetime),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=secure,
        )

    @staticmethod
    def clear_cookie(response: web.StreamResponse) -> None:
        response.del_cookie(COOKIE, path="/")
