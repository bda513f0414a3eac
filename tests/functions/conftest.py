"""A real sandbox (bubblewrap, cgroups where writable) and the real service over HTTP."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from aiohttp.test_utils import TestServer

from actors.functions import cgroups
from actors.functions.host import FunctionsHost
from actors.functions.limits import MIB, SandboxLimits
from actors.functions.runner import Sandbox, tool_runner
from actors.functions.settings import FunctionsSettings
from actors.functions.transpile import Transpiler
from actors.platform import Runtime
from events import resources
from gateway.apps.functions import FUNCTIONS_HOST, build

TEST_LIMITS = SandboxLimits(
    timeout_s=10,
    cpu_seconds=10,
    memory_bytes=128 * MIB,
    processes=32,
    output_bytes=64 * 1024,
    tmpfs_bytes=4 * MIB,
)


@pytest.fixture(scope="module")
def cgroup_set() -> Iterator[cgroups.Cgroups]:
    made = cgroups.create(TEST_LIMITS)
    yield made
    made.remove()


# The host user sandboxes run as (cairn-sandbox when the tests run as root), as the service
# resolves it.
HOST_USER = FunctionsSettings.from_env({}).user


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(TEST_LIMITS, HOST_USER)


@pytest.fixture
def transpiler(tmp_path: Path, sandbox: Sandbox, cgroup_set: cgroups.Cgroups) -> Transpiler:
    run = tool_runner(sandbox, lambda: cgroup_set)
    esbuild = resources.esbuild({})
    return Transpiler(esbuild, tmp_path / "ts-cache", run, TEST_LIMITS, max_bytes=8192)


# -- the service over real HTTP ------------------------------------------------------------

SERVICE_ENV = {
    "RUN_TIMEOUT": "3",
    "RUN_MEMORY_MB": "128",
    "RUN_PROCESSES": "32",
    "RUN_OUTPUT_BYTES": "65536",
    "RUN_TMPFS_MB": "4",
    "RUN_CONCURRENCY": "2",
    "RUN_QUEUE": "2",
    "CODE_MAX_SIZE": "8192",
}


class Service:
    """A running functions service: its HTTP base URL, an HTTP session, the app."""

    def __init__(self, server: TestServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session
        self.app = server.app

    @property
    def host(self) -> FunctionsHost:
        return self.app[FUNCTIONS_HOST]

    @property
    def port(self) -> int:
        assert self.server.port is not None
        return self.server.port

    async def post(self, path: str, body: Any = None, *, raw: bytes | None = None) -> Reply:
        data = raw if raw is not None else json.dumps(body).encode()
        async with self.session.post(path, data=data) as response:
            return Reply(response.status, response.content_type, await response.text())

    async def run_now(self, language: str, code: str, **extra: Any) -> Reply:
        return await self.post("/run-now", {"language": language, "code": code, **extra})

    async def upload(self, path: str, language: str, code: str) -> dict[str, Any]:
        reply = await self.post("/upload", {"path": path, "language": language, "code": code})
        assert reply.status == 200, reply
        result: dict[str, Any] = json.loads(reply.text)
        return result


@attrs.frozen
class Reply:
    status: int
    content_type: str
    text: str

    def json(self) -> Any:
        assert self.content_type == "application/json", self
        return json.loads(self.text)


@contextlib.asynccontextmanager
async def start_service(runtime: Runtime, **env: str) -> AsyncIterator[Service]:
    runtime.env = {**runtime.env, **SERVICE_ENV, **env}
    app = await build(runtime)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    session = aiohttp.ClientSession(base_url=str(server.make_url("/")))
    try:
        yield Service(server, session)
    finally:
        await session.close()
        await server.close()


@pytest.fixture
async def service(runtime: Runtime) -> AsyncIterator[Service]:
    async with start_service(runtime) as running:
        yield running
