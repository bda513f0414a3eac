"""Shared fixtures: a real nats-server per test, a real SQLite event store, a runtime."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pykka
import pytest
from aiohttp.test_utils import TestServer
from nats.aio.client import Client

from actors.platform import Runtime, open_runtime
from events.nats_server import EmbeddedNats
from events.store import EventStore, RetryPolicy, default_store_url
from gateway import server as root
from gateway.server import domain_events, journal
from gateway.services import build_app
from tests.postgres import SKIP_ENV as SKIP_POSTGRES
from tests.postgres import PostgresServer, running_postgres

domain_events()


@pytest.fixture(autouse=True)
def no_actor_left_running() -> Iterator[None]:
    """Every test stops the actors it started. A pykka thread left running keeps the
    interpreter from exiting, so a leak would hang the whole run at its very end; here it
    fails the test that leaked instead (and the actors are stopped)."""
    yield
    left = pykka.ActorRegistry.get_all()
    if left:
        names = sorted(ref.actor_class.__name__ for ref in left)
        pykka.ActorRegistry.stop_all(block=True, timeout=10)
        pytest.fail(f"actors left running after the test: {names}")


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    """A running nats-server on a free loopback port; tests may stop and start it again."""
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    client = await nats_server.connect()
    yield client
    await client.close()


@contextlib.asynccontextmanager
async def opened_store(url: str, retry: RetryPolicy | None = None) -> AsyncIterator[EventStore]:
    """The event store at ``url`` (SQLite or PostgreSQL) for the block; a fixture's store."""
    store = await EventStore.open(url, retry)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    async with opened_store(default_store_url(tmp_path)) as s:
        yield s


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL cluster for the session (about a second to start)."""
    if os.environ.get(SKIP_POSTGRES):
        pytest.skip(f"{SKIP_POSTGRES} is set")
    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_url(postgres: PostgresServer) -> str:
    """The store URL of a fresh database on the session's PostgreSQL."""
    return postgres.url(postgres.new_database())


# ``await serve(name, *, flags=..., listen=..., **env)``: a service's base URL.
Serve = Callable[..., Awaitable[str]]


@pytest.fixture
async def serve(runtime: Runtime, tmp_path: Path) -> AsyncIterator[Serve]:
    """Start a service's app as ``cairn`` builds it (``gateway.services.build_app``: every
    shared middleware) on a test server over this test's runtime, with ``env`` laid over the
    runtime's (search's config in the test's folder, no embedding model), command-line
    ``flags`` and the ``listen`` addresses the console proxies to. All end with the test."""
    servers: list[TestServer] = []

    async def start(
        name: str,
        *,
        flags: frozenset[str] = frozenset(),
        listen: dict[str, tuple[str, int]] | None = None,
        **env: str,
    ) -> str:
        base_env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "EMBEDDING_PROVIDER": "none"}
        rt = attrs.evolve(
            runtime, env={**runtime.env, **base_env, **env}, flags=flags, listen=listen or {}
        )
        app = await build_app(root.load(name), rt)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("")).rstrip("/")

    yield start
    for server in servers:
        await server.close()


@pytest.fixture
async def runtime(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[Runtime]:
    env = {**nats_server.client_env(), "CAIRN_DATA": str(tmp_path / "data")}
    async with open_runtime(env, tmp_path / "data", journal=journal()) as rt:
        yield rt


async def wait_for(
    condition: Callable[[], Any], *, timeout: float = 10.0, what: str = "condition"
) -> Any:
    """Poll ``condition`` until it is truthy; for state that offers nothing to await."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class Peak:
    """The largest value ``count()`` returned while inside, sampled without pause on a thread
    of its own (so it samples while the test's loop is busy); ``before`` at entry."""

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count
        self.before = self.most = count()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._done.is_set():
            self.most = max(self.most, self._count())

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
