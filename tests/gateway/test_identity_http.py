"""Tokens and roles over real HTTP, on every service and through the console: no token 401,
a role too low 403 naming the role needed, the right role served, a revoked token refused at
the next request, public routes open, and no token in any log line."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import ssl
from pathlib import Path

import aiohttp
import attrs
import pytest
from aiohttp.test_utils import TestServer

from actors.platform import Runtime
from gateway import server as root
from gateway.apps.search import write_endpoint
from gateway.cli import search as search_cli
from gateway.cli.search_client import ServiceError, get_json
from gateway.console.sessions import COOKIE, SECURE_COOKIE
from gateway.http.tokens import Role, create, revoke
from gateway.services import build_app
from tests.conftest import Serve
from tests.ops.test_nginx_console import certificate
from tests.ports import free_port
from tests.search.conftest import INITIALIZE, MCP_HEADERS

BILLING = {"path": "team/billing", "language": "python", "code": "def handler(x):\n    return 1\n"}
RUN = {"language": "python", "code": "def handler(x):\n    return 41 + 1\n"}


@attrs.frozen
class Tokens:
    viewer: str
    operator: str
    admin: str
    path: Path

    def all(self) -> tuple[str, ...]:
        return (self.viewer, self.operator, self.admin)


@pytest.fixture
def tokens(runtime: Runtime) -> Tokens:
    path = runtime.data_dir / "tokens.json"
    made = {role: create(path, role.label, role) for role in Role}
    return Tokens(made[Role.VIEWER], made[Role.OPERATOR], made[Role.ADMIN], path)


async def call(
    method: str, url: str, token: str | None = None, body: str | bytes = b"", **headers: str
) -> tuple[int, str, dict[str, str]]:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, data=body, headers=headers, allow_redirects=False) as resp,
    ):
        return resp.status, await resp.text(), dict(resp.headers)


async def expect_roles(
    method: str, url: str, needed: Role, tokens: Tokens, body: str = "", ok: int = 200
) -> None:
    """401 without a token, 403 naming the role below it, `ok` from the role needed."""
    status, text, headers = await call(method, url, None, body)
    assert status == 401, text
    assert f"needs a token with role {needed.label}" in text
    assert headers["WWW-Authenticate"] == 'Bearer realm="cairn"'
    status, text, _ = await call(method, url, "cairn_nonsense", body)
    assert (status, "unknown or revoked token" in text) == (401, True)
    for role in Role:
        token = getattr(tokens, role.name.lower())
        status, text, _ = await call(method, url, token, body)
        if role < needed:
            assert status == 403, (role, text)
            assert f"token {role.label!r} has role {role.label}; this route needs" in text
            assert needed.label in text.rsplit("needs", 1)[1]
        else:
            assert status == ok, (role, url, text)


async def test_functions(serve: Serve, tokens: Tokens, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    base = await serve("functions")
    assert (await call("GET", f"{base}/health"))[0] == 200  # public
    await expect_roles("POST", f"{base}/upload", Role.ADMIN, tokens, json.dumps(BILLING))
    await expect_roles("POST", f"{base}/run-now", Role.OPERATOR, tokens, json.dumps(RUN))
    await expect_roles("GET", f"{base}/functions", Role.VIEWER, tokens)
    await expect_roles("GET", f"{base}/code/team/billing", Role.VIEWER, tokens)
    await expect_roles("DELETE", f"{base}/functions/team/billing", Role.ADMIN, tokens, ok=200)
    # Revoked: refused by the very next request, no restart.
    assert revoke(tokens.path, "admin")
    status, text, _ = await call("POST", f"{base}/upload", tokens.admin, json.dumps(BILLING))
    assert (status, "unknown or revoked token" in text) == (401, True)
    for token in tokens.all():
        assert token not in caplog.text


async def test_vm(serve: Serve, tokens: Tokens) -> None:
    base = await serve("vm", flags=frozenset({"sim"}))
    for path in ("/api/vm/list", "/api/vm/101", "/api/vm/101/status", "/health", "/sh/x.sh"):
        status, text, _ = await call("GET", base + path)
        assert status not in (401, 403), (path, text)  # the open queries
    await expect_roles("POST", f"{base}/api/vm/101/stop", Role.OPERATOR, tokens, ok=404)
    await expect_roles("POST", f"{base}/api/vm/101/set/cpu", Role.OPERATOR, tokens, "{}", ok=400)
    await expect_roles("POST", f"{base}/api/vm/101/destroy", Role.ADMIN, tokens, ok=404)
    await expect_roles("POST", f"{base}/api/vm/install", Role.ADMIN, tokens, "{}", ok=400)
    await expect_roles("GET", f"{base}/api/vm/101/task", Role.VIEWER, tokens, ok=404)


async def test_images(serve: Serve, tokens: Tokens) -> None:
    base = await serve("images")
    assert (await call("GET", f"{base}/c/img/a/missing.png"))[0] == 404  # public, not 401
    await expect_roles("POST", f"{base}/upload/a", Role.ADMIN, tokens, "x", ok=400)
    await expect_roles("DELETE", f"{base}/del/a/b.png", Role.ADMIN, tokens, ok=404)
    await expect_roles("GET", f"{base}/ls", Role.VIEWER, tokens)


async def test_search_and_mcp_take_a_bearer(
    serve: Serve, tokens: Tokens, runtime: Runtime, tmp_path: Path
) -> None:
    base = await serve("search", SEARCH_REMOTE="1")
    status, text, _ = await call("GET", f"{base}/api/list")
    assert status == 401 and "role viewer" in json.loads(text)["error"]
    assert (await call("GET", f"{base}/api/list", tokens.viewer))[0] == 200
    assert (await call("GET", f"{base}/api/health"))[0] == 200
    status, text, _ = await call("POST", f"{base}/mcp", None, json.dumps(INITIALIZE), **MCP_HEADERS)
    assert status == 401 and "needs a token" in json.loads(text)["error"]
    status, text, _ = await call(
        "POST", f"{base}/mcp", tokens.viewer, json.dumps(INITIALIZE), **MCP_HEADERS
    )
    assert status == 200, text
    # `cairn search mcp` (stdio) and `cairn search status` reach it with CAIRN_TOKEN.
    env = {**runtime.env, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    write_endpoint(env, base)
    async with aiohttp.ClientSession() as http:
        with pytest.raises(ServiceError, match="needs a token with role viewer"):
            await get_json(http, env, "/api/list", {})
        listed = await get_json(http, {**env, "CAIRN_TOKEN": tokens.viewer}, "/api/list", {})
        assert listed["loaded"] == []


def search_command(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = search_cli.main(argv, env)
    return code, out.getvalue(), err.getvalue()


async def test_cairn_search_takes_the_token_as_every_command_does(
    serve: Serve, tokens: Tokens, runtime: Runtime, tmp_path: Path
) -> None:
    base = await serve("search")
    env = {k: v for k, v in runtime.env.items() if not k.startswith("CAIRN_TOKEN")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    write_endpoint(env, base)
    held = tmp_path / "viewer.token"
    held.write_text(tokens.viewer + "\n")
    # status answers 0; query on a database that is not loaded 1: both past the token check.
    for argv, done in ((["search", "status"], 0), (["search", "query", "nope", "x"], 1)):
        code, _, err = await asyncio.to_thread(search_command, argv, env)
        assert code == 4, err
        assert err.startswith("cairn: sign-in required: this route needs a token with role viewer")
        assert err.endswith("[set CAIRN_TOKEN, CAIRN_TOKEN_FILE or --token-file]\n")
        for extra, more in (
            (["--token-file", str(held)], {}),
            ([], {"CAIRN_TOKEN_FILE": str(held)}),
            ([], {"CAIRN_TOKEN": tokens.viewer}),
        ):
            code, out, err = await asyncio.to_thread(search_command, argv + extra, {**env, **more})
            assert code == done, (argv, extra, more, err)
            assert tokens.viewer not in out + err
        code, _, err = await asyncio.to_thread(
            search_command, argv, {**env, "CAIRN_TOKEN": "cairn_nonsense"}
        )
        assert code == 4 and err.endswith("[the token sent was refused]\n"), err
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    for argv in (["search", "status"], ["search", "mcp"]):
        code, _, err = await asyncio.to_thread(
            search_command, [*argv, "--token-file", str(empty)], env
        )
        assert (code, err) == (2, f"cairn: the token file {empty} is empty\n")


async def test_a_reference_page_says_how_to_sign_in_and_opens_through_the_console(
    serve: Serve, tokens: Tokens
) -> None:
    console_port = free_port()  # where the console listens, as `cairn up` tells each service
    functions = await serve("functions", listen={"status": ("127.0.0.1", console_port)})
    browser = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    status, text, headers = await call("GET", f"{functions}/docs/", **browser)
    assert status == 401 and headers["Content-Type"].startswith("text/html"), text
    assert headers["WWW-Authenticate"] == 'Bearer realm="cairn"'
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    console = f"http://127.0.0.1:{console_port}"
    assert f'<a href="{console}/console/login">Sign in on the console</a>' in text
    assert f'<a href="{console}/console/svc/functions/docs/">' in text
    # A script keeps the plain refusal; other routes keep theirs, whoever asks.
    status, text, _ = await call("GET", f"{functions}/docs/")
    assert status == 401 and text.startswith("sign-in required: this route needs a token")
    status, text, headers = await call("GET", f"{functions}/functions", **browser)
    assert status == 401 and headers["Content-Type"].startswith("text/plain")
    # With a token the page is the page.
    status, text, _ = await call("GET", f"{functions}/docs/", tokens.viewer, **browser)
    assert status == 200 and "swagger-ui-bundle.js" in text

    # Signed in on the console, the same reference opens through it, and "Try it out" (which
    # the page sends the same way) goes with the session.
    port = int(functions.rsplit(":", 1)[1])
    base = await serve("status", listen={"functions": ("127.0.0.1", port)})
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.post(f"{base}/console/login", data={"token": tokens.viewer}) as resp:
            assert resp.status == 200
        for path, kind in (
            ("/docs/", "text/html"),
            ("/docs/init.js", "text/javascript"),
            ("/openapi.json", "application/json"),
            ("/functions", "application/json"),
        ):
            async with http.get(f"{base}/console/svc/functions{path}", headers=browser) as resp:
                assert (resp.status, resp.content_type) == (200, kind), path
                if path == "/docs/init.js":
                    assert "/console\\/svc\\/" in await resp.text()  # the way "Try it out" goes


async def test_the_console_signs_in_and_forwards_the_identity(serve: Serve, tokens: Tokens) -> None:
    functions = await serve("functions")
    port = int(functions.rsplit(":", 1)[1])
    base = await serve("status", listen={"functions": ("127.0.0.1", port)})
    status, _, headers = await call("GET", f"{base}/")
    assert (status, headers["Location"]) == (303, "/console/login")
    assert (await call("GET", f"{base}/console/login"))[0] == 200
    assert (await call("GET", f"{base}/console/events"))[0] == 401
    # A call forwarded with a bearer: both the console and the service check it.
    url = f"{base}/console/svc/functions/run-now"
    await expect_roles("POST", url, Role.OPERATOR, tokens, json.dumps(RUN))
    # unsafe: keep cookies of an IP address (127.0.0.1), as a browser does.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.post(f"{base}/console/login", data={"token": "cairn_wrong"}) as resp:
            assert resp.status == 401
            assert "Unknown or revoked token." in await resp.text()
        async with http.post(
            f"{base}/console/login", data={"token": tokens.viewer}, allow_redirects=False
        ) as resp:
            assert (resp.status, resp.headers["Location"]) == (303, "/")
            cookie = resp.headers["Set-Cookie"]
            assert cookie.startswith(f"{COOKIE}=")
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age=" in cookie
            assert "Secure" not in cookie  # plain HTTP here; over TLS it is __Host-, Secure
            assert tokens.viewer not in cookie
        async with http.get(f"{base}/console/whoami") as resp:
            assert await resp.json() == {"identities": True, "name": "viewer", "role": "viewer"}
        async with http.get(f"{base}/console/svc/functions/functions") as resp:
            assert resp.status == 200  # the service saw the session's token
        async with http.post(url, data=json.dumps(RUN)) as resp:
            assert resp.status == 403
            assert "token 'viewer' has role viewer; this route needs operator" in await resp.text()
        async with http.post(f"{base}/console/logout", allow_redirects=False) as resp:
            assert resp.headers["Location"] == "/console/login"
        async with http.get(f"{base}/console/svc/functions/functions") as resp:
            assert resp.status == 401


async def test_a_broken_sign_in_form_is_a_400(serve: Serve, tokens: Tokens) -> None:
    base = await serve("status")
    for content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        status, text, _ = await call(
            "POST",
            f"{base}/console/login",
            None,
            b"token=%zz" + b"x" * 5000,
            **{"Content-Type": content_type},
        )
        assert status == 400 and "That is not a token." in text


async def sign_in(base: str, token: str, **headers: str) -> str:
    """The Set-Cookie header of a sign-in with ``token``."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{base}/console/login", data={"token": token}, headers=headers, allow_redirects=False
        ) as resp,
    ):
        assert resp.status == 303, await resp.text()
        return resp.headers["Set-Cookie"]


async def whoami(base: str, cookie: str, **headers: str) -> str | None:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{base}/console/whoami", headers={"Cookie": cookie, **headers}) as resp,
    ):
        name: str | None = (await resp.json())["name"]
        return name


def cookie_value(set_cookie: str) -> str:
    return set_cookie.split(";", 1)[0].split("=", 1)[1]


async def test_a_host_cookie_behind_a_trusted_tls_proxy(serve: Serve, tokens: Tokens) -> None:
    """Behind a proxy named in TRUSTED_PROXIES that says https, the session cookie is
    `__Host-`: Secure, Path=/, no Domain, so no other port or subdomain gets or sets it. An
    HTTPS request reads only that name, a plain one only the plain name."""
    base = await serve("status", TRUSTED_PROXIES="127.0.0.1")
    https = {"X-Forwarded-Proto": "https"}
    cookie = await sign_in(base, tokens.admin, **https)
    assert cookie.startswith(f"{SECURE_COOKIE}=")
    attributes = [a.strip().lower() for a in cookie.split(";")[1:]]
    assert "secure" in attributes and "path=/" in attributes and "httponly" in attributes
    assert not any(a.startswith("domain") for a in attributes)
    sid = cookie_value(cookie)
    assert await whoami(base, f"{SECURE_COOKIE}={sid}", **https) == "admin"
    # The same id under the plain name (set by another port of the host), or the __Host-
    # cookie on a request that is not HTTPS: nobody.
    assert await whoami(base, f"{COOKIE}={sid}", **https) is None
    assert await whoami(base, f"{SECURE_COOKIE}={sid}") is None


async def test_x_forwarded_proto_from_anyone_else_is_ignored(serve: Serve, tokens: Tokens) -> None:
    """Without TRUSTED_PROXIES, a client's own `X-Forwarded-Proto: https` changes nothing: the
    cookie stays the plain-HTTP one (a Secure cookie would not come back over plain HTTP)."""
    base = await serve("status")
    cookie = await sign_in(base, tokens.viewer, **{"X-Forwarded-Proto": "https"})
    assert cookie.startswith(f"{COOKIE}=")
    assert "secure" not in cookie.lower()
    assert await whoami(base, f"{COOKIE}={cookie_value(cookie)}") == "viewer"


async def test_a_host_cookie_over_the_consoles_own_tls(
    runtime: Runtime, tokens: Tokens, tmp_path: Path
) -> None:
    cert, key = certificate(tmp_path / "tls")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    app = await build_app(root.load("status"), runtime)
    server = TestServer(app, host="127.0.0.1", scheme="https")
    await server.start_server(ssl=context)
    try:
        base = str(server.make_url("")).rstrip("/")
        client = ssl.create_default_context(cafile=str(cert))
        client.check_hostname = False
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client)) as http,
            http.post(
                f"{base}/console/login", data={"token": tokens.operator}, allow_redirects=False
            ) as resp,
        ):
            cookie = resp.headers["Set-Cookie"]
        assert cookie.startswith(f"{SECURE_COOKIE}=") and "Secure" in cookie
    finally:
        await server.close()


async def test_without_tokens_nothing_is_asked(serve: Serve, runtime: Runtime) -> None:
    assert not (runtime.data_dir / "tokens.json").exists()
    base = await serve("functions")
    status, text, _ = await call("POST", f"{base}/upload", None, json.dumps(BILLING))
    assert status == 200, text
    status, _, _ = await call("GET", f"{await serve('status')}/")
    assert status in (200, 503)  # the page (503: front-end packages not installed)
