"""A failed append never strands a task: another client holds SQLite's write lock past the
store's retry budget in the middle of an install. The install's actor stops, its job is
cancelled, and once the lock is gone the task ends as failed, its half-built VM removed and
its id free; the stream, the status, the list and the cluster agree."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from pvesim.cluster import SimCluster

from tests.faults.conftest import StartCairn
from tests.vm.conftest import read_sse


async def test_a_write_lock_held_past_the_retry_budget_fails_the_install_then_cleans_up(
    start_cairn: StartCairn, sim: SimCluster, tmp_path: Path
) -> None:
    cairn = await start_cairn("serve", "vm", CAIRN_STORE_RETRY="4")
    url = cairn.api + "/vm/install"
    async with cairn.session.post(url, json={"os": "debian", "version": "12", "id": 150}) as resp:
        records: list[dict[str, Any]] = []
        while not any(
            r["step"] == "VM creation > creating VM" and r["status"] == "success" for r in records
        ):
            records += (await read_sse(resp, stop_after=1)).records
        assert sim.vm(150) is not None  # a VM is being built

        # Another client takes SQLite's write lock and keeps it.
        blocker = sqlite3.connect(
            tmp_path / "data" / "events.sqlite3",
            timeout=30,
            isolation_level=None,
            check_same_thread=False,
        )
        await asyncio.to_thread(blocker.execute, "BEGIN IMMEDIATE")
        try:
            await cairn.wait_log(
                r"vm:150: stopping: the event store refuses writes: database is locked"
            )
            # While the store refuses writes, the VM answers at once, and says why.
            status, text = await cairn.request("GET", cairn.api + "/vm/150/status")
            assert status == 503 and "the event store refuses writes" in text, text
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()

        rest = await read_sse(resp)
    assert rest.closed, "the install stream did not end"
    last = rest.records[-1]
    assert last["status"] == "error"
    why = "stopped while the event store refused writes (the event store refuses writes"
    assert why in last["message"], last
    assert "VM 150 removed from node pve1; VM left absent" in last["message"], last
    assert sim.vm(150) is None  # the half-built VM was removed
    assert await cairn.request("GET", cairn.api + "/vm/150/status") == (404, "VM 150 not found")
    assert all(vm["vmid"] != 150 for vm in (await cairn.vm_list())["list"])
    again = await cairn.install(id=150)  # the id is free again
    assert again.records[-1]["status"] == "success" and again.records[-1]["vm_id"] == 150
    assert "restarting vm:150 from its stored events" in cairn.log()
    assert await cairn.stop() == 0
