"""kill -9 of the cairn process alone (not its process group, as the OOM killer or an operator's
`kill -9 <pid>` does) at each install stage. Nothing cairn started outlives it (the embedded
nats-server, warm function sandboxes, their bwrap, python3 and node processes: each is tied
to its parent's death); the next start finds the VM the install created by the mark it wrote
at create and removes it; the re-attached stream's last record says what happened, truly."""

from __future__ import annotations

import contextlib
import os
import re
import signal

import pytest
from pvesim.cluster import SimCluster

from tests.conftest import wait_for
from tests.faults.conftest import (
    CREATE,
    StartCairn,
    kill_when,
    reached,
    settled,
    still_alive,
)
from tests.vm.conftest import read_sse

# The stages around which Proxmox's state changes, in the install's order.
STAGES = [
    "preparation > checking storage pool",
    "OS preparation > downloading OS image",
    "VM creation > creating VM",
    "VM creation > importing disk image",
    "VM initialization > initializing configuration",
    "VM initialization > waiting for ready",
    "VM initialization > SSH initialization",
    "VM initialization > rebooting VM",
    "VM initialization > finalizing",
]


def _locked(sim: SimCluster, vmid: int) -> bool:
    vm = sim.vm(vmid)
    return vm is not None and vm.lock == "create"


def _proxmox_command(cmdline: str) -> bool:
    """The simulator's qm/pvesh/pvesm (on a real node: qm itself, or ssh running it)."""
    return (
        "pvesim.cli qm " in cmdline
        or "pvesim.cli pvesh " in cmdline
        or "pvesim.cli pvesm " in cmdline
    )


def _end(tree: dict[int, tuple[int, str]]) -> None:
    for line in still_alive(tree):
        with_pid = int(line.split(":", 1)[0])
        with contextlib.suppress(ProcessLookupError):
            os.kill(with_pid, signal.SIGKILL)


@pytest.mark.parametrize("driver", ["cli", "api"])
@pytest.mark.parametrize("step", STAGES)
async def test_kill9_of_the_service_alone_leaves_no_vm_and_no_process(
    start_cairn: StartCairn, sim: SimCluster, step: str, driver: str
) -> None:
    vmid = 180 + STAGES.index(step)
    # Each stage takes a moment (the import 0.2 s, a boot 1.5 s), so the kill lands inside it,
    # with its Proxmox command running. qm create takes 8 s: the restart comes while it still
    # holds the new VM's config locked ('lock: create', no description yet).
    sim.set_delay_scale(4 if step == "VM creation > creating VM" else 0.05)
    # And the install never ends by itself: its guest never answers after the reboot. A kill
    # that lands a little late (this test is slow to read the step on a loaded machine) still
    # lands in the install, in a later stage that asks as much of the recovery; without this,
    # at "finalizing" (the reboot's 1.2 s boot) a late kill would find the install ended.
    sim.inject_failure("guest boot", vmid=vmid, after=1)
    # At "creating VM", `qm create`'s placeholder (without templates); a clone's is in
    # test_kill9_templates.py.
    creating = step == "VM creation > creating VM"
    cairn = await start_cairn("up", PVE_DRIVER=driver, VM_TEMPLATES="0" if creating else "1")
    # A warm sandbox (bwrap, python3) is ready for functions by now.
    await cairn.wait_log(r"cairn: ready")
    # At "creating VM", stored before the create is asked for, the kill waits for qm
    # create's placeholder: once it holds the new VM's config locked, the rest may go fast (a
    # running qm keeps the pace it started with).
    placeholder = (lambda: _locked(sim, vmid)) if creating else None
    _, tree = await kill_when(cairn, vmid, reached(step), placeholder)
    sim.set_delay_scale(0.05)
    ours = {pid: p for pid, p in tree.items() if not _proxmox_command(p[1])}
    proxmox = {pid: p for pid, p in tree.items() if _proxmox_command(p[1])}
    try:
        await wait_for(lambda: not still_alive(ours), timeout=10, what="children to end")
    except AssertionError:
        _end(tree)
        pytest.fail("outlived cairn's kill -9:\n" + "\n".join(still_alive(ours)))

    if creating:
        assert _locked(sim, vmid), "the create ended before the restart: nothing was tested"
    again = await start_cairn("up", PVE_DRIVER=driver, VM_TEMPLATES="0" if creating else "1")
    async with again.session.get(again.api + f"/vm/{vmid}/task") as task:
        settled = await read_sse(task)
    assert settled.closed, "the re-attached stream did not end"
    last = settled.records[-1]
    assert last["status"] == "error", last
    assert "interrupted by a restart" in last["message"], last
    assert "VM left absent" in last["message"], last
    assert "does not carry cairn's mark" not in last["message"], last
    assert sim.vm(vmid) is None, f"cairn's VM {vmid} is still there: {last['message']}"
    built = STAGES.index(step) >= STAGES.index("VM creation > importing disk image")
    if built:
        assert f"VM {vmid} removed from node pve1" in last["message"], last
    assert await again.request("GET", again.api + f"/vm/{vmid}/status") == (
        404,
        f"VM {vmid} not found",
    )
    assert all(vm["vmid"] != vmid for vm in (await again.vm_list())["list"])
    # No template left half built: any there is whole, for the next installs.
    for tid, vm in sim.vms().items():
        if tid >= 9000:
            assert str(vm.config.get("template")) == "1", (tid, vm.config, last["message"])
    assert await again.stop() == 0
    # A Proxmox command runs to its end, as it would on a remote node (docs/vm.md).
    assert not still_alive(proxmox)


@pytest.mark.parametrize("driver", ["cli", "api"])
async def test_kill9_with_the_create_dying_too_settles_the_task(
    start_cairn: StartCairn, sim: SimCluster, driver: str
) -> None:
    """The instant "[*] creating VM" is stored and the create's worker dies with cairn (over
    SSH the session's hang-up kills `qm create`; a pvedaemon restart or `cairn up`'s own
    simulator going down kills the API's task): Proxmox keeps the placeholder locked for ever
    ('lock: create', no description). The restart must not wait for a create that never ends:
    it settles the task, says why, and leaves the placeholder it cannot prove is its own."""
    vmid = 190
    sim.set_delay_scale(4)  # the create holds its placeholder for 8 s
    # `qm create`'s placeholder (a clone's: test_kill9_templates.py).
    cairn = await start_cairn("up", PVE_DRIVER=driver, VM_TEMPLATES="0")
    await cairn.wait_log(r"cairn: ready")
    # "creating VM" is stored before the create is asked for: the kill waits for its
    # placeholder.
    seen, tree = await kill_when(cairn, vmid, reached(CREATE), lambda: _locked(sim, vmid))
    assert seen[-1]["message"].startswith(f"[*] creating VM {vmid} ("), seen[-1]
    if driver == "cli":
        creates = {p: c for p, c in tree.items() if f"pvesim.cli qm create {vmid}" in c[1]}
        assert creates, tree
        _end(creates)
    else:
        assert sim.kill_tasks(vmid), "no API task was creating the VM"
    _end({p: c for p, c in tree.items() if not _proxmox_command(c[1])})
    sim.set_delay_scale(0.05)

    again = await start_cairn("up", PVE_DRIVER=driver, VM_TEMPLATES="0")
    last = await settled(again, vmid)
    assert f"VM {vmid} on node pve1 is locked by a create that no longer runs" in last["message"]
    assert last["message"].endswith("cairn no longer tracks this id (0.00s)"), last
    # Left as Proxmox holds it: no mark proves it is cairn's.
    assert _locked(sim, vmid)
    assert re.search(rf"VM {vmid} on pve1: its create died half-way", again.log())
    assert await again.stop() == 0
