"""A local client of the running search service, found through its `endpoint` file: used by
`cairn search mcp` (stdio) and `cairn search status`. Only a loopback address is contacted, and
the file is read at each call, so a service restarted on another port is followed. When this
cairn has tokens, ``CAIRN_TOKEN`` (a viewer's or above) goes along as ``Authorization:
Bearer``; it is never printed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from actors.search.registry import config_dir
from gateway.loopback import is_loopback_host


class ServiceError(Exception):
    """The service could not be asked, or answered with an error; the message says which."""


def read_endpoint(env: Mapping[str, str]) -> str:
    """The base URL in the `endpoint` file; ServiceError when absent or not loopback."""
    path = config_dir(env) / "endpoint"
    try:
        base = path.read_text().strip()
    except OSError:
        raise ServiceError(
            f"the search service is not running (no {path}); start it with `cairn serve search`"
        ) from None
    parts = urlsplit(base)
    if parts.scheme != "http" or not is_loopback_host(parts.netloc) or parts.path not in ("", "/"):
        raise ServiceError(f"{path} does not hold a loopback http address")
    return base.rstrip("/")


async def get_json(
    session: aiohttp.ClientSession, env: Mapping[str, str], path: str, params: Mapping[str, str]
) -> dict[str, Any]:
    """GET `path` on the running service: its JSON object, or ServiceError with its `error`."""
    base = read_endpoint(env)
    token = env.get("CAIRN_TOKEN", "").strip()
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        async with session.get(base + path, params=params, headers=headers) as resp:
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ServiceError(
            f"the search service at {base} did not answer ({type(exc).__name__}); "
            "is it running? (cairn serve search)"
        ) from None
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if resp.status == 200 and isinstance(body, dict):
        return body
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        raise ServiceError(body["error"])
    raise ServiceError(f"the search service answered {resp.status}")
