"""A stop whose grace period ends while a node command is in flight (an HTTP request of the
API driver, a `qm` of the CLI driver): the command is interrupted with its job, and no failure
of a closed connection is recorded in its place, so the next start settles the task as after a
crash (half-built VM removed, id free)."""

from __future__ import annotations

import asyncio
import signal

import pytest
from pvesim.cluster import SimCluster

from tests.faults.conftest import StartCairn
from tests.faults.test_stop import install_until
from tests.vm.conftest import read_sse


@pytest.mark.parametrize("driver", ["api", "cli"])
async def test_a_stop_mid_import_leaves_the_task_to_be_settled_at_the_next_start(
    start_cairn: StartCairn, sim: SimCluster, driver: str
) -> None:
    sim.set_delay_scale(1)  # a real node's pace: the 1 s grace ends inside the import's work
    cairn = await start_cairn("serve", "vm", CAIRN_STOP_GRACE="1", PVE_DRIVER=driver)
    resp = await install_until(cairn, 157, "VM creation > importing disk image")
    cairn.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(cairn.proc.wait(), 30) == 0
    resp.close()
    sim.set_delay_scale(0)
    cairn = await start_cairn("serve", "vm", PVE_DRIVER=driver)
    async with cairn.session.get(cairn.api + "/vm/157/task") as task:
        settled = await read_sse(task)
    assert settled.closed and settled.records[-1]["status"] == "error"
    assert "interrupted by a restart" in settled.records[-1]["message"], settled.records[-1]
    assert sim.vm(157) is None
    assert await cairn.request("GET", cairn.api + "/vm/157/status") == (404, "VM 157 not found")
    assert await cairn.stop() == 0
