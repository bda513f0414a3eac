"""Each service started as its own tests start it (real NATS, event store, HTTP; the VM service
on the simulated cluster), kept with its aiohttp app and the prefix of its document."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from aiohttp import web
from pvesim.cluster import SimCluster

from actors.platform import open_runtime
from actors.search.registry import Registry, state_root
from events.nats_server import EmbeddedNats
from gateway.apps import functions, images, search, status, vm
from gateway.http import logs
from gateway.server import journal
from tests.functions.conftest import SERVICE_ENV as FUNCTIONS_ENV
from tests.vm.conftest import service_env
from tests.vm.mirror import mirror_files, serve_mirror

SERVICES = ("vm", "functions", "search", "images", "status")
# Where each service serves its document (and its reference page, at <prefix>/docs/).
PREFIX = {"vm": "/api", "search": "/api", "functions": "", "images": "", "status": ""}


@attrs.frozen
class Running:
    name: str
    app: web.Application
    url: str  # http://127.0.0.1:<port>
    env: dict[str, str]

    @property
    def prefix(self) -> str:
        return PREFIX[self.name]

    @property
    def document_url(self) -> str:
        return f"{self.url}{self.prefix}/openapi.json"


@contextlib.asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    # A stream left open must not hold the teardown for aiohttp's default 60 s.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def start(
    name: str, tmp_path: Path, nats: EmbeddedNats, **extra: str
) -> AsyncIterator[Running]:
    """The service `name`, with the environment its own tests give it (plus `extra`)."""
    async with contextlib.AsyncExitStack() as stack:
        env: dict[str, str] = {**nats.client_env(), "CAIRN_DATA": str(tmp_path / "data")}
        build: Callable[[Any], Any]
        if name == "vm":
            sim = await stack.enter_async_context(SimCluster(tmp_path / "pve", delay_scale=0))
            mirror = await stack.enter_async_context(serve_mirror(mirror_files()))
            env = service_env(tmp_path, nats, sim, mirror)
            build = vm.build
        elif name == "functions":
            env.update(FUNCTIONS_ENV)
            build = functions.build
        elif name == "search":
            env.update(
                XDG_CONFIG_HOME=str(tmp_path / "config"),
                SEARCH_INBOX=str(tmp_path / "inbox"),
                SEARCH_REMOTE="1",  # /mcp mounted: every route there is
            )
            Registry(state_root(env)).add("notes")
            notes = tmp_path / "inbox" / "notes"
            notes.mkdir(parents=True)
            (notes / "invoices.md").write_text("Invoices must be paid within thirty days.\n")
            build = search.build
        elif name == "images":
            build = images.build
        else:
            build = status.build
        env.update(extra)
        runtime = await stack.enter_async_context(
            open_runtime(env, tmp_path / "data", journal=journal())
        )
        app = await build(runtime)
        url = await stack.enter_async_context(served(app))
        yield Running(name, app, url, env)


@pytest.fixture
def cairn_log_filters() -> Iterator[None]:
    """The logger filters cairn installs at start-up (gateway/http/logs.py)."""
    logs.install_filters()
    yield
    logging.getLogger("aiohttp.server").removeFilter(logs.MALFORMED_REQUESTS)


@pytest.fixture(params=SERVICES)
async def running(
    request: pytest.FixtureRequest, tmp_path: Path, nats_server: EmbeddedNats
) -> AsyncIterator[Running]:
    async with start(request.param, tmp_path, nats_server) as service:
        yield service
