"""The local JetStream cluster helper: three real servers, a replicated stream that survives
the loss of any one of them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import PubAck, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import NoStreamResponseError

from tests.nats_cluster import NatsCluster, cluster_config


async def publish_until_stored(js: JetStreamContext, subject: str, data: bytes) -> PubAck:
    """While the stream elects a new leader (or the client reconnects) a publish gets no
    responder; a writer tries again, with the same message id so it is stored once."""
    deadline = asyncio.get_running_loop().time() + 15
    while True:
        try:
            return await js.publish(subject, data, timeout=2, headers={"Nats-Msg-Id": "m2"})
        except (NoStreamResponseError, NatsTimeout):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)  # an election offers nothing to await on


def test_config_names_the_server_and_routes_to_every_member(tmp_path: Path) -> None:
    text = cluster_config("n2", "127.0.0.1", 4223, 6223, tmp_path, [("127.0.0.1", 6222)])
    assert "server_name: n2" in text
    assert 'listen: "127.0.0.1:4223"' in text
    assert '"nats-route://127.0.0.1:6222"' in text
    assert f'store_dir: "{tmp_path}"' in text


async def test_a_replicated_stream_survives_one_server_killed(tmp_path: Path) -> None:
    async with NatsCluster(tmp_path, 3) as cluster:
        nc = await cluster.connect()  # as a cairn host: TLS, its nkey
        try:
            js = nc.jetstream()
            await js.add_stream(
                StreamConfig(
                    name="T", subjects=["cairn.evt.t.>"], num_replicas=3, storage=StorageType.FILE
                )
            )
            await js.publish("cairn.evt.t.a", b"1")
            await cluster.kill(1)
            ack = await publish_until_stored(js, "cairn.evt.t.a", b"2")
            assert ack.seq == 2
            await cluster.restart(1)
            info = await js.stream_info("T")
            assert info.state.messages == 2
            assert info.config.num_replicas == 3
        finally:
            await nc.close()
    assert all(not s.running for s in cluster.servers)
