"""cairn never stops, destroys or migrates a VM it did not create, as a user meets it over HTTP
against the simulated cluster: another client taking the reserved id, a VM replaced behind
cairn's back, a restart in the middle of an install, and VMs from before cairn marked its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pvesim.cluster import SimCluster

from actors.vm.cli.transport import LocalTransport
from actors.vm.events import Installed, TaskEnded, TaskStarted
from events.store import EventStore, default_store_url
from tests.conftest import wait_for
from tests.vm import drivers
from tests.vm.conftest import Service, half_built_step, read_sse

# Every test here runs with both drivers (tests/vm/drivers.py).
driver = drivers.driver
start_service = drivers.start_service


# qm subcommands that change a VM (everything but config, status, list).
CHANGING = {"start", "stop", "shutdown", "reboot", "destroy", "migrate", "set", "resize",
            "importdisk", "disk import", "disk resize"}  # fmt: skip


def files_of(sim: SimCluster, vmid: int, node: str) -> tuple[bytes, dict[str, Any]]:
    """The VM's config file, byte for byte, and its volumes on the node."""
    record = (sim.root / "nodes" / node / "qemu-server" / f"{vmid}.json").read_bytes()
    volumes = json.loads((sim.root / "nodes" / node / "volumes.json").read_text())
    mine = {f"{s}:{n}": v for s, pool in volumes.items() for n, v in pool.items()
            if n.startswith(f"vm-{vmid}-")}  # fmt: skip
    return record, mine


def touching(sim: SimCluster, vmid: int) -> list[str]:
    """Every command that could change VM `vmid`, run on any node."""
    found = []
    for line in sim.commands():
        words = line.split()[1:]
        if words[:1] != ["qm"]:
            continue
        sub = words[1:3] if words[1:2] == ["disk"] else words[1:2]
        if " ".join(sub) in CHANGING and words[1 + len(sub) : 2 + len(sub)] == [str(vmid)]:
            found.append(line)
    return found


async def holdings(service: Service) -> list[int]:
    """The ids the allocator holds, read back from its stored events."""
    store = await EventStore.open(default_store_url(Path(service.env["CAIRN_DATA"])))
    try:
        held: set[int] = set()
        for r in await store.read_stream("vmalloc:cluster"):
            if r.event.type_name == "vmalloc.reserved":
                held.add(r.event.vmid)  # type: ignore[attr-defined]
            elif r.event.type_name == "vmalloc.released":
                held.discard(r.event.vmid)  # type: ignore[attr-defined]
        return sorted(held)
    finally:
        await store.close()


# How each path's command words the taken id: `qm create` (the import) and `qm clone` (from a
# template) die with different punctuation in qemu-server.
RACED = {
    "0": "qm create failed: unable to create VM 150 - VM 150",
    "1": "qm clone failed: unable to create VM 150: VM 150",
}


@pytest.mark.parametrize("templates", sorted(RACED))
async def test_another_vm_taking_the_reserved_id_is_left_untouched(
    start_service: Any, templates: str
) -> None:
    """A GUI "Create VM" between cairn's reservation and its `qm create` (or `qm clone` of the
    template) gets the same id (`/cluster/nextid` knows nothing of cairn's reservations). The
    install fails cleanly naming the other VM, which keeps its config and disks byte for byte;
    the id and IP go back."""
    service: Service = await start_service(
        ASSIGN_IP_START="150", ASSIGN_IP_END="151", VM_TEMPLATES=templates
    )
    sim = service.sim
    sim.inject_id_race(150, node="pve2", running=True)
    sse = await service.install()
    assert sse.closed and sse.last["status"] == "error", sse.records[-3:]
    assert sse.last["step"] == "VM creation > creating VM"
    assert sse.last["message"].startswith(
        f"[-] {RACED[templates]} already exists on node 'pve2'. Another client created VM 150 "
        "on node pve2 after cairn reserved the id; cairn left it untouched and released the id: "
        "install again to get another ("
    ), sse.last["message"]
    assert not any("removing VM" in r["message"] for r in sse.records)
    other = sim.vm(150)
    assert other is not None and (other.node, other.status) == ("pve2", "running")
    before = files_of(sim, 150, "pve2")
    assert before[1] == {"local-lvm:vm-150-disk-0": before[1]["local-lvm:vm-150-disk-0"]}

    # No id or IP leaks: the allocator gave 150 back, the next install gets 151 and its IP.
    assert await holdings(service) == []
    nxt = await service.install()
    assert nxt.last["status"] == "success" and (nxt.last["vm_id"], nxt.last["ip"]) == (
        151, "127.0.0.151",
    ), nxt.records[-2:]  # fmt: skip
    assert await holdings(service) == [151]
    full = await service.install()  # 150 is the other VM's now
    assert full.last["message"].startswith("[-] no free VMID in 150-151")

    # What cairn then knows of 150 (listed, not its own) never leads it to touch it.
    async def adopted() -> bool | None:
        return await service.get("/vm/150/status") == (200, "running") or None

    await wait_for(adopted, timeout=10, what="VM 150 listed as someone else's")
    listed = next(r for r in (await service.list())["list"] if r["vmid"] == 150)
    assert listed["created_by_cairn"] is False
    assert await service.post("/vm/150/destroy") == (
        409, "VM 150 was not created by cairn; cairn does not destroy it (do that in Proxmox if "
        "you mean it)",
    )  # fmt: skip
    assert files_of(sim, 150, "pve2") == before
    assert touching(sim, 150) == []
    assert sim.vm(150) is not None and sim.vm(150).status == "running"  # type: ignore[union-attr]


async def test_a_vm_replaced_behind_cairns_back_is_not_destroyed_or_migrated(
    service: Service,
) -> None:
    sim = service.sim
    sse = await service.install(id=160)
    assert sse.last["status"] == "success", sse.records[-2:]
    assert await service.post("/vm/160/stop") == (200, "ok")
    # Someone destroys cairn's VM in Proxmox and makes another with the same id, before
    # cairn's next look at the cluster.
    qm = LocalTransport(sim.env())
    assert (await qm.run(["qm", "destroy", "160", "--purge"])).ok
    sim.add_gui_vm(160, "pve1", name="payroll")
    before = files_of(sim, 160, "pve1")
    commands = len(sim.commands())

    moved = await service.post_sse("/vm/160/set/node", {"node": "pve2"})
    assert moved.closed and moved.last["status"] == "error"
    assert moved.last["message"].startswith(
        "[-] VM 160 (payroll) on node pve1 does not carry cairn's mark ('created by cairn, "
        "install task "
    )
    assert "it is not the VM cairn created, so cairn leaves it untouched" in moved.last["message"]
    # From then on cairn knows it is not its VM: refused before anything runs.
    assert await service.post("/vm/160/destroy") == (
        409, "VM 160 was not created by cairn; cairn does not destroy it (do that in Proxmox if "
        "you mean it)",
    )  # fmt: skip
    row = next(r for r in (await service.list())["list"] if r["vmid"] == 160)
    assert row["created_by_cairn"] is False
    assert files_of(sim, 160, "pve1") == before
    assert touching(sim, 160)[-1] == "pve1 qm destroy 160 --purge"  # the outside one only
    assert all(c.split(" ", 1)[1].startswith(("qm config", "pvesh", "qm status"))
               for c in sim.commands()[commands:])  # fmt: skip


async def test_destroy_checks_the_mark_of_its_own_install(service: Service) -> None:
    sse = await service.install(id=161)
    vm = service.sim.vm(161)
    assert vm is not None
    task = sse.headers["X-Task-Id"]
    # The mark cairn wrote at create (the description shows percent-encoded in qm config).
    # A linked clone's notes also name the template its disk depends on.
    assert vm.config["description"] == (
        f"created by cairn, install task {task}\ncairn linked clone of template 9000\n"
    )
    assert await service.post("/vm/161/stop") == (200, "ok")
    assert await service.post("/vm/161/destroy") == (200, "ok")
    assert service.sim.vm(161) is None
    config_reads = [c for c in service.sim.commands() if c.startswith("pve1 qm config 161")]
    assert config_reads, "destroy did not look at the VM before destroying it"


async def test_a_restart_leaves_a_vm_that_replaced_the_half_built_one(
    start_service: Any,
    driver: str,
) -> None:
    service: Service = await start_service()
    step = half_built_step(driver)
    await service.install_until(142, step, then=start_service.stop_last)  # dies mid-install
    sim = service.sim
    qm = LocalTransport(sim.env())
    # The admin removes the half-built VM. It is stopped first: the service stops in the same
    # event loop as the install, which a loaded machine can let start the VM meanwhile.
    assert (await qm.run(["qm", "stop", "142", "--skiplock"])).ok
    assert (await qm.run(["qm", "destroy", "142", "--purge", "--skiplock"])).ok
    sim.add_gui_vm(142, "pve1", running=True)
    before = files_of(sim, 142, "pve1")

    again: Service = await start_service()

    async def settled() -> dict[str, Any] | None:
        async with again.session.get(f"{again.api}/vm/142/task") as r:
            got = await read_sse(r)
        return got.last if got.last["status"] == "error" else None

    last = await wait_for(settled, timeout=30, what="the interrupted install to be settled")
    assert "interrupted by a restart" in last["message"]
    assert "does not carry cairn's mark" in last["message"]
    assert files_of(sim, 142, "pve1") == before
    assert sim.vm(142) is not None and sim.vm(142).status == "running"  # type: ignore[union-attr]


async def test_vms_installed_before_marks_are_cairns_by_its_event_log(
    sim: SimCluster, start_service: Any, tmp_path: Path
) -> None:
    """An `Installed` event stored before cairn marked its VMs (no `marked`) is the proof:
    destroy works on it, unless the VM carries another install's mark."""
    qm = LocalTransport(sim.env())
    for vmid, description in ((170, None), (171, "created by cairn, install task 00ff")):
        argv = ["qm", "create", str(vmid), "--name", f"old-{vmid}", "--tags", "debian"]
        if description:
            argv += ["--description", description]
        assert (await qm.run(argv)).ok
    store = await EventStore.open(default_store_url(tmp_path / "data"))
    for vmid in (170, 171):
        await store.append(f"vm:{vmid}", 0, [
            TaskStarted("legacy", "install", "installing"),
            Installed("legacy", "pve1", f"old-{vmid}", "debian", "12", "debian",
                      f"127.0.0.{vmid}", 1, 512, 16),
            TaskEnded("legacy", True, "stopped"),
        ])  # fmt: skip
    await store.close()

    service: Service = await start_service()
    assert await service.post("/vm/170/destroy") == (200, "ok")
    assert sim.vm(170) is None
    status, text = await service.post("/vm/171/destroy")
    assert status == 500 and "carries the mark of another cairn install (00ff)" in text
    assert sim.vm(171) is not None
