"""The environment a child process prints once it is ready (``cairn sim``: the simulated
cluster's addresses and credentials), read from its standard output."""

from __future__ import annotations

import asyncio


async def printed_env(stdout: asyncio.StreamReader, who: str) -> dict[str, str]:
    """The ``NAME=value`` lines ``who`` prints (after a ``#`` comment, ``PATH`` last). Raises
    EOFError, naming ``who``, if its output ends first (it did not start)."""
    env: dict[str, str] = {}
    while "PATH" not in env:
        line = (await stdout.readline()).decode()
        if not line:
            raise EOFError(f"{who} ended before printing its environment")
        if "=" in line and not line.startswith("#"):
            key, value = line.rstrip("\n").split("=", 1)
            env[key] = value
    return env
