"""Install over HTTP against the simulated cluster, for each OS family."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pvesim.cluster import SimCluster

from actors.vm import stages
from tests.vm import drivers
from tests.vm.conftest import Service

# Every test here runs with both drivers (tests/vm/drivers.py).
driver = drivers.driver
start_service = drivers.start_service


# No node is asked for, so the VM is not migrated.
STAGES = [step for step in stages.INSTALL if step != stages.MIGRATE]
MESSAGE = re.compile(r"^\[[*+]\] .+ \(\d+\.\d\ds\)$")


@pytest.mark.parametrize(("os_name", "version", "user"), [
    ("debian", "12", "debian"), ("ubuntu", "24.04", "ubuntu"), ("rockylinux", "9", "rocky"),
])  # fmt: skip
async def test_install_streams_every_stage_and_leaves_a_running_vm(
    service: Service, os_name: str, version: str, user: str
) -> None:
    sse = await service.install(os=os_name, version=version)
    assert sse.status == 200 and sse.closed, sse
    assert sse.steps == STAGES, sse.records[-3:]
    assert all(r["status"] in ("processing", "success") for r in sse.records)
    bad = [r for r in sse.records if not MESSAGE.match(r["message"])]
    assert bad == []
    vmid = sse.last["vm_id"]
    ip = f"127.0.0.{vmid}"
    assert sse.last == {
        "step": "VM initialization > finalizing",
        "status": "success",
        "message": sse.last["message"],
        "vm_id": vmid,
        "ip": ip,
    }
    tail = [r["message"] for r in sse.records[-5:]]
    assert tail[0].startswith("[+] VM installation completed in ")
    assert tail[1].startswith(f"[*] VMID: {vmid} (")
    assert tail[2].startswith(f"[*] IP: {ip} (")
    # No passwd in the request: the generated one, shown once, before the final record.
    assert tail[3].startswith("[*] Password: ")
    assert tail[4].startswith(f"[*] User: {user} (")
    vm = service.sim.vm(vmid)
    assert vm is not None and vm.status == "running" and vm.node == "pve1"
    assert vm.config["ciuser"] == user
    assert vm.config["ipconfig0"] == f"ip={ip}/24,gw=127.0.0.1"
    assert vm.config["tags"] == os_name
    status, body = await service.get(f"/vm/{vmid}/status")
    assert (status, body) == (200, "running")
    runs = service.sim.guest_runs(vmid)
    assert any("bash -s" in run.command for run in runs)


async def test_install_on_dir_storage_attaches_the_imported_file(
    sim: SimCluster, start_service: Any
) -> None:
    sim.add_storage("vmfiles", "dir")  # a directory storage for VM disks
    sim.grant_api("/storage/vmfiles", ["Datastore.AllocateSpace", "Datastore.Audit"])
    # The imported file itself (a clone's disk is an overlay of the template's).
    service: Service = await start_service(ASSIGN_STORAGE="vmfiles", VM_TEMPLATES="0")
    sse = await service.install()
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    vm = service.sim.vm(sse.last["vm_id"])
    assert vm is not None and vm.status == "running"
    assert vm.config["scsi0"].startswith(f"vmfiles:{vm.vmid}/vm-{vm.vmid}-disk-0.raw")
    assert vm.config["boot"] == "order=scsi0"
