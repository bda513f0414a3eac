"""Snapshots over HTTP, with both drivers: take, list, roll back, delete; the refusals a user
reads (bad name 400, unknown snapshot 404, a storage without snapshots 409 before anything
changes, busy 409). Who may do what once tokens exist: tests/gateway/test_snapshot_roles.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pvesim.cluster import SimCluster

from tests.conftest import wait_for
from tests.vm import drivers
from tests.vm.conftest import Service, read_sse
from tests.vm.helpers import add_raw_disk

driver = drivers.driver
start_service = drivers.start_service

TAKE = "snapshot > taking snapshot"
ROLLBACK = "rollback > rolling back"


async def snapshots(service: Service, vmid: int, **kw: Any) -> list[dict[str, Any]]:
    status, text = await service.get(f"/vm/{vmid}/snapshots", **kw)
    assert status == 200, text
    listed: list[dict[str, Any]] = json.loads(text)
    return listed


async def delete(service: Service, path: str, **kw: Any) -> tuple[int, str]:
    async with service.session.delete(service.api + path, **kw) as resp:
        return resp.status, await resp.text()


async def test_take_list_roll_back_and_delete(sim: SimCluster, start_service: Any) -> None:
    service: Service = await start_service()
    vmid = await service.installed(id=120, ram=2048)
    assert await snapshots(service, vmid) == []

    sse = await service.post_sse(
        f"/vm/{vmid}/snapshots", {"name": "before", "description": "pre-upgrade"}
    )
    assert sse.status == 200 and sse.closed, sse.text
    assert sse.headers["X-VM-Id"] == str(vmid) and sse.steps == [TAKE]
    assert sse.last == {
        "step": TAKE,
        "status": "success",
        "message": sse.last["message"],
    } and sse.last["message"].startswith("[+] snapshot before taken (")
    [listed] = await snapshots(service, vmid)
    assert {k: v for k, v in listed.items() if k != "created"} == {
        "name": "before",
        "description": "pre-upgrade",
        "parent": None,
        "vmstate": False,
        "by": "ip:127.0.0.1",
    }
    assert listed["created"].endswith("+00:00")
    vm = sim.vm(vmid)
    assert vm is not None and vm.status == "running" and vm.lock is None

    # Changed after the snapshot, then rolled back: the memory is as before, the VM still runs.
    assert await service.post(f"/vm/{vmid}/stop") == (200, "ok")
    assert await service.post(f"/vm/{vmid}/set/memory", {"memory": 4096}) == (200, "ok")
    assert (await service.post_sse(f"/vm/{vmid}/start")).last["status"] == "success"
    sse = await service.post_sse(f"/vm/{vmid}/snapshots/before/rollback")
    assert sse.closed and sse.last["status"] == "success", sse.records
    assert sse.steps == [ROLLBACK, "rollback > waiting for ready"]
    assert any("back at snapshot before (running)" in r["message"] for r in sse.records)
    vm = sim.vm(vmid)
    assert vm is not None and str(vm.config["memory"]) == "2048" and vm.status == "running"
    assert await service.get(f"/vm/{vmid}/status") == (200, "running")

    # A snapshot with the RAM, then the first one deleted: the chain closes over it.
    sse = await service.post_sse(f"/vm/{vmid}/snapshots", {"name": "live", "vmstate": True})
    assert sse.last["status"] == "success", sse.records
    assert any("saving VM state and RAM" in r["message"] for r in sse.records)
    assert await delete(service, f"/vm/{vmid}/snapshots/before") == (200, "ok")
    [live] = await snapshots(service, vmid)
    assert (live["name"], live["parent"], live["vmstate"]) == ("live", None, True)

    # Who asked, in the task's events.
    _, text = await service.get(f"/vm/{vmid}")
    assert json.loads(text)["last_task"]["command"] == "snapshot/delete"


async def test_refusals(sim: SimCluster, start_service: Any) -> None:
    service: Service = await start_service()
    vmid = await service.installed(id=121)
    path = f"/vm/{vmid}/snapshots"
    bad_name = (
        "name: invalid snapshot name '1st': it must start with a letter and have at least 2 "
        "characters, letters, digits, '-' or '_'"
    )
    assert await service.post(path, {"name": "1st"}) == (400, bad_name)
    assert await service.post(path, {}) == (400, "name: is required")
    assert await service.post(path, {"name": "x" * 41}) == (
        400,
        f"name: invalid snapshot name '{'x' * 41}': at most 40 characters",
    )
    assert await service.post(path, {"name": "current"}) == (
        400,
        "name: invalid snapshot name 'current': the name is reserved by Proxmox",
    )
    assert await service.post(path, {"name": "ok1", "vmstate": "yes"}) == (
        400,
        "vmstate: must be true or false",
    )
    assert await service.post(path, {"name": "ok1", "description": "d" * 1025}) == (
        400,
        "description: at most 1024 characters",
    )
    assert await service.post(path, {"name": "ok1", "keep": 1}) == (
        400,
        "keep: unknown field; known: name, description, vmstate",
    )
    assert await service.post(path, ["name"]) == (400, "body: must be a JSON object")
    assert await service.post("/vm/999/snapshots", {"name": "ok1"}) == (404, "VM 999 not found")
    assert await service.get("/vm/999/snapshots") == (404, "VM 999 not found")
    assert await service.post(f"{path}/nope/rollback") == (
        404,
        f"VM {vmid} has no snapshot named 'nope'",
    )
    assert await delete(service, f"{path}/nope") == (404, f"VM {vmid} has no snapshot named 'nope'")
    assert await service.post(f"{path}/1x/rollback") == (
        400,
        "name: invalid snapshot name '1x': it must start with a letter and have at least 2 "
        "characters, letters, digits, '-' or '_'",
    )
    assert (await service.post_sse(path, {"name": "one"})).last["status"] == "success"
    assert await service.post(path, {"name": "one"}) == (
        409,
        f"VM {vmid} already has a snapshot named 'one'",
    )

    # A second disk on a directory storage in raw format: refused before anything changes.
    add_raw_disk(sim, vmid)
    before = [c for c in sim.commands() if " snapshot " in f" {c} "]
    assert await service.post(path, {"name": "two"}) == (
        409,
        f"VM {vmid} cannot take snapshots: disk scsi1 is on dir storage 'files' in raw format, "
        "which cannot take snapshots",
    )
    assert [c for c in sim.commands() if " snapshot " in f" {c} "] == before
    assert [s["name"] for s in await snapshots(service, vmid)] == ["one"]
    vm = sim.vm(vmid)
    assert vm is not None and vm.lock is None


async def test_one_task_at_a_time(sim: SimCluster, start_service: Any) -> None:
    service: Service = await start_service()
    vmid = await service.installed(id=122)
    sim.set_delay_scale(3)  # the snapshot holds its lock for about 3 s

    async def take() -> Any:
        return await service.post_sse(f"/vm/{vmid}/snapshots", {"name": "slow"})

    first = asyncio.create_task(take())
    # Under this delay every Proxmox call of the checks before it takes seconds too.
    await wait_for(
        lambda: sim.vm(vmid).lock == "snapshot",  # type: ignore[union-attr]
        timeout=60,
        what="the snapshot lock",
    )
    busy = f"VM {vmid} is busy: a task is running; follow it at /api/vm/{vmid}/task"
    assert await service.post(f"/vm/{vmid}/snapshots", {"name": "other"}) == (409, busy)
    assert await service.post(f"/vm/{vmid}/stop") == (409, busy)
    assert await service.get(f"/vm/{vmid}/status") == (200, "running")  # the power it had
    async with service.session.get(service.api + f"/vm/{vmid}/task") as resp:
        again = await read_sse(resp)  # re-attached: the same task, to its end
    assert again.last["status"] == "success" and again.steps == [TAKE]
    assert (await first).last["status"] == "success"


async def test_a_stopped_vm_gets_no_ram_and_stays_stopped(
    sim: SimCluster, start_service: Any
) -> None:
    service: Service = await start_service()
    vmid = await service.stopped(id=124)
    sse = await service.post_sse(f"/vm/{vmid}/snapshots", {"name": "cold", "vmstate": True})
    assert sse.last["status"] == "success", sse.records
    [cold] = await snapshots(service, vmid)
    assert cold["vmstate"] is False  # Proxmox saves no RAM of a stopped VM
    sse = await service.post_sse(f"/vm/{vmid}/snapshots/cold/rollback")
    assert sse.last["status"] == "success" and sse.steps == [ROLLBACK], sse.records
    assert await service.get(f"/vm/{vmid}/status") == (200, "stopped")


async def test_a_restart_mid_snapshot_settles_its_task(sim: SimCluster, start_service: Any) -> None:
    service: Service = await start_service()
    vmid = await service.installed(id=125)
    sim.set_delay_scale(3)
    async with service.session.post(
        service.api + f"/vm/{vmid}/snapshots", json={"name": "cut"}
    ) as resp:
        first = await read_sse(resp, stop_after=1)
    assert first.records[0]["step"] == TAKE
    await start_service.stop_last()  # cairn stops with the snapshot task under way
    sim.set_delay_scale(0)
    again: Service = await start_service()
    async with again.session.get(again.api + f"/vm/{vmid}/task") as resp:
        sse = await read_sse(resp)  # re-attached after the restart: the task's whole story
    assert sse.closed and sse.records[0] == first.records[0]
    assert (sse.last["step"], sse.last["status"]) == ("recovery", "error")
    assert "interrupted by a restart" in sse.last["message"]
    assert sse.last["message"].endswith("VM left running (0.00s)")
    assert await again.get(f"/vm/{vmid}/status") == (200, "running")
