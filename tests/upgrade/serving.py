"""cairn's VM, functions, search and images services over real HTTP on one data directory,
as ``cairn serve vm functions search images`` runs them with the layout of the systemd unit
(ops/deploy/systemd/cairn.service: the search registry, indexes and inbox under ``$CAIRN_DATA``): a
real nats-server, the event store in ``$CAIRN_DATA``, the simulated Proxmox cluster kept under
``$CAIRN_DATA/pvesim`` and a loopback image mirror. The fixture's generator and the upgrade
test both start it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
from aiohttp.test_utils import TestServer
from pvesim.cluster import SimCluster

from actors.platform import open_runtime
from actors.vm.fakemirror import serve_mirror
from events.nats_server import EmbeddedNats
from gateway import server as root
from gateway.server import journal
from gateway.services import build_app

SERVICES = ("vm", "functions", "search", "images")

# Small, so the generated fixture stays small and a run ends fast.
SETTINGS = {
    "VM_SSH_POLL": "0.02",
    "VM_SSH_WAIT": "10",
    "VM_POLL_INTERVAL": "30",
    "VM_CPU_TYPE": "x86-64-v2-AES",
    "RUN_TIMEOUT": "5",
    "RUN_MEMORY_MB": "128",
    "RUN_CONCURRENCY": "2",
    "EMBEDDING_PROVIDER": "none",
}


@attrs.frozen
class Served:
    urls: dict[str, str]  # service name -> base URL
    http: aiohttp.ClientSession
    sim: SimCluster

    async def install(self, **body: Any) -> int:
        """A Debian 12 VM (unless `body` says otherwise) installed to its end; its id."""
        url = self.urls["vm"] + "/api/vm/install"
        last: dict[str, Any] = {}
        async with self.http.post(url, json={"os": "debian", "version": "12", **body}) as resp:
            assert resp.status == 200, await resp.text()
            async for raw in resp.content:
                line = raw.decode().strip()
                if line.startswith("data: {") and '"status"' in line:
                    last = json.loads(line[6:])
        assert last.get("status") == "success", last
        return int(last["vm_id"])


@contextlib.asynccontextmanager
async def serving(data: Path, work: Path) -> AsyncIterator[Served]:
    """The services on ``data`` (``CAIRN_DATA``); the nats-server's store in ``work``, which
    a fixture does not keep (JetStream is a live feed; the event store is the record)."""
    async with contextlib.AsyncExitStack() as stack:
        nats = EmbeddedNats(work / "nats")
        await nats.start()
        stack.push_async_callback(nats.stop)
        sim = await stack.enter_async_context(SimCluster(data / "pvesim", delay_scale=0))
        mirror = await stack.enter_async_context(serve_mirror())
        env = {
            **sim.env(),
            **nats.client_env(),
            **SETTINGS,
            "CAIRN_DATA": str(data),
            "IMAGE_BASE_URL": mirror.base_url,
            "XDG_CONFIG_HOME": str(data / "config"),
            "XDG_CACHE_HOME": str(data / "cache"),
            "SEARCH_INBOX": str(data / "inbox"),
            "HOME": str(data),
        }
        runtime = await stack.enter_async_context(open_runtime(env, data, journal=journal()))
        urls: dict[str, str] = {}
        for name in SERVICES:
            app = await build_app(root.load(name), runtime)
            server = TestServer(app, host="127.0.0.1")
            await server.start_server()
            stack.push_async_callback(server.close)
            urls[name] = str(server.make_url("")).rstrip("/")
        http = await stack.enter_async_context(
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        )
        yield Served(urls, http, sim)
