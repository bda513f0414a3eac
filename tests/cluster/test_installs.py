"""Installs through any gateway of a three-host cluster: one VMID each, never two alike."""

from __future__ import annotations

import asyncio

import pytest

from tests.cluster.conftest import Cluster, dump, outcome
from tests.vm.drivers import DRIVERS

# With both drivers (issue 27): the hosts drive the simulated Proxmox through its CLI or its API.
pytestmark = pytest.mark.parametrize("pve_driver", DRIVERS, indirect=True)


async def test_thirty_installs_over_three_gateways_get_thirty_distinct_ids(
    cluster: Cluster,
) -> None:
    hosts = cluster.hosts
    results = await asyncio.gather(*(hosts[i % len(hosts)].install() for i in range(30)))
    failed = [outcome(r) for r in results if outcome(r).get("status") != "success"]
    assert not failed, f"{failed}\n{dump(cluster)}"
    ids = [int(r.last["vm_id"]) for r in results]
    assert len(set(ids)) == 30, ids
    ips = [r.last["ip"] for r in results]
    assert len(set(ips)) == 30, ips
    # Proxmox holds exactly those VMs and the one template they were cloned from (built once,
    # though thirty installs asked at once), and every gateway lists the VMs.
    assert set(cluster.vms()) == {*ids, 9000}
    for host in hosts:
        async with host.session.get(host.api + "/vm/list") as resp:
            listed = {vm["vmid"] for vm in (await resp.json())["list"]}
        assert listed == set(ids), host.name
