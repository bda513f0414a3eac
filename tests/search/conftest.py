"""A running search service over real NATS, SQLite, usearch, watchfiles and the local model."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from actors.platform import open_runtime
from actors.search.embed import minilm
from actors.search.embed.embedding import LocalProvider
from actors.search.registry import Registry, state_root
from events.nats_server import EmbeddedNats
from events.store import EventStore, Recorded, default_store_url
from gateway.apps import search
from gateway.server import journal
from tests.ports import free_port
from tests.search.fake_openai import FakeOpenAI


class SearchHarness:
    def __init__(self, tmp_path: Path, nats: EmbeddedNats) -> None:
        self.env = {
            **nats.client_env(),
            "CAIRN_DATA": str(tmp_path / "data"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "SEARCH_INBOX": str(tmp_path / "inbox"),
        }
        self.registry = Registry(state_root(self.env))
        self.inbox = tmp_path / "inbox"
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.base = ""
        self.unclaimed: list[dict[str, Any]] = []
        self._stack = contextlib.AsyncExitStack()
        self.session: aiohttp.ClientSession | None = None

    async def start(self, **env: str) -> None:
        self.env.update(env)
        runtime = await self._stack.enter_async_context(open_runtime(self.env, journal=journal()))

        async def on_event(msg: Any) -> None:
            self.events.put_nowait(json.loads(msg.data))

        sub = await runtime.nc.subscribe("cairn.evt.search.*", cb=on_event)
        self._stack.push_async_callback(sub.unsubscribe)
        # A real port before the build, so the `endpoint` file names the address served.
        port = free_port()
        runtime.listen["search"] = ("127.0.0.1", port)
        app = await search.build(runtime)
        server = TestServer(app, host="127.0.0.1", port=port)
        await server.start_server()
        self._stack.push_async_callback(server.close)
        self.base = f"http://127.0.0.1:{server.port}"
        self.session = aiohttp.ClientSession()
        self._stack.push_async_callback(self.session.close)

    async def stop(self) -> None:
        await self._stack.aclose()
        self._stack = contextlib.AsyncExitStack()

    async def get(self, path: str, **params: Any) -> tuple[int, Any]:
        assert self.session is not None
        async with self.session.get(self.base + path, params=params) as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text)
            except ValueError:
                return resp.status, text

    async def event(
        self, type_: str, source: str | None = None, timeout: float = 30
    ) -> dict[str, Any]:
        """The first unclaimed event of `type_` (for `source`); others stay for later calls."""

        def matches(event: dict[str, Any]) -> bool:
            return event["type"] == type_ and source in (None, event["data"].get("source"))

        for index, event in enumerate(self.unclaimed):
            if matches(event):
                del self.unclaimed[index]
                return event["data"]
        async with asyncio.timeout(timeout):
            while True:
                event = await self.events.get()
                if matches(event):
                    return event["data"]
                self.unclaimed.append(event)

    async def start_indexed(self, db: str, files: dict[str, str], **env: str) -> None:
        """Register `db` with `files` in its inbox, start, and wait until every file is
        indexed and embedded."""
        self.registry.add(db)
        for name, text in files.items():
            self.write(f"{db}/{name}", text)
        await self.start(**env)
        for name in files:
            await self.event("search.document_indexed", name)
        await self.settled()

    async def settled(self, timeout: float = 60) -> dict[str, Any]:
        """The next `search.progress` saying both stages are done (files indexed, and every
        chunk embedded or failed)."""
        while True:
            progress = await self.event("search.progress", timeout=timeout)
            if progress["state"] == "idle":
                return progress

    async def until_indexed(self, db: str, documents: int) -> dict[str, Any]:
        """`GET /api/status?db=` once `documents` are indexed and no file waits for it."""
        async with asyncio.timeout(120):
            while True:
                status, body = await self.get("/api/status", db=db)
                assert status == 200, body
                if body["documents"] == documents and body["state"] != "indexing":
                    return dict(body)
                await asyncio.sleep(0.05)  # polling the route a user would poll

    async def stopped_stream(self, db: str) -> list[Recorded]:
        """Stop the service, then read the stream `search:<db>` from the event store's file:
        what was recorded, including on the way out."""
        await self.stop()
        store = await EventStore.open(default_store_url(Path(self.env["CAIRN_DATA"])))
        try:
            return await store.read_stream(f"search:{db}")
        finally:
            await store.close()

    def write(self, relative: str, content: str | bytes) -> Path:
        path = self.inbox / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        tmp.write_bytes(content.encode() if isinstance(content, str) else content)
        tmp.replace(path)
        return path


# An MCP client's opening message, and the headers its POSTs carry.
INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[SearchHarness]:
    nats = EmbeddedNats(tmp_path / "nats")
    await nats.start()
    h = SearchHarness(tmp_path, nats)
    yield h
    await h.stop()
    await nats.stop()


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    """An OpenAI-compatible embeddings server on a loopback port."""
    server = FakeOpenAI()
    await server.server.start_server()
    yield server
    if server.gate is not None:
        server.gate.set()
    await server.server.close()


@pytest.fixture(scope="module")
def reference() -> minilm.MiniLM:
    """The numpy forward pass: the vectors every faster runtime is held to."""
    return LocalProvider(runtime="numpy").model
