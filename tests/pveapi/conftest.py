"""Fixtures and helpers of the API driver's tests: a simulated cluster without delays, and a
client of its pveproxy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pvesim.cluster import SimCluster

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
