"""Snapshots through both adapters of the port against the simulator: take, list, roll back,
delete, and Proxmox's refusals (name, storage, lock, unknown snapshot) in the port's kinds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pvesim.cluster import SimCluster

from actors.vm import pve
from actors.vm.cli.adapter import CliPve
from actors.vm.cli.transport import LocalTransport
from actors.vm.pveapi.adapter import RestPve
from tests.conftest import wait_for
from tests.pveapi.conftest import client_for


def names(snaps: list[pve.Snapshot]) -> list[tuple[str, str | None]]:
    return [(s.name, s.parent) for s in snaps]


async def test_take_list_roll_back_and_delete(sim: SimCluster, port: pve.Pve) -> None:
    sim.add_gui_vm(150, "pve1")
    first = await port.vm_config("pve1", 150)
    assert await port.snapshots("pve1", 150) == []
    await port.snapshot("pve1", 150, "before", description="before the upgrade", vmstate=True)
    await port.set_config("pve1", 150, {"memory": "4096", "cores": "4"})
    await port.snapshot("pve1", 150, "after")
    snaps = await port.snapshots("pve1", 150)
    assert names(snaps) == [("before", None), ("after", "before")]
    before = snaps[0]
    assert before.description == "before the upgrade" and before.snaptime
    assert before.vmstate is False  # the VM is stopped: Proxmox saves no RAM, says nothing
    assert (await port.vm_config("pve1", 150)).parent == "after"

    await port.rollback("pve1", 150, "before")
    config = await port.vm_config("pve1", 150)
    assert (config.get("memory"), config.get("cores")) == (first.get("memory"), first.get("cores"))
    assert config.parent == "before" and first.get("cores") != "4"
    assert (await port.vm_status("pve1", 150)).status == "stopped"

    await port.delete_snapshot("pve1", 150, "before")  # the parent chain does not block it
    assert names(await port.snapshots("pve1", 150)) == [("after", None)]
    assert (await port.vm_config("pve1", 150)).parent is None
    with pytest.raises(pve.NotFound, match="snapshot 'before' does not exist"):
        await port.rollback("pve1", 150, "before")
    with pytest.raises(pve.NotFound, match="snapshot 'gone' does not exist"):
        await port.delete_snapshot("pve1", 150, "gone")


async def test_a_running_vm_keeps_its_ram_and_a_rollback_resumes_it(
    sim: SimCluster, port: pve.Pve
) -> None:
    sim.add_gui_vm(151, "pve1", running=True)
    await port.snapshot("pve1", 151, "live", vmstate=True)
    await port.snapshot("pve1", 151, "disk_only")
    snaps = {s.name: s for s in await port.snapshots("pve1", 151)}
    assert (snaps["live"].vmstate, snaps["disk_only"].vmstate) == (True, False)
    await port.rollback("pve1", 151, "disk_only")  # stops the VM; no RAM to resume
    assert (await port.vm_status("pve1", 151)).status == "stopped"
    await port.rollback("pve1", 151, "live")
    assert (await port.vm_status("pve1", 151)).status == "running"
    await port.rollback("pve1", 151, "disk_only", start=True)
    assert (await port.vm_status("pve1", 151)).status == "running"


async def test_refusals_in_proxmox_words(sim: SimCluster, port: pve.Pve) -> None:
    sim.add_gui_vm(152, "pve1")
    for bad in ("1st", "a", "has space", "x" * 41):
        with pytest.raises(pve.PveError, match="snapname: ") as caught:
            await port.snapshot("pve1", 152, bad)
        if port.driver == "api":
            assert isinstance(caught.value, pve.Refused)  # a 400, before any task
    with pytest.raises(pve.PveError, match=r"unable to use snapshot name 'current' \(reserved"):
        await port.snapshot("pve1", 152, "current")
    await port.snapshot("pve1", 152, "one")
    with pytest.raises(pve.TaskFailed, match="snapshot name 'one' already used"):
        await port.snapshot("pve1", 152, "one")
    with pytest.raises(pve.NotFound):
        await port.snapshot("pve1", 999, "one")

    sim.add_storage("files", "dir")
    with sim.store.locked() as txn:
        rec = txn.vm_on("pve1", 152)
        assert rec is not None
        rec["config"]["scsi1"] = "files:152/vm-152-disk-1.raw,size=4G"
        txn.save_vm("pve1", rec)
    with pytest.raises(pve.TaskFailed, match="snapshot feature is not available"):
        await port.snapshot("pve1", 152, "two")
    assert sim.vm(152).lock is None  # type: ignore[union-attr]
    types = {"local-lvm": "lvmthin", "files": "dir"}
    refusal = pve.snapshot_refusal(await port.vm_config("pve1", 152), types)
    assert refusal == (
        "disk scsi1 is on dir storage 'files' in raw format, which cannot take snapshots"
    )


async def test_a_killed_snapshot_task_leaves_its_lock(sim: SimCluster) -> None:
    rest = RestPve(client_for(sim), "pve1")
    try:
        sim.add_gui_vm(153, "pve1")
        sim.set_delay_scale(5)
        running = asyncio.create_task(rest.snapshot("pve1", 153, "slow"))
        await wait_for(lambda: sim.vm(153).lock == "snapshot", what="the snapshot lock")  # type: ignore[union-attr]
        assert sim.kill_tasks(153)
        with pytest.raises(pve.PveError):
            await running
        sim.set_delay_scale(0)
        with pytest.raises(pve.Locked, match=r"VM is locked \(snapshot\)"):
            await rest.snapshot("pve1", 153, "again")
        # Proxmox looks at the half-made snapshot before the lock, as on a real node.
        with pytest.raises(pve.TaskFailed, match=r"incomplete snapshot \(snapstate = prepare\)"):
            await rest.rollback("pve1", 153, "slow")
    finally:
        await rest.close()


async def test_zfs_rolls_back_only_to_the_newest_snapshot(tmp_path: Path) -> None:
    async with SimCluster(tmp_path / "pve", delay_scale=0, storage_layout="zfs") as sim:
        port = CliPve({"pve1": LocalTransport(sim.env())}, "pve1")
        sim.add_gui_vm(154, "pve1")
        await port.snapshot("pve1", 154, "first")
        await port.snapshot("pve1", 154, "second")
        with pytest.raises(pve.TaskFailed, match="'first' is not most recent snapshot"):
            await port.rollback("pve1", 154, "first")
        await port.rollback("pve1", 154, "second")


async def test_qm_listsnapshot_prints_the_tree(sim: SimCluster) -> None:
    sim.add_gui_vm(155, "pve1")
    port = CliPve({"pve1": LocalTransport(sim.env())}, "pve1")
    await port.snapshot("pve1", 155, "base", description="first line\nsecond")
    await port.snapshot("pve1", 155, "next")
    result = await port.run("pve1", ["qm", "listsnapshot", "155"])
    lines = result.stdout.splitlines()
    assert [ln.split()[:2] for ln in lines] == [["`->", n] for n in ("base", "next", "current")]
    assert lines[0].endswith(" first line") and lines[2].endswith("You are here!")
    assert lines[1].startswith(" `-> next") and lines[2].startswith("  `-> current")
