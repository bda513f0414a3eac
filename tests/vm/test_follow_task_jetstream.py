"""Following a task written by another process (another event store handle with its own
relay, as an actor host elsewhere): every stage once, in order, across a nats-server killed
with -9 and restarted on its port and store. The store poll that backs a stalled publisher is
switched off, so only JetStream can deliver."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from actors.platform import Runtime
from actors.vm.events import Progress, TaskEnded
from events.nats_server import EmbeddedNats
from events.relay import OutboxRelay
from events.store import EventStore, default_store_url
from gateway.apps import vm as vm_gateway
from gateway.apps.vm import TaskEvent, follow_task
from tests.conftest import wait_for


def stage(n: int) -> Progress:
    return Progress(task="t1", step=f"stage {n}", status="processing", message=f"[*] {n}")


async def test_a_task_followed_across_a_killed_nats_server_shows_every_stage_once(
    runtime: Runtime, nats_server: EmbeddedNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vm_gateway, "STORE_POLL", 120.0)
    writer = await EventStore.open(default_store_url(tmp_path / "data"))
    writer_nc = await nats_server.connect()
    relay = OutboxRelay(writer, writer_nc, retry_interval=0.05)
    await relay.start()
    seen: list[TaskEvent] = []

    async def follow() -> None:
        async for item in follow_task(runtime, 150, "t1", 0):
            seen.append(item)

    following = asyncio.create_task(follow())
    try:
        await writer.append("vm:150", 0, [stage(1), stage(2)])
        await wait_for(lambda: len(seen) == 2, what="the first stages")

        assert nats_server.pid is not None
        os.kill(nats_server.pid, signal.SIGKILL)
        await writer.append("vm:150", 2, [stage(3)])  # while the server is down or coming up
        await wait_for(lambda: nats_server.restarts == 1, what="nats-server restarted")
        await writer.append("vm:150", 3, [stage(4), stage(5)])
        await writer.append("vm:150", 5, [TaskEnded(task="t1", ok=True, state="running")])
        await asyncio.wait_for(following, 20)
    finally:
        following.cancel()
        await relay.stop()
        await writer_nc.close()
        await writer.close()
    assert [(e.version, e.data.get("step")) for e in seen] == [
        (1, "stage 1"), (2, "stage 2"), (3, "stage 3"), (4, "stage 4"), (5, "stage 5"),
        (6, None),
    ]  # fmt: skip
    assert seen[-1].type == "vm.task_ended"
