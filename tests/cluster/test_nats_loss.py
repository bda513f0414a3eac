"""One of the three nats-servers is killed (`kill -9`) while installs run: clients of the
cluster fail over to the others, the installs finish, and JetStream holds every stored event
once."""

from __future__ import annotations

import asyncio
import contextlib

import attrs
import pytest
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from events.bus import CommandTimeout
from events.follow import Follower
from events.jetstream import STREAM
from events.leases import BUCKET
from events.permissions import Role
from events.store import EventStore
from tests.cluster.conftest import Cluster, dump, outcome
from tests.conftest import wait_for
from tests.vm.conftest import Sse
from tests.vm.drivers import DRIVERS

# With both drivers (issue 27): the hosts drive the simulated Proxmox through its CLI or its API.
pytestmark = pytest.mark.parametrize("pve_driver", DRIVERS, indirect=True)


async def _stored(url: str) -> set[str]:
    """Every VM event in the event store, as `stream:version`."""
    store = await EventStore.open(url)
    try:
        found = set()
        for stream in await store.stream_names("vm:"):
            found |= {f"{r.stream}:{r.version}" for r in await store.read_stream(stream)}
        return found
    finally:
        await store.close()


@pytest.mark.parametrize("led", [STREAM, f"KV_{BUCKET}"])
async def test_kill_one_nats_server_during_installs(cluster: Cluster, led: str) -> None:
    """``led``: the stream whose leader's server is killed (the events, or the leases: a
    lease must outlive the election of a new leader)."""
    hosts = cluster.hosts
    installs = [asyncio.create_task(hosts[i % len(hosts)].install(id=160 + i)) for i in range(6)]
    # Every install has begun in Proxmox before the server goes.
    await wait_for(lambda: len(cluster.guests()) >= 3, timeout=60, what="installs under way")
    owner = await cluster.owner()
    nc = await cluster.nats.connect()
    try:
        info = await nc.jetstream().stream_info(led)
    finally:
        await nc.close()
    assert info.cluster is not None and info.cluster.replicas, "the stream has no replicas"
    leader = next(i for i, s in enumerate(cluster.nats.servers) if s.name == info.cluster.leader)
    await cluster.nats.kill(leader)
    alive = [s.url for s in cluster.nats.servers if s.running]
    results: list[Sse] = await asyncio.gather(*installs)
    failed = [outcome(r) for r in results if outcome(r).get("status") != "success"]
    assert not failed, f"{failed}\n{dump(cluster)}"
    assert cluster.guests() == {160 + i for i in range(6)}
    assert await owner.runs_vm_actors(), "the VM actors moved: the lease did not survive"

    # JetStream (through the two servers left) holds each stored event exactly once.
    stored = await _stored(hosts[0].env["CAIRN_EVENT_STORE"])
    published: list[str] = []

    async def on_event(_: int, msg: Msg) -> None:
        # `<stream>:<version>:<a piece of its signature>` (events/jetstream.py)
        published.append((msg.headers or {}).get("Nats-Msg-Id", "").rsplit(":", 1)[0])

    nc = await attrs.evolve(cluster.nats.access, url=",".join(alive)).connect(Role.HOST)
    try:
        # The stream may still be electing its new leader: a consumer is refused meanwhile, or
        # its request goes unanswered (the gateways' followers retry the same way).
        started: list[Follower] = []

        async def follow() -> bool:
            with contextlib.suppress(NatsError, TimeoutError, CommandTimeout):
                started.append(await Follower(nc, "cairn.evt.vm.>", on_event, after=0).start())
            return bool(started)

        await wait_for(follow, timeout=30, what="a consumer on the events stream")
        follower = started[0]
        try:
            await wait_for(
                lambda: len(published) >= len(stored), timeout=30, what="the stream read back"
            )
        finally:
            await follower.stop()
    finally:
        await nc.close()
    assert len(published) == len(set(published)), "an event published twice"
    assert set(published) == stored
