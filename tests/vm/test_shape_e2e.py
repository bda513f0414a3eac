"""Guests shaped by the caller, end to end with both drivers: what the simulated node's VM
config holds, the first-boot script's output and failure, and every bad field refused before
anything is built."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pvesim.cluster import SimCluster

from tests.vm import drivers
from tests.vm.conftest import Service

driver = drivers.driver
start_service = drivers.start_service

STAGE = "VM initialization > SSH initialization"


def clean(sim: SimCluster, vmid: int) -> bool:
    return sim.vm(vmid) is None and not any(
        f"vm-{vmid}-" in v for node in ("pve1", "pve2", "pve3") for v in sim.volumes(node)
    )


async def test_the_vm_config_holds_every_field_asked_for(
    sim: SimCluster, start_service: Any
) -> None:
    sim.add_bridge("vmbr1", mtu=9000)
    sim.grant_api("/sdn/zones/localnetwork/vmbr1", ["SDN.Use"])  # the token's, for a new bridge
    service: Service = await start_service()
    sse = await service.install(
        id=130, bridge="vmbr1", vlan=20, mtu=9000, nameserver="10.0.0.53 2001:db8::53",
        searchdomain="example.org lab.example.org", tags=["web", "prod"],
        description="nginx front\nowner: ops", disks=[{"size": "32G", "storage": "local-lvm"}],
    )  # fmt: skip
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    vm = sim.vm(130)
    assert vm is not None and vm.status == "running"
    net0 = str(vm.config["net0"])
    assert net0.startswith("virtio=") and net0.endswith(",bridge=vmbr1,tag=20,mtu=9000")
    # A new volume of its own (numbered by whichever disk was allocated first).
    assert re.fullmatch(r"local-lvm:vm-130-disk-[01],size=32G", str(vm.config["scsi1"]))
    assert vm.config["scsi1"] != vm.config["scsi0"]
    assert vm.config["nameserver"] == "10.0.0.53 2001:db8::53"
    assert vm.config["searchdomain"] == "example.org lab.example.org"
    assert vm.config["tags"] == "debian;web;prod"
    description = str(vm.config["description"])
    assert description.startswith("nginx front\nowner: ops\ncreated by cairn, install task ")
    # Still cairn's: destroy checks the mark under the notes.
    assert await service.post("/vm/130/stop") == (200, "ok")
    assert await service.post("/vm/130/destroy") == (200, "ok")
    assert clean(sim, 130)


async def test_omitted_fields_leave_the_vm_as_before(sim: SimCluster, start_service: Any) -> None:
    service: Service = await start_service()
    await service.installed(id=131)
    vm = sim.vm(131)
    assert vm is not None
    assert str(vm.config["net0"]).endswith(",bridge=vmbr0")
    assert vm.config["tags"] == "debian"
    assert "scsi1" not in vm.config and "nameserver" not in vm.config
    assert str(vm.config["description"]).startswith("created by cairn, install task ")
