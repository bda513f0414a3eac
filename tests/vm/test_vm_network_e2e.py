"""VM_BRIDGE and VM_NETMASK reach Proxmox with either driver; a bridge the node lacks fails the
install where Proxmox fails it (`qm start`), and the VM is removed."""

from __future__ import annotations

from typing import Any

from tests.vm import drivers
from tests.vm.conftest import Service
from tests.vm.test_failures_e2e import assert_clean

driver = drivers.driver
start_service = drivers.start_service


async def test_the_bridge_and_the_mask_are_what_the_vm_gets(start_service: Any) -> None:
    service: Service = await start_service(VM_BRIDGE="vmbr1", VM_NETMASK="255.255.0.0")
    service.sim.add_bridge("vmbr1")
    service.sim.grant_api("/sdn/zones/localnetwork/vmbr1", ["SDN.Use"])
    sse = await service.install(id=150)
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    assigned = [r["message"] for r in sse.records if r["step"] == "preparation > assigning IP"]
    assert assigned[-1].startswith("[+] assigned IP: 127.0.0.150/16 (")
    vm = service.sim.vm(150)
    assert vm is not None and vm.status == "running"
    assert vm.config["net0"].endswith(",bridge=vmbr1")
    assert vm.config["ipconfig0"] == "ip=127.0.0.150/16,gw=127.0.0.1"


async def test_a_bridge_the_node_lacks_fails_at_start_and_leaves_nothing(
    start_service: Any,
) -> None:
    service: Service = await start_service(VM_BRIDGE="vmbr9")
    service.sim.grant_api("/sdn/zones/localnetwork/vmbr9", ["SDN.Use"])
    sse = await service.install(id=151)
    assert sse.closed and sse.last["status"] == "error", sse.records[-3:]
    assert sse.last["step"] == "VM initialization > waiting for ready"
    assert "qm start failed" in sse.last["message"]
    assert "start failed: QEMU exited with code 1" in sse.last["message"]
    assert (
        "bridge 'vmbr9' does not exist on node pve1; set VM_BRIDGE to a bridge every node has"
        in sse.last["message"]
    )
    assert_clean(service, 151)
