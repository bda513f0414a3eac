"""Helpers of the API driver's tests: a client for a simulated cluster's pveproxy."""

from __future__ import annotations

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
