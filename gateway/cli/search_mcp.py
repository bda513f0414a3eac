"""`cairn search mcp`: the MCP tools on stdin/stdout for an agent on this machine, answered by
the running search service over its HTTP API (gateway/cli/search_client.py). The tools
themselves, and the same tools served at `/mcp`, are gateway/apps/search_mcp.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp

from gateway.apps.search_mcp import SearchArguments, ToolFailure, make_server
from gateway.cli.search_client import ServiceError, get_json


class HttpBackend:
    """The tools over the running service's HTTP API (the stdio server).

    The `endpoint` file is read for each call, so a service restarted on another port is
    followed; only a loopback address is ever contacted.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        session: aiohttp.ClientSession,
        token_file: str | None = None,
    ) -> None:
        self._env = env
        self._session = session
        self._token_file = token_file  # `cairn search mcp --token-file`

    async def listing(self) -> dict[str, Any]:
        return await self._get("/api/list", {})

    async def search(self, args: SearchArguments) -> dict[str, Any]:
        params = {"db": args.db, "q": args.q, "limit": str(args.limit), "target": args.target}
        if args.options.rank is not None:
            params["rank"] = args.options.rank
        if args.highlight:
            params["highlight"] = "1"
        return await self._get("/api/search", params)

    async def _get(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        try:
            return await get_json(self._session, self._env, path, params, self._token_file)
        except ServiceError as exc:
            raise ToolFailure(str(exc)) from None  # the agent reads it as the tool's error


async def run_stdio(env: Mapping[str, str], token_file: str | None = None) -> None:
    """Serve the tools on stdin/stdout until the client closes stdin."""
    from mcp.server.stdio import stdio_server

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        server = make_server(HttpBackend(env, session, token_file))
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
