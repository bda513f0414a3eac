"""An install outlives its client and its process: re-attach, and recovery after a restart."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
from pvesim.cluster import SimCluster

from events.nats_server import EmbeddedNats
from tests.conftest import wait_for
from tests.ports import free_port
from tests.vm import drivers
from tests.vm.conftest import Service, half_built_step, read_sse, service_env
from tests.vm.mirror import Mirror

# Every test here runs with both drivers (tests/vm/drivers.py).
driver = drivers.driver
start_service = drivers.start_service


async def test_install_goes_on_without_its_client_and_can_be_reattached(
    service: Service,
) -> None:
    async with service.session.post(
        service.api + "/vm/install", json={"os": "debian", "version": "12"}
    ) as resp:
        first = await read_sse(resp, stop_after=3)
        vmid = int(resp.headers["X-VM-Id"])
    assert first.ids[0].startswith(f"{vmid}:")
    # The client has gone; the install finishes anyway.
    await wait_for(lambda: service.sim.guest_up(vmid), timeout=30, what="the VM to run")
    headers = {"Last-Event-ID": first.ids[-1]}
    async with service.session.get(f"{service.api}/vm/{vmid}/task", headers=headers) as resp:
        rest = await read_sse(resp)
    assert rest.closed and rest.last["status"] == "success" and rest.last["vm_id"] == vmid
    assert first.records + rest.records == (await whole_task(service, vmid)).records
    assert rest.records[0]["step"] == "preparation > assigning IP"


async def whole_task(service: Service, vmid: int) -> Any:
    async with service.session.get(f"{service.api}/vm/{vmid}/task") as resp:
        sse = await read_sse(resp)
    assert sse.closed
    assert sse.records[0]["message"].startswith("[*] start VM installation")
    return sse


async def test_reattach_refuses_foreign_or_unknown_ids(service: Service) -> None:
    assert await service.get("/vm/150/task") == (404, "VM 150 not found")
    status, text = await service.get("/vm/150/task", headers={"Last-Event-ID": "151:3"})
    assert (status, text) == (400, "Last-Event-ID: not an id of VM 150")
    status, _ = await service.get("/vm/150/task", headers={"Last-Event-ID": "150:99"})
    assert status == 404


async def test_restart_during_an_install_cleans_up_and_frees_the_id(
    start_service: Any,
    driver: str,
) -> None:
    service: Service = await start_service()
    # The service dies between two stages, with a half-built VM in the cluster.
    step = half_built_step(driver)
    # Its guest never answers: however long the stop takes (it runs in the install's own event
    # loop), the install cannot end first.
    service.sim.inject_failure("guest boot", vmid=140)
    await service.install_until(140, step, then=start_service.stop_last)
    assert service.sim.vm(140) is not None

    again: Service = await start_service()
    await wait_for(lambda: service.sim.vm(140) is None, timeout=30, what="the half-built VM")
    sse = await whole_task(again, 140)
    assert sse.last["status"] == "error"
    assert "interrupted by a restart" in sse.last["message"]
    service.sim.clear_failures()
    assert await again.get("/vm/140/status") == (404, "VM 140 not found")
    retry = await again.install(id=140)
    assert retry.last["status"] == "success" and retry.last["vm_id"] == 140, retry.records[-2:]


async def test_sigkill_during_an_install_then_restart(
    start_service: Any, tmp_path: Path, nats_server: EmbeddedNats, sim: SimCluster, mirror: Mirror
) -> None:
    """The service as its own process, killed with SIGKILL between two install stages."""
    env = {**os.environ, **service_env(tmp_path, nats_server, sim, mirror)}
    env["PORT"] = str(free_port("127.0.0.1"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.main", "serve", "vm",
        env=env, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            while b"cairn: ready" not in await proc.stdout.readline():
                pass
        url = f"http://127.0.0.1:{env['PORT']}/api/vm/install"
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, json={"os": "debian", "version": "12", "id": 141}) as resp,
        ):
            seen: list[dict[str, Any]] = []
            while not any(r["step"] == "VM creation > importing disk image" for r in seen):
                seen += (await read_sse(resp, stop_after=1)).records
            proc.kill()
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert sim.vm(141) is not None  # the half-built VM

    again: Service = await start_service()
    await wait_for(lambda: sim.vm(141) is None, timeout=30, what="the half-built VM removed")
    sse = await whole_task(again, 141)
    assert sse.last["status"] == "error" and "interrupted by a restart" in sse.last["message"]
    retry = await again.install(id=141)
    assert retry.last["status"] == "success" and retry.last["vm_id"] == 141, retry.records[-2:]
