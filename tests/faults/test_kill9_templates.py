"""kill -9 of cairn while an install builds a template or clones one (templates are on by
default). Proxmox goes on with what it was asked (a `qm clone` or `qm create` run to its end, an
API task too); the next start waits for it, then removes what the install left: its clone, or
the template it had not finished. A clone whose own worker died is removed where cairn may
(`--skiplock` over the CLI driver) and reported where only root may (the API's token)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from pvesim.cluster import SimCluster

from tests.conftest import wait_for
from tests.faults.conftest import (
    CREATE,
    Cairn,
    StartCairn,
    kill_when,
    reached,
    settled,
    still_alive,
)


def lock_of(sim: SimCluster, vmid: int) -> str | None:
    vm = sim.vm(vmid)
    return None if vm is None else vm.lock


async def a_template(cairn: Cairn, sim: SimCluster) -> None:
    first = await cairn.install(id=170)
    assert first.last["status"] == "success", first.records[-3:]
    tpl = sim.vm(9000)
    assert tpl is not None and str(tpl.config.get("template")) == "1"


@pytest.mark.parametrize("driver", ["cli", "api"])
async def test_a_clone_runs_to_its_end_and_the_restart_removes_the_vm(
    start_cairn: StartCairn, sim: SimCluster, driver: str
) -> None:
    cairn = await start_cairn("up", PVE_DRIVER=driver)
    await a_template(cairn, sim)
    # The clone outlasts cairn's restart, which begins once the clone is at work (the kill
    # waits for it): 12 s of linking over the CLI (after 12 s of qm's start-up), 15 s through
    # the API.
    sim.set_delay_scale(24 if driver == "cli" else 30)
    # "creating VM" is stored before the clone is asked for: the kill waits for the clone.
    await kill_when(cairn, 171, reached(CREATE), lambda: lock_of(sim, 171) == "clone")
    # Proxmox's clone goes on without cairn: its new VM stays locked until it ends.
    sim.set_delay_scale(0.05)
    again = await start_cairn("up", PVE_DRIVER=driver)
    assert lock_of(sim, 171) == "clone", "the clone ended before the restart: nothing tested"
    last = await settled(again, 171)
    assert "VM 171 removed from node pve1" in last["message"], last
    assert last["message"].endswith("VM left absent (0.00s)"), last
    assert sim.vm(171) is None
    template = sim.vm(9000)  # the template stays, for the next installs
    assert template is not None and str(template.config.get("template")) == "1"
    again_ok = await again.install(id=172)
    assert again_ok.last["status"] == "success", again_ok.records[-3:]
    assert await again.stop() == 0


@pytest.mark.parametrize("driver", ["cli", "api"])
async def test_a_clone_whose_worker_died_too(
    start_cairn: StartCairn, sim: SimCluster, driver: str
) -> None:
    """The clone's worker dies with cairn (SIGKILL of `qm clone`; a pvedaemon restart for the
    API's task): its placeholder stays, locked. cairn's CLI driver (root on the node) removes
    it; the API's token may not unlock a VM, so cairn says how to."""
    cairn = await start_cairn("up", PVE_DRIVER=driver)
    await a_template(cairn, sim)
    sim.set_delay_scale(8)
    _, tree = await kill_when(cairn, 171, reached(CREATE), lambda: lock_of(sim, 171) == "clone")
    if driver == "cli":
        clones = {p: c for p, c in tree.items() if "pvesim.cli qm clone 9000 171" in c[1]}
        assert clones, tree
        for pid in clones:
            os.kill(pid, signal.SIGKILL)
        await wait_for(lambda: not still_alive(clones), timeout=10, what="qm clone to die")
    else:
        assert sim.kill_tasks(9000), "no API task was cloning template 9000"
    sim.set_delay_scale(0.05)
    assert lock_of(sim, 171) == "clone"
    again = await start_cairn("up", PVE_DRIVER=driver)
    last = await settled(again, 171)
    if driver == "cli":
        assert (
            "VM 171 removed from node pve1 (a clone of template 9000 left half made)"
            in last["message"]
        ), last
        assert sim.vm(171) is None
        assert last["message"].endswith("VM left absent (0.00s)"), last
    else:
        assert (
            "VM 171 on node pve1 is left locked by a clone of template 9000 that died half-way"
            in last["message"]
        ), last
        assert "qm unlock 171 && qm destroy 171 --purge" in last["message"], last
        assert lock_of(sim, 171) == "clone"  # left as Proxmox holds it
    assert sim.vm(9000) is not None
    assert await again.stop() == 0


@pytest.mark.parametrize("driver", ["cli", "api"])
async def test_a_half_built_template_is_removed_at_the_restart(
    start_cairn: StartCairn, sim: SimCluster, driver: str
) -> None:
    sim.set_delay_scale(4)  # the template's create holds its placeholder for 8 s
    cairn = await start_cairn("up", PVE_DRIVER=driver)
    await cairn.wait_log(r"cairn: ready")

    def building(records: list[dict[str, Any]]) -> bool:
        return any("creating template 9000 on pve1" in r["message"] for r in records)

    # The note is stored before the create is asked for: the kill waits for the create.
    await kill_when(cairn, 171, building, lambda: sim.vm(9000) is not None)
    sim.set_delay_scale(0.05)
    again = await start_cairn("up", PVE_DRIVER=driver)
    last = await settled(again, 171)
    assert "template 9000, left half built, removed from node pve1" in last["message"], last
    assert sim.vm(9000) is None
    assert sim.vm(171) is None
    # The next install builds it again, whole.
    got = await again.install(id=172)
    assert got.last["status"] == "success", got.records[-3:]
    template = sim.vm(9000)
    assert template is not None and str(template.config.get("template")) == "1"
    assert await again.stop() == 0


@pytest.mark.parametrize("worker_dies", [False, True], ids=["copy-ends", "copy-killed"])
async def test_a_template_copy_to_another_node_cut_short_is_removed(
    start_cairn: StartCairn, sim: SimCluster, worker_dies: bool
) -> None:
    """The CLI driver gives another node its own template once: a full clone of the main
    node's, then migrated and converted (pernode.py). A kill -9 during the copy leaves Proxmox's
    clone at work, or with its worker killed too, its placeholder locked (`lock: clone`, the
    bare temporary file or the config with the install's mark); the restart waits for the
    clone, then removes the copy either way."""
    cairn = await start_cairn("up", PVE_DRIVER="cli")
    await a_template(cairn, sim)
    sim.set_delay_scale(4)  # the full copy of the 2 GiB disk: 32 s

    def copying(records: list[dict[str, Any]]) -> bool:
        note = "creating template 9001 on pve1 from template 9000"
        return any(note in r["message"] for r in records)

    # The note comes just before `qm clone` starts: the kill waits for the clone's placeholder.
    def cloning() -> bool:
        return lock_of(sim, 9001) == "clone"

    _, tree = await kill_when(cairn, 171, copying, cloning, node="pve2")
    if worker_dies:
        copies = {p: c for p, c in tree.items() if "pvesim.cli qm clone 9000 9001" in c[1]}
        assert copies, tree
        for pid in copies:
            os.kill(pid, signal.SIGKILL)
        await wait_for(lambda: not still_alive(copies), timeout=10, what="qm clone to die")
        assert lock_of(sim, 9001) == "clone"  # left locked: its worker is gone
    sim.set_delay_scale(0.05)
    again = await start_cairn("up", PVE_DRIVER="cli")
    last = await settled(again, 171)
    assert "template 9001, left half built, removed from node pve1" in last["message"], last
    assert sim.vm(9001) is None and sim.vm(171) is None
    # The main node's template stays; the next install on pve2 copies it there again, whole.
    got = await again.install(id=172, node="pve2")
    assert got.last["status"] == "success", got.records[-3:]
    copied = [v for v in sim.vms().values() if v.node == "pve2" and v.vmid >= 9000]
    assert [str(v.config.get("template")) for v in copied] == ["1"], copied
    assert await again.stop() == 0
