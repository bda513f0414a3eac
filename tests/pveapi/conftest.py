"""Fixtures and helpers of the API driver's tests: a simulated cluster without delays, a
client of its pveproxy, and the port through either adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pvesim.cluster import SimCluster

from actors.vm import pve
from actors.vm.cli.adapter import CliPve
from actors.vm.cli.transport import LocalTransport
from actors.vm.pveapi.adapter import RestPve
from actors.vm.pveapi.client import PveClient
from actors.vm.pveapi.wire import normalize_fingerprint, parse_token

ED25519_PUB = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH3HfEOVaQCnlCpuRJ50vo+/3c9oEJSjElKgwsbIcdQK root@vm"
)


def client_for(sim: SimCluster, token: str | None = None) -> PveClient:
    """cairn's client of the simulated pveproxy, its certificate pinned."""
    env = sim.api_env()
    return PveClient(
        env["PVE_API_URL"],
        parse_token(token or env["PVE_API_TOKEN"]),
        fingerprint=normalize_fingerprint(env["PVE_API_FINGERPRINT"]),
    )


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimCluster]:
    async with SimCluster(tmp_path / "pve", delay_scale=0, statd_lag=0) as cluster:
        yield cluster


@pytest.fixture
async def api(sim: SimCluster) -> AsyncIterator[PveClient]:
    client = client_for(sim)
    yield client
    await client.close()


@pytest.fixture(params=["api", "cli"])
async def port(request: pytest.FixtureRequest, sim: SimCluster) -> AsyncIterator[pve.Pve]:
    """The Proxmox port through each adapter, on the main node: what must read the same."""
    adapter: pve.Pve
    if request.param == "api":
        adapter = RestPve(client_for(sim), "pve1")
    else:
        adapter = CliPve({"pve1": LocalTransport(sim.env())}, "pve1")
    yield adapter
    await adapter.close()
