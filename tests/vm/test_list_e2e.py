"""The cluster-wide list, concurrency of installs, and VMs cairn did not create."""

from __future__ import annotations

import asyncio
from typing import Any

from actors.vm.cli.transport import LocalTransport
from tests.vm import drivers
from tests.vm.conftest import Service
from tests.vm.helpers import until

# Every test here runs with both drivers (tests/vm/drivers.py).
driver = drivers.driver
start_service = drivers.start_service

VM_FIELDS = {"vmid", "name", "os", "running", "node", "cpu", "disk", "memory", "memory_used"}
NODE_FIELDS = {
    "node", "max_cpu", "max_memory", "cpu", "memory", "memory_used", "disk", "running",
    "running_vms", "online",
}  # fmt: skip


async def test_twenty_concurrent_installs_get_distinct_ids_and_ips(service: Service) -> None:
    results = await asyncio.gather(*(service.install() for _ in range(20)))
    assert all(r.closed and r.last["status"] == "success" for r in results), [
        r.records[-1] for r in results if r.last["status"] != "success"
    ]
    ids = sorted(r.last["vm_id"] for r in results)
    assert ids == list(range(100, 120))
    assert len({r.last["ip"] for r in results}) == 20
    listing = await service.list()
    assert listing["count"] == 20 and len(listing["list"]) == 20
    assert all(set(row) >= VM_FIELDS for row in listing["list"])
    assert all(row["running"] for row in listing["list"])
    nodes = {n["node"]: n for n in listing["cluster"]}
    assert set(nodes) == {"pve1", "pve2", "pve3"}
    assert all(set(n) >= NODE_FIELDS for n in nodes.values())
    # `running` is the node's online state, as in the original; the count is `running_vms`.
    assert (nodes["pve1"]["running_vms"], nodes["pve1"]["cpu"], nodes["pve1"]["memory"]) == (
        20, 40, 20 * 2048,
    )  # fmt: skip
    assert all(n["running"] is True and n["online"] is True for n in nodes.values())
    assert all(row["created_by_cairn"] is True for row in listing["list"])
    assert listing["simulated"] is True
    assert nodes["pve1"]["max_cpu"] == 16 and nodes["pve1"]["max_memory"] == 64 * 1024


async def test_a_vm_the_cluster_still_reports_as_unknown_lists_fine(start_service: Any) -> None:
    service: Service = await start_service(VM_POLL_INTERVAL="0.1")
    service.sim.set_statd_lag(3600)  # pvestatd has not seen the new VM yet
    sse = await service.install(name="fresh", cpu=3, ram=1024, disk="20G")
    vmid = sse.last["vm_id"]
    listing = await service.list()
    row = next(r for r in listing["list"] if r["vmid"] == vmid)
    assert {k: row[k] for k in ("name", "os", "running", "node", "cpu", "memory", "disk")} == {
        "name": "fresh", "os": "debian", "running": True, "node": "pve1",
        "cpu": 3, "memory": 1024, "disk": 20,
    }  # fmt: skip


async def test_vms_made_outside_cairn_are_listed_but_never_destroyed_or_migrated(
    start_service: Any,
) -> None:
    service: Service = await start_service(VM_POLL_INTERVAL="0.1")
    qm = LocalTransport(service.sim.env())
    made = await qm.run(["qm", "create", "200", "--name", "outside", "--cores", "1"])
    assert made.ok, made

    async def listed() -> dict[str, Any] | None:
        # A poll that ran while `qm create` was at work saw its nameless placeholder ("VM
        # 200"); the row is the finished VM's from the next poll on.
        rows = (await service.list())["list"]
        return next((r for r in rows if r["vmid"] == 200 and r["name"] == "outside"), None)

    row: dict[str, Any] = await until(listed, timeout=10, what="VM 200 in the list")
    assert (row["name"], row["node"], row["running"], row["cpu"]) == ("outside", "pve1", False, 1)

    async def adopted() -> bool | None:
        return await service.get("/vm/200/status") == (200, "stopped") or None

    await until(adopted, timeout=10, what="VM 200 adopted")
    row = next(r for r in (await service.list())["list"] if r["vmid"] == 200)
    assert row["created_by_cairn"] is False
    # Listed and powered on request, but never destroyed or migrated by cairn.
    before = service.sim.vm(200)
    assert await service.post("/vm/200/destroy") == (
        409,
        "VM 200 was not created by cairn; cairn does not destroy it (do that in Proxmox if "
        "you mean it)",
    )
    moved = await service.post_sse("/vm/200/set/node", {"node": "pve2"})
    assert (moved.status, moved.text) == (
        409,
        "VM 200 was not created by cairn; cairn does not migrate it (do that in Proxmox if "
        "you mean it)",
    )
    assert service.sim.vm(200) == before
    assert not any(c.startswith(("pve1 qm destroy 200", "pve1 qm migrate 200"))
                   for c in service.sim.commands())  # fmt: skip


async def test_changes_made_behind_cairns_back_are_picked_up(start_service: Any) -> None:
    service: Service = await start_service(VM_POLL_INTERVAL="0.1", VM_OBSERVE_GRACE="0")
    sse = await service.install()
    vmid = sse.last["vm_id"]
    qm = LocalTransport(service.sim.env())
    assert (await qm.run(["qm", "stop", str(vmid)])).ok  # e.g. the guest powered itself off

    async def stopped() -> bool | None:
        return await service.get(f"/vm/{vmid}/status") == (200, "stopped") or None

    await until(stopped, timeout=10, what="the stop to be noticed")
    assert (await qm.run(["qm", "destroy", str(vmid)])).ok

    async def gone() -> bool | None:
        return await service.get(f"/vm/{vmid}/status") == (404, f"VM {vmid} not found") or None

    await until(gone, timeout=10, what="the destroy to be noticed")
    again = await service.install()
    assert again.last["vm_id"] == vmid  # its id was released
