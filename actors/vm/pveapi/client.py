"""The async HTTPS client of pveproxy: token auth, a pinned certificate or a CA, form bodies.

One aiohttp session per client, opened on first use. A request returns the `data` of the
envelope or raises an `errors.ApiError`. Only GETs are repeated, and only when PVE never ran
them (no answer, or a 59x from a proxy hop): a POST is never sent twice by this layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from yarl import URL

from actors.vm.pveapi import errors
from actors.vm.pveapi.wire import (
    Token,
    api_base,
    envelope_data,
    error_body,
    form_body,
    format_fingerprint,
    path_url,
)

GET_ATTEMPTS = 3
RETRY_PAUSE = 0.2


class PveClient:
    def __init__(
        self,
        url: str,
        token: Token,
        *,
        fingerprint: bytes | None = None,
        ca_file: str | None = None,
        timeout: float = 60.0,
        retry_pause: float = RETRY_PAUSE,
    ) -> None:
        self.base = api_base(url)
        self.token = token
        self.fingerprint = fingerprint
        self._ssl: ssl.SSLContext | aiohttp.Fingerprint | bool
        if fingerprint is not None:
            # Chain and hostname are not checked, the leaf's SHA-256 is: a node's certificate
            # is self-signed, and PVE trusts its own nodes the same way.
            self._ssl = aiohttp.Fingerprint(fingerprint)
        elif ca_file:
            self._ssl = ssl.create_default_context(cafile=ca_file)
        else:
            self._ssl = ssl.create_default_context()
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=10)
        self._retry_pause = retry_pause
        self._session: aiohttp.ClientSession | None = None
        self._lock = asyncio.Lock()
        self._in_flight = 0
        self._closing = False

    async def _open(self) -> aiohttp.ClientSession:
        async with self._lock:
            if self._session is None or self._session.closed:
                self._session = aiohttp.ClientSession(
                    timeout=self._timeout,
                    headers={"Authorization": self.token.header(), "Accept": "application/json"},
                    connector=aiohttp.TCPConnector(ssl=self._ssl, limit=32),
                )
            return self._session

    async def close(self) -> None:
        """Close the connections once no request is in flight. A request still waiting (a
        task's poll), or one made after this, is not refused or cut off: at shutdown its
        caller is cancelled next, and the command must then read as interrupted, not as
        failed by a dropped connection (as a local `qm` is killed, not refused). Connections
        opened after this close when their work ends."""
        self._closing = True
        if self._in_flight == 0:
            await self._close_now()

    async def _close_now(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return await self.request("GET", path, params)

    async def post(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return await self.request("POST", path, params)

    async def put(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return await self.request("PUT", path, params)

    async def delete(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return await self.request("DELETE", path, params)

    @contextlib.asynccontextmanager
    async def busy(self) -> AsyncIterator[None]:
        """Hold the connections open for a piece of work (a request and the wait for its
        task): `close` waits for the last one to end."""
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._closing and self._in_flight == 0:
                await asyncio.shield(self._close_now())

    async def request(self, method: str, path: str, params: dict[str, Any] | None = None) -> Any:
        attempts = GET_ATTEMPTS if method == "GET" else 1
        async with self.busy():
            for attempt in range(1, attempts + 1):
                try:
                    return await self._once(method, path, params)
                except errors.ApiError as exc:
                    if attempt == attempts or not exc.retryable or self._closing:
                        raise
                await asyncio.sleep(self._retry_pause * attempt)
            raise AssertionError("unreachable")

    async def websocket(
        self, path: str, params: dict[str, Any], *, max_msg_size: int = 1 << 20
    ) -> aiohttp.ClientWebSocketResponse:
        """A websocket (subprotocol `binary`) to a GET endpoint such as `vncwebsocket`, with
        the token and the pinned certificate of every other request."""
        session = await self._open()
        url = URL(path_url(self.base, path, params), encoded=True)
        try:
            return await session.ws_connect(
                url, protocols=("binary",), max_msg_size=max_msg_size, autoping=True
            )
        except aiohttp.ServerFingerprintMismatch as exc:
            raise errors.FingerprintMismatch(
                format_fingerprint(exc.expected), format_fingerprint(exc.got), self.base
            ) from None
        except aiohttp.WSServerHandshakeError as exc:
            raise errors.from_response(
                exc.status, exc.message, error_body(b""), method="GET", path=path
            ) from None

    async def _once(self, method: str, path: str, params: dict[str, Any] | None) -> Any:
        session = await self._open()
        in_query = method in ("GET", "DELETE")
        url = path_url(self.base, path, params if in_query else None)
        kwargs: dict[str, Any] = {}
        if not in_query:
            kwargs["data"] = form_body(params).encode()
            kwargs["headers"] = {"Content-Type": "application/x-www-form-urlencoded"}
        try:
            async with session.request(method, URL(url, encoded=True), **kwargs) as resp:
                body = await resp.read()
                if resp.status >= 400:
                    raise errors.from_response(
                        resp.status, resp.reason or "", error_body(body), method=method, path=path
                    )
                try:
                    return envelope_data(body)
                except ValueError as exc:
                    raise errors.ApiError(resp.status, str(exc), method=method, path=path) from None
        except aiohttp.ServerFingerprintMismatch as exc:
            raise errors.FingerprintMismatch(
                format_fingerprint(exc.expected), format_fingerprint(exc.got), self.base
            ) from None
        except (aiohttp.ClientError, TimeoutError, ssl.SSLError) as exc:
            reason = f"{method} {self.base}{path}: {type(exc).__name__}: {exc}".rstrip(": ")
            raise errors.Unreachable(0, reason, method=method, path=path) from None
