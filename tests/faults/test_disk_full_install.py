"""The disk holding the event store fills while an install runs, at three stages: before the
VM is created, while its disk is imported, after it was started. While the disk stays full the
install stream says it waits for disk space (a record no store keeps) and /health names the
full disk; the install is stopped (its job cannot record what it does); once space is back
what it built on Proxmox is removed and the stream ends with that as its last record. The
stream, the status, the listing and the simulated cluster then agree, and the id is free:
nothing needed a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pvesim.cluster import SimCluster

from tests.conftest import wait_for
from tests.faults.conftest import Cairn, StartCairn
from tests.faults.test_disk_full import fill, mountpoint, namespace_wrapper
from tests.vm.conftest import read_sse

__all__ = ["mountpoint"]  # the fixture, shared with test_disk_full

WAITING = "waiting for disk space"


async def records_until(
    resp: aiohttp.ClientResponse, seen: list[dict[str, Any]], step: str, status: str
) -> None:
    while not any(r["step"] == step and r["status"] == status for r in seen):
        got = await read_sse(resp, stop_after=1)
        assert got.records, f"the stream ended before {step!r} {status}: {seen[-3:]}"
        seen += got.records


async def not_healthy(cairn: Cairn) -> bool:
    return (await cairn.health())[0] == 503


@pytest.mark.parametrize("driver", ["cli", "api"])
@pytest.mark.parametrize(
    ("vmid", "step", "status", "built"),
    [
        (171, "OS preparation > downloading OS image", "success", False),  # before create
        (172, "VM creation > importing disk image", "processing", True),  # during import
        (173, "VM initialization > waiting for ready", "processing", True),  # after start
    ],
)
async def test_a_disk_filling_mid_install_ends_the_install_once_space_is_back(
    start_cairn: StartCairn,
    sim: SimCluster,
    mountpoint: Path,
    vmid: int,
    step: str,
    status: str,
    built: bool,
    driver: str,
) -> None:
    env = {
        "CAIRN_DATA": str(mountpoint / "data"),
        "CAIRN_STORE_RETRY": "1",
        "PVE_DRIVER": driver,
    }
    # Slow enough that the disk fills before the next stage (the import: 100 steps; the
    # boot: a few seconds), fast enough for a test.
    sim.set_delay_scale(0.1)
    cairn = await start_cairn("up", wrapper=namespace_wrapper(mountpoint, "24m"), **env)
    inside = Path(f"/proc/{cairn.proc.pid}/root") / mountpoint.relative_to("/")
    body = {"os": "debian", "version": "12", "id": vmid}
    async with cairn.session.post(cairn.api + "/vm/install", json=body) as resp:
        seen: list[dict[str, Any]] = []
        await records_until(resp, seen, step, status)
        ballast = await asyncio.to_thread(fill, inside)
        try:
            # The stream says why it is silent, /health names the disk, the VM's status
            # answers at once.
            await records_until(resp, seen, "waiting", "processing")
            assert WAITING in seen[-1]["message"], seen[-1]
            await wait_for(lambda: not_healthy(cairn), what="/health to report the disk")
            health = (await cairn.health())[1]
            assert "the disk holding the event store is full" in health, health
            answer = await cairn.request("GET", cairn.api + f"/vm/{vmid}/status")
            assert answer[0] in (200, 507), answer
        finally:
            await asyncio.to_thread(ballast.unlink)
        rest = await read_sse(resp)
    assert rest.closed, "the install stream did not end"
    last = rest.records[-1]
    assert last["status"] == "error", last
    assert "stopped while the event store refused writes (the disk holding" in last["message"]
    if built:
        assert f"VM {vmid} removed from node pve1" in last["message"], last
    assert "VM left absent" in last["message"], last
    assert sim.vm(vmid) is None
    assert await cairn.request("GET", cairn.api + f"/vm/{vmid}/status") == (
        404,
        f"VM {vmid} not found",
    )
    assert all(vm["vmid"] != vmid for vm in (await cairn.vm_list())["list"])
    await wait_for(lambda: healthy(cairn), timeout=20, what="health once space is back")
    sim.set_delay_scale(0)
    again = await cairn.install(id=vmid)  # the id is free: no restart was needed
    assert again.records[-1]["status"] == "success", again.records[-2:]
    assert await cairn.stop() == 0


async def healthy(cairn: Cairn) -> bool:
    return (await cairn.health())[0] == 200
