"""The node actor runs the port's work on its node: over a real local command, the work always
gets an answer, and stopping the actor cancels what still runs."""

from __future__ import annotations

import asyncio
import os

import pytest

from actors.runtime import ActorHost
from actors.vm.cli.transport import LocalTransport
from actors.vm.node import Cluster, NodeActor
from actors.vm.pve import PveError
from events.store import EventStore
from tests.conftest import wait_for
from tests.vm.helpers import settings


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes once reaped or exited. It may
    # be reaped between the two looks, so a vanished /proc entry also means dead.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


async def test_a_command_runs_and_its_output_comes_back(store: EventStore) -> None:
    host = ActorHost(store)
    cluster = await Cluster.start(host, settings(), {})
    local = LocalTransport({})
    try:
        argv = ["sh", "-c", "echo out; echo err >&2; exit 3"]
        result = await cluster.on("pve1", lambda: local.run(argv))
        assert (result.rc, result.stdout, result.stderr) == (3, "out\n", "err\n")
        with pytest.raises(PveError, match="no such cluster node 'pve9'"):
            await cluster.on("pve9", lambda: local.run(argv))
    finally:
        await host.stop_all()


async def test_a_fenced_host_runs_nothing(store: EventStore) -> None:
    host = ActorHost(store)
    cluster = await Cluster.start(host, settings(), {})
    cluster.fence = lambda: "this host's lease is stale"
    ran: list[str] = []

    async def work() -> None:
        ran.append("ran")

    try:
        with pytest.raises(PveError, match="cairn: not run: this host's lease is stale"):
            await cluster.on("pve1", work)
        assert ran == []
    finally:
        await host.stop_all()


async def test_stopping_the_node_actor_answers_a_running_command_and_kills_it(
    store: EventStore,
) -> None:
    host = ActorHost(store)
    cluster = await Cluster.start(host, settings(), {})
    pids: list[int] = []
    argv = ["sh", "-c", "echo $$; exec sleep 60"]
    local = LocalTransport({})
    running = asyncio.create_task(
        cluster.on("pve1", lambda: local.run(argv, on_line=lambda line: pids.append(int(line))))
    )
    try:
        await wait_for(lambda: pids, what="the command's pid")
        await host.stop(NodeActor, cluster.names[0])
        # Its caller is cancelled as at shutdown, instead of waiting for an answer forever.
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(10):
                await running
        await wait_for(lambda: not _alive(pids[0]), what="the command killed")
    finally:
        await host.stop_all()
