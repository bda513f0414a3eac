"""A storage's status through both adapters of the port against the simulator: the same typed
answer, Proxmox's `shared` flag included (which the CLI reads with pvesh: `pvesm status` does
not print it), and an unknown storage as the port's NotFound."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pvesim.cluster import SimCluster

from actors.vm import pve
from actors.vm.cli.adapter import CliPve
from actors.vm.cli.transport import LocalTransport
from actors.vm.pveapi.adapter import RestPve
from tests.pveapi.conftest import client_for


@pytest.fixture(params=["api", "cli"])
async def port(request: pytest.FixtureRequest, sim: SimCluster) -> AsyncIterator[pve.Pve]:
    adapter: pve.Pve
    if request.param == "api":
        adapter = RestPve(client_for(sim), "pve1")
    else:
        adapter = CliPve({"pve1": LocalTransport(sim.env())}, "pve1")
    yield adapter
    await adapter.close()


async def test_the_shared_flag_is_proxmoxs_not_the_types(sim: SimCluster, port: pve.Pve) -> None:
    sim.add_storage("san", "lvm", content="images", shared=True)  # `pvesm set san --shared 1`
    sim.add_storage("nas", "nfs", content="images")  # pve-storage forces it for nfs
    sim.add_storage("files", "dir", content="images")
    for name in ("san", "nas", "files"):
        sim.grant_api(f"/storage/{name}", ["Datastore.Audit"])
    san = await port.storage_status("pve1", "san")
    assert (san.type, san.content, san.usable, san.shared) == ("lvm", ("images",), True, True)
    assert san.total == 832888832 * 1024 and san.avail == san.total
    assert (await port.storage_status("pve1", "nas")).shared is True
    assert (await port.storage_status("pve1", "files")).shared is False
    lvm = await port.storage_status("pve1", "local-lvm")
    assert (lvm.type, lvm.content, lvm.shared) == ("lvmthin", ("images", "rootdir"), False)


async def test_an_unknown_storage_is_not_found(sim: SimCluster, port: pve.Pve) -> None:
    sim.grant_api("/storage/nosuch", ["Datastore.Audit"])  # else the token's 403 comes first
    with pytest.raises(pve.NotFound) as caught:
        await port.storage_status("pve1", "nosuch")
    assert "No such storage" in caught.value.text
