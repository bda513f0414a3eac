"""A local client of the running search service, found through its `endpoint` file: used by
`cairn search mcp` (stdio), `cairn search status` and `cairn search query`. Only a loopback
address is contacted, and the file is read at each call, so a service restarted on another
port is followed. When this cairn has tokens, the token goes along as ``Authorization:
Bearer``, taken as every command takes it (``--token-file``, else ``CAIRN_TOKEN``, else
``CAIRN_TOKEN_FILE``: gateway/cli/client.py); it is never printed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from actors.search.registry import config_dir
from gateway.cli.client import DENIED, REFUSED, UNREACHABLE, CliError, read_token
from gateway.http.loopback import is_loopback_host


class ServiceError(Exception):
    """The service could not be asked, or answered with an error; the message says which,
    ``code`` the command's exit code for it (gateway/cli/client.py's: 1 refused, 2 usage, 3
    unreachable or unavailable, 4 not allowed)."""

    def __init__(self, message: str, code: int = REFUSED) -> None:
        super().__init__(message)
        self.code = code


def token(env: Mapping[str, str], token_file: str | None = None) -> str | None:
    """The token to send, or None; a named file that holds none is a ServiceError."""
    try:
        return read_token(env, token_file)
    except CliError as exc:
        raise ServiceError(exc.message, exc.code) from None


def read_endpoint(env: Mapping[str, str]) -> str:
    """The base URL in the `endpoint` file; ServiceError when absent or not loopback."""
    path = config_dir(env) / "endpoint"
    try:
        base = path.read_text().strip()
    except OSError:
        raise ServiceError(
            f"the search service is not running (no {path}); start it with `cairn serve search`",
            UNREACHABLE,
        ) from None
    parts = urlsplit(base)
    if parts.scheme != "http" or not is_loopback_host(parts.netloc) or parts.path not in ("", "/"):
        raise ServiceError(f"{path} does not hold a loopback http address")
    return base.rstrip("/")


async def get_json(
    session: aiohttp.ClientSession,
    env: Mapping[str, str],
    path: str,
    params: Mapping[str, str],
    token_file: str | None = None,
) -> dict[str, Any]:
    """GET `path` on the running service: its JSON object, or ServiceError with its `error`."""
    base = read_endpoint(env)
    sent = token(env, token_file)
    headers = {"Authorization": f"Bearer {sent}"} if sent else None
    try:
        async with session.get(base + path, params=params, headers=headers) as resp:
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ServiceError(
            f"the search service at {base} did not answer ({type(exc).__name__}); "
            "is it running? (cairn serve search)",
            UNREACHABLE,
        ) from None
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if resp.status == 200 and isinstance(body, dict):
        return body
    message = f"the search service answered {resp.status}"
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        message = body["error"]
    if resp.status == 401:
        hint = (
            "set CAIRN_TOKEN, CAIRN_TOKEN_FILE or --token-file"
            if sent is None
            else ("the token sent was refused")
        )
        raise ServiceError(f"{message} [{hint}]", DENIED)
    code = {403: DENIED, 503: UNREACHABLE}.get(resp.status, REFUSED)
    raise ServiceError(message, code)
