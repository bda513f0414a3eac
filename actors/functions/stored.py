"""A stored function looked up and run from another service: a VM's safe change checks the VM
with one (its result `true` or `{"ok": true}` passes). It asks as the HTTP gateway does: the
registry's resolve command and a run on the runners' queue group, both over the gateway
role's connection, whose account holds nothing of cairn's where a reply could land."""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client

from actors.functions import protocol
from actors.functions.registry import SCRIPT_NOT_FOUND
from actors.functions.runs import RunClient, RunFailed
from events.bus import CommandFailed, CommandTimeout, NoResponders, command

RESOLVE_TIMEOUT_S = 10.0


class StoredFunctions:
    def __init__(self, nc: Client, client: RunClient) -> None:
        self.nc = nc
        self.client = client

    async def _resolve(self, path: str) -> dict[str, Any] | tuple[int, str]:
        """The latest version of `path`, or why there is none to run (404: none is stored
        there; 503: the registry does not answer)."""
        try:
            found = await command(
                self.nc,
                protocol.RESOLVE_SUBJECT,
                {"path": path, "version": None},
                RESOLVE_TIMEOUT_S,
            )
        except CommandFailed as exc:
            if exc.message == SCRIPT_NOT_FOUND:
                return 404, f"no stored function {path!r}"
            return 503, f"the function registry refused {path!r}: {exc.message}"
        except (NoResponders, CommandTimeout):
            return 503, "the function registry is not answering"
        return dict(found)

    async def missing(self, path: str) -> tuple[int, str] | None:
        """None when `path` is stored; else why it cannot be run, with its status."""
        found = await self._resolve(path)
        return found if isinstance(found, tuple) else None

    async def run(self, path: str, input_json: str, by: str) -> tuple[Any, str | None]:
        """The latest version of `path` run on `input_json`: its result and None, or None and
        why it gave none (it is gone, it raised, no runner took it, the runner went silent)."""
        found = await self._resolve(path)
        if isinstance(found, tuple):
            return None, found[1]
        run = {
            "language": found["language"],
            "code": found["code"],
            "input": input_json,
            "stream": False,
            "stored": True,
            "name": f"{found['path']} version {found['version']}",
            "by": by,
        }
        messages = self.client.run(run)
        try:
            async for message in messages:
                if message["t"] == protocol.RESULT:
                    return message["data"], None
                if message["t"] == protocol.ERROR:
                    return None, str(message["message"])
        except RunFailed as exc:
            return None, exc.message
        finally:
            await messages.aclose()
        return None, "the runner stopped answering"
