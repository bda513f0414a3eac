"""Which tasks a node runs for a VM, through both adapters of the port against the simulator:
what a restart asks before it waits for a create (a create whose worker died never ends)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import pytest
from pvesim.cluster import SimCluster

from actors.vm import pve
from actors.vm.cli.adapter import CliPve
from actors.vm.cli.transport import LocalTransport
from actors.vm.pve import Hardware
from actors.vm.pveapi import errors
from actors.vm.pveapi.adapter import RestPve
from tests.conftest import wait_for
from tests.pveapi.conftest import client_for

HARDWARE = Hardware("t", 1, "kvm64", 512, None, "debian", "test", "vmbr0")


@pytest.fixture
async def rest(sim: SimCluster) -> AsyncIterator[RestPve]:
    port = RestPve(client_for(sim), "pve1")
    yield port
    await port.close()


def cli(sim: SimCluster) -> CliPve:
    return CliPve({"pve1": LocalTransport(sim.env())}, "pve1")


def locked(sim: SimCluster, vmid: int) -> bool:
    vm = sim.vm(vmid)
    return vm is not None and vm.lock == "create"


async def test_an_api_create_is_listed_while_it_runs_and_not_once_its_worker_died(
    sim: SimCluster, rest: RestPve
) -> None:
    sim.set_delay_scale(2)  # the create holds its placeholder for 4 s
    running = asyncio.create_task(rest.create("pve1", 150, pve.Create(HARDWARE)))
    await wait_for(lambda: locked(sim, 150), what="the create's placeholder")
    listed = await rest.active_tasks("pve1", 150)
    assert len(listed) == 1 and ":qmcreate:150:cairn@pve!sim:" in listed[0]
    assert await cli(sim).active_tasks("pve1", 150) == listed  # the node's one list
    assert await rest.active_tasks("pve1", 151) == []
    assert sim.kill_tasks(150) == listed
    assert await rest.active_tasks("pve1", 150) == []
    assert await cli(sim).active_tasks("pve1", 150) == []
    with pytest.raises(pve.PveError, match="unexpected status"):
        await running
    assert locked(sim, 150)  # a killed worker cleans up nothing


async def test_a_cli_create_is_listed_while_its_process_lives(sim: SimCluster) -> None:
    sim.set_delay_scale(2)
    port = cli(sim)
    pids: list[int] = []
    env = {**sim.env(), "PYTHONUNBUFFERED": "1"}
    local = LocalTransport(env)
    argv = ["sh", "-c", "echo $$; exec qm create 152 --name t --description test"]
    running = asyncio.create_task(local.run(argv, on_line=lambda line: pids.append(int(line))))
    await wait_for(lambda: locked(sim, 152) and pids, what="qm create's placeholder")
    listed = await port.active_tasks("pve1", 152)
    assert len(listed) == 1 and f":{pids[0]:08X}:" in listed[0] and ":qmcreate:152:" in listed[0]
    os.kill(pids[0], signal.SIGKILL)  # as an SSH hang-up kills it
    await running
    assert await port.active_tasks("pve1", 152) == []
    assert locked(sim, 152)


async def test_the_listing_refuses_what_pve_refuses(sim: SimCluster, rest: RestPve) -> None:
    with pytest.raises(errors.ApiError) as bad:
        await rest.client.get("/nodes/pve1/tasks", {"source": "running"})
    assert bad.value.status == 400 and "source" in bad.value.errors
    with pytest.raises(errors.ApiError) as unknown:
        await rest.client.get("/nodes/pve1/tasks", {"vmid": "150", "color": "red"})
    assert unknown.value.status == 400
    with pytest.raises(pve.PveError, match="no such cluster node 'pve9'"):
        await rest.active_tasks("pve9", 150)
    # The archive is not simulated: nothing is listed from it.
    assert await rest.client.get("/nodes/pve1/tasks", {"source": "archive"}) == []
