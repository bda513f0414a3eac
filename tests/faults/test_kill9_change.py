"""kill -9 of cairn in the middle of a safe change: the next start settles the change by rolling
the VM back to the snapshot it began with (memory and the guest's files as before), or, when
that snapshot is gone, leaves the VM as it is and says it needs attention; the re-attached
stream ends saying which."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest
from pvesim.cluster import SimCluster

from tests.conftest import wait_for
from tests.faults.conftest import Cairn, StartCairn
from tests.vm.conftest import read_sse

MARKER = "/root/cairn-marker"
RUNNING_STEP = "change > step 2: run"
CLI_VM = 232


async def change_cut_off(cairn: Cairn, sim: SimCluster, vmid: int, *, keep: bool = False) -> str:
    """Start a change whose second step writes the marker and then takes long; kill -9 cairn
    while it runs. The change's task id."""
    body = {
        "steps": [{"set": {"memory": 4096}}, {"run": f"echo after > {MARKER}\nsleep 20"}],
        "verify": {"ssh": True},
        "keep_snapshot": keep,
    }
    async with cairn.session.post(cairn.api + f"/vm/{vmid}/change", json=body) as resp:
        assert resp.status == 200, await resp.text()
        task = resp.headers["X-Task-Id"]
        seen: list[dict[str, Any]] = []
        while not any(r["step"] == RUNNING_STEP for r in seen):
            got = await read_sse(resp, stop_after=1)
            assert got.records, f"the stream ended before {RUNNING_STEP!r}: {seen[-2:]}"
            seen += got.records
        # The script reached the guest and sleeps there: the kill lands inside the step.
        await wait_for(
            lambda: sim.guest_files(vmid).get(MARKER) == "after\n", what="the step's script"
        )
        os.kill(cairn.proc.pid, signal.SIGKILL)
        await cairn.proc.wait()
    return task


async def prepared(start_cairn: StartCairn, sim: SimCluster, vmid: int, driver: str) -> Cairn:
    """cairn with VM `vmid` installed (2048 MB) and the marker written as "before"."""
    sim.set_delay_scale(0.05)
    cairn = await start_cairn("up", PVE_DRIVER=driver)
    body = {"os": "debian", "version": "12", "id": vmid, "ram": 2048}
    assert (await cairn.install(**body)).last["status"] == "success"
    first = {"steps": [{"run": f"echo before > {MARKER}"}], "verify": {"ssh": True}}
    async with cairn.session.post(cairn.api + f"/vm/{vmid}/change", json=first) as resp:
        assert (await read_sse(resp)).last["status"] == "success"
    return cairn


@pytest.fixture
async def over_cli(start_cairn: StartCairn, sim: SimCluster) -> Cairn:
    """cairn over the CLI driver, VM `CLI_VM` prepared."""
    return await prepared(start_cairn, sim, CLI_VM, "cli")


async def reattached(cairn: Cairn, vmid: int) -> dict[str, Any]:
    async with cairn.session.get(cairn.api + f"/vm/{vmid}/task") as resp:
        settled = await read_sse(resp)
    assert settled.closed, "the re-attached stream did not end"
    return settled.last


# The api driver's run asks to keep the snapshot: the settling at the next start keeps it too.
@pytest.mark.parametrize(("driver", "keep"), [("cli", False), ("api", True)])
async def test_kill9_mid_change_rolls_it_back_at_the_next_start(
    start_cairn: StartCairn, sim: SimCluster, driver: str, keep: bool
) -> None:
    vmid = 230 if driver == "cli" else 231
    cairn = await prepared(start_cairn, sim, vmid, driver)
    task = await change_cut_off(cairn, sim, vmid, keep=keep)
    vm = sim.vm(vmid)
    assert vm is not None and str(vm.config["memory"]) == "4096"  # the change was half-way

    again = await start_cairn("up", PVE_DRIVER=driver)
    last = await reattached(again, vmid)
    name = f"cairn-change-{task[:16]}"
    assert (last["step"], last["status"]) == ("recovery", "error"), last
    assert "interrupted by a restart" in last["message"], last
    kept = f" (snapshot {name} kept, as asked)" if keep else ""
    assert (
        f"the change was rolled back to snapshot {name}{kept}; VM left running" in (last["message"])
    ), last
    vm = sim.vm(vmid)
    assert vm is not None and str(vm.config["memory"]) == "2048" and vm.lock is None
    assert sim.guest_files(vmid)[MARKER] == "before\n"
    status, text = await again.request("GET", again.api + f"/vm/{vmid}/snapshots")
    assert status == 200, text
    assert [s["name"] for s in json.loads(text)] == ([name] if keep else []), text
    status, text = await again.request("GET", again.api + f"/vm/{vmid}")
    assert status == 200 and json.loads(text)["state"] == "running", text
    assert await again.stop() == 0


async def test_kill9_mid_change_with_its_snapshot_gone_asks_for_attention(
    over_cli: Cairn, start_cairn: StartCairn, sim: SimCluster
) -> None:
    vmid = CLI_VM
    task = await change_cut_off(over_cli, sim, vmid)
    name = f"cairn-change-{task[:16]}"
    # Someone deletes the snapshot in Proxmox before cairn is back.
    with sim.store.locked() as txn:
        rec = txn.vm_on("pve1", vmid)
        assert rec is not None and name in rec["snapshots"]
        del rec["snapshots"][name]
        rec["config"].pop("parent", None)
        txn.save_vm("pve1", rec)

    again = await start_cairn("up", PVE_DRIVER="cli")
    last = await reattached(again, vmid)
    assert (last["step"], last["status"]) == ("recovery", "error"), last
    assert (
        f"the change's snapshot {name} is gone, so it cannot be rolled back: VM {vmid} needs "
        "attention (it may be half-changed); VM left running"
    ) in last["message"], last
    vm = sim.vm(vmid)
    assert vm is not None and str(vm.config["memory"]) == "4096"  # left as it was found
    status, text = await again.request("GET", again.api + f"/vm/{vmid}")
    assert status == 200, text
    last_task = json.loads(text)["last_task"]
    assert last_task["ok"] is False and "needs attention" in last_task["error"], last_task
    assert await again.stop() == 0


async def test_kill9_after_the_checks_passed_keeps_the_change(
    over_cli: Cairn, start_cairn: StartCairn, sim: SimCluster
) -> None:
    vmid, cairn = CLI_VM, over_cli
    body = {"steps": [{"set": {"memory": 4096}}], "verify": {"ssh": True}}
    async with cairn.session.post(cairn.api + f"/vm/{vmid}/change", json=body) as resp:
        assert resp.status == 200, await resp.text()
        seen: list[dict[str, Any]] = []
        while not any(r["step"] == "change > keeping" for r in seen):
            got = await read_sse(resp, stop_after=1)
            assert got.records, f"the stream ended before keeping: {seen[-2:]}"
            seen += got.records
            if got.records[0]["step"] == "change > verifying":
                # The snapshot's delete, next, takes long: the kill lands inside it.
                sim.set_delay_scale(40)
        os.kill(cairn.proc.pid, signal.SIGKILL)
        await cairn.proc.wait()
    sim.set_delay_scale(0.05)

    again = await start_cairn("up", PVE_DRIVER="cli")
    last = await reattached(again, vmid)
    assert (last["step"], last["status"]) == ("recovery", "error"), last
    assert "the change had passed its checks and is kept" in last["message"], last
    vm = sim.vm(vmid)
    assert vm is not None and str(vm.config["memory"]) == "4096"  # not undone
    status, text = await again.request("GET", again.api + f"/vm/{vmid}")
    assert status == 200, text
    assert json.loads(text)["memory"] == 4096
    assert await again.stop() == 0
