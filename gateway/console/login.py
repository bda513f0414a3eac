"""The console's sign-in page, sign-out, and ``whoami`` (who the page is signed in as).

| route | what |
|---|---|
| ``GET /console/login`` | the sign-in form (server-rendered, no script) |
| ``POST /console/login`` | ``token=…``: a valid one starts a session (``sessions.py``) |
| ``POST /console/logout`` | ends the session, 303 to the form |
| ``GET /console/whoami`` | ``{"identities": bool, "name": …, "role": …}`` for the page |

These are public (nobody could sign in otherwise); the cross-site guard in front refuses a
sign-in form posted from another site's page (login CSRF).
"""

from __future__ import annotations

import html

from aiohttp import web

from gateway.console.sessions import Sessions
from gateway.http.identity import bearer
from gateway.http.tokens import TokenError, TokenStore

LOGIN = "/console/login"
_MAX_FORM = 4096

PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <meta name="color-scheme" content="light dark">
  <title>Sign in · cairn</title>
  <link rel="icon" href="/console/static/favicon.svg" type="image/svg+xml">
  <link rel="stylesheet" href="/console/vendor/pico/pico.min.css">
  <link rel="stylesheet" href="/console/static/console.css">
</head>
<body>
  <main class="container signin">
    <h1>Sign in to cairn</h1>
    <p>This cairn asks who you are. Paste the token an admin made for you with
    <code>cairn token create NAME --role viewer|operator|admin</code>.</p>
    {message}
    <form method="post" action="/console/login">
      <label for="token">Token</label>
      <input id="token" name="token" type="password" autocomplete="off" required autofocus
             aria-describedby="token-help">
      <small id="token-help">It starts with <code>cairn_</code>. It is sent once; the console
      keeps a session cookie instead.</small>
      <button type="submit">Sign in</button>
    </form>
  </main>
</body>
</html>
"""


def page(message: str | None = None, status: int = 200) -> web.Response:
    shown = f'<p role="alert" class="error">{html.escape(message)}</p>' if message else ""
    return web.Response(
        status=status,
        text=PAGE.replace("{message}", shown),
        content_type="text/html",
        headers={"Cache-Control": "no-store"},
    )


class SignIn:
    def __init__(self, tokens: TokenStore, sessions: Sessions) -> None:
        self.tokens = tokens
        self.sessions = sessions

    def _enabled(self) -> bool:
        try:
            return self.tokens.enabled()
        except TokenError:
            return True  # damaged: every route answers 503 saying so; the form stays

    async def form(self, request: web.Request) -> web.StreamResponse:
        if not self._enabled():
            raise web.HTTPSeeOther("/")  # nothing to sign in to
        return page()

    async def login(self, request: web.Request) -> web.StreamResponse:
        if request.content_length is not None and request.content_length > _MAX_FORM:
            return page("That is not a token.", 400)
        try:
            form = await request.post()
        except (ValueError, web.HTTPException):  # a broken or oversized form
            return page("That is not a token.", 400)
        token = str(form.get("token", "")).strip()
        if not self._enabled():
            raise web.HTTPSeeOther("/")
        who = self.tokens.identify(token) if token else None
        if who is None:
            return page("Unknown or revoked token.", 401)
        response = web.HTTPSeeOther("/")
        self.sessions.set_cookie(request, response, self.sessions.start(token))
        raise response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        self.sessions.end(request)
        response = web.HTTPSeeOther(LOGIN)
        self.sessions.clear_cookie(request, response)
        raise response

    async def whoami(self, request: web.Request) -> web.Response:
        if not self._enabled():
            return web.json_response({"identities": False, "name": None, "role": None})
        token = bearer(request) or self.sessions.token(request)
        who = self.tokens.identify(token) if token else None
        return web.json_response(
            {
                "identities": True,
                "name": who.name if who else None,
                "role": who.role.label if who else None,
            },
            headers={"Cache-Control": "no-store"},
        )


def add_routes(app: web.Application, sign_in: SignIn) -> None:
    app.router.add_get(LOGIN, sign_in.form)
    app.router.add_post(LOGIN, sign_in.login)
    app.router.add_post("/console/logout", sign_in.logout)
    app.router.add_get("/console/whoami", sign_in.whoami)
