"""The VM service on the PostgreSQL event store (`CAIRN_EVENT_STORE=postgresql+asyncpg://…`),
end to end on a real server: an install, a restart of the service on the same database, the
VM still listed and driven from its replayed stream, and a restart mid-install settled as on
SQLite."""

from __future__ import annotations

from typing import Any

from tests.conftest import wait_for
from tests.vm.conftest import Service
from tests.vm.test_reattach_restart_e2e import whole_task


async def test_install_restart_and_replay_on_postgresql(
    start_service: Any, postgres_url: str
) -> None:
    service: Service = await start_service(CAIRN_EVENT_STORE=postgres_url)
    done = await service.install(id=160, name="on-pg")
    assert done.last["status"] == "success" and done.last["vm_id"] == 160, done.records[-2:]
    # The service dies between two stages of a second install, a half-built VM in the cluster.
    step = "VM initialization > initializing configuration"
    # Its guest never answers: however long the stop takes (it runs in the install's own event
    # loop), the install cannot end first.
    service.sim.inject_failure("guest boot", vmid=161)
    await service.install_until(161, step, then=start_service.stop_last)
    assert service.sim.vm(161) is not None

    again: Service = await start_service(CAIRN_EVENT_STORE=postgres_url)
    listed = {vm["vmid"]: vm for vm in (await again.list())["list"]}
    assert listed[160]["name"] == "on-pg" and listed[160]["state"] == "running"
    # Rebuilt from its stream: it can be driven, and remembers its last task.
    assert await again.post("/vm/160/stop") == (200, "ok")
    assert await again.get("/vm/160/status") == (200, "stopped")
    # The interrupted install was settled: the half-built VM removed, its id free again.
    await wait_for(lambda: again.sim.vm(161) is None, timeout=30, what="the half-built VM")
    task = await whole_task(again, 161)
    assert task.last["status"] == "error"
    assert "interrupted by a restart" in task.last["message"]
    assert await again.get("/vm/161/status") == (404, "VM 161 not found")
    again.sim.clear_failures()
    retry = await again.install(id=161)
    assert retry.last["status"] == "success" and retry.last["vm_id"] == 161, retry.records[-2:]
