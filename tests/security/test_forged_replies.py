"""An insider with a key cairn issues (gateway, runner, observer) names reply subjects that
point at cairn's own state: the lease bucket, the code store, the JetStream API, the events,
the commands and other roles' inboxes. Whoever answers (JetStream, a host, a runner) answers in
the asker's own account (events/permissions.py), so nothing of cairn's changes: afterwards
the lease values, the code objects, the streams, the events stream's messages and a durable
consumer are exactly as before. Against one server as ``cairn up`` starts it and against a
three-server TLS cluster made as ``cairn cluster init`` makes one.

The responders here answer every reply subject blindly (the hosts' and runners' own check,
``events.bus.answerable``, is tested apart): what holds is the accounts alone.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, KeyValueConfig

from actors.functions.codestore import CodeStore
from actors.functions.sharedcode import SharedCode
from events.access import NatsAccess
from events.bus import flush_all, server_urls
from events.consumers import ConsumerBroker
from events.jetstream import STREAM, StreamSettings, ensure_stream
from events.nats_server import EmbeddedNats
from events.permissions import CODE_BUCKET, LEASE_BUCKET, RUNNERS_QUEUE, Role
from tests.conftest import wait_for
from tests.nats_cluster import NatsCluster

CODE = "def main(input):\n    return 42\n"
KEPT = "kept"  # a durable consumer a forged CONSUMER.DELETE would remove
FLOOD = 10_000
ErrorCallback = Callable[[Exception], Awaitable[None]]


class Bus:
    """A closed bus with cairn's state on it, and blind responders."""

    def __init__(self, access: NatsAccess, replicas: int, tmp_path: Path) -> None:
        self.access = access
        self.replicas = replicas
        self.tmp_path = tmp_path
        self.clients: list[Client] = []
        self.sha = ""
        self.chunks = ""
        self.broker: ConsumerBroker | None = None

    async def client(self, role: Role, on_error: ErrorCallback | None = None) -> Client:
        """A client of ``role``; ``on_error`` hears the server's refusals."""
        if on_error is None:
            nc = await self.access.connect(role)
        else:
            nc = Client()
            await nc.connect(
                server_urls(self.access.url),
                error_cb=on_error,
                max_reconnect_attempts=0,
                **self.access.client_options(role),
            )
        self.clients.append(nc)
        return nc

    async def led(self, stream: str) -> None:
        """Until ``stream`` has a leader: a replicated stream just made answers no publish
        before its members elect one (a client sees "no responders")."""

        async def elected() -> bool:
            info = await self.host.jetstream().stream_info(stream)
            return info.cluster is None or bool(info.cluster.leader)

        await wait_for(elected, timeout=30, what=f"a leader of {stream}")

    async def start(self) -> Bus:
        self.host = await self.client(Role.HOST)
        js = self.host.jetstream()
        await ensure_stream(js, StreamSettings(replicas=self.replicas))
        await self.led(STREAM)
        for n in range(5):
            await js.publish(f"cairn.evt.vm.{100 + n}", json.dumps({"n": n}).encode())
        await js.add_consumer(STREAM, ConsumerConfig(durable_name=KEPT, num_replicas=1))
        kv = await js.create_key_value(KeyValueConfig(LEASE_BUCKET, replicas=self.replicas))
        await self.led(f"KV_{LEASE_BUCKET}")
        await kv.put("vm", b'{"holder": "host-a"}')
        await kv.put("functions", b'{"holder": "host-b"}')
        code = SharedCode(self.host, CodeStore(self.tmp_path / "code"), self.replicas)
        await code._objects()
        await self.led(f"OBJ_{CODE_BUCKET}")
        self.sha = await code.put(CODE)
        self.chunks = (await (await js.object_store(CODE_BUCKET)).get_info(self.sha)).nuid

        # A host and a runner that answer whatever reply subject comes, with the body a
        # JetStream API call takes as a valid request.
        async def blindly(msg: Msg) -> None:
            if msg.reply:
                await msg.respond(b"{}")

        for subject in ("cairn.cmd.>", "cairn.q.>"):
            await self.host.subscribe(subject, cb=blindly)
        self.broker = await ConsumerBroker(self.host).start()
        runner = await self.client(Role.RUNNER)
        for subject in ("cairn.functions.run", "cairn.functions.runtimes"):
            await runner.subscribe(subject, queue=RUNNERS_QUEUE, cb=blindly)
        await flush_all(runner)
        await flush_all(self.host)
        return self

    async def stop(self) -> None:
        if self.broker is not None:
            await self.broker.stop()
        for nc in self.clients:
            with contextlib.suppress(Exception):
                await nc.close()

    def forged_replies(self) -> list[str]:
        meta = base64.urlsafe_b64encode(self.sha.encode()).decode()
        return [
            f"$KV.{LEASE_BUCKET}.vm",
            f"$KV.{LEASE_BUCKET}.functions",
            f"$O.{CODE_BUCKET}.M.{meta}",
            f"$O.{CODE_BUCKET}.C.{self.chunks}",
            f"$JS.API.STREAM.PURGE.{STREAM}",
            f"$JS.API.STREAM.DELETE.{STREAM}",
            f"$JS.API.STREAM.PURGE.KV_{LEASE_BUCKET}",
            f"$JS.API.STREAM.DELETE.KV_{LEASE_BUCKET}",
            f"$JS.API.STREAM.DELETE.OBJ_{CODE_BUCKET}",
            f"$JS.API.CONSUMER.DELETE.{STREAM}.{KEPT}",
            "cairn.evt.vm.100",
            "cairn.cmd.vm.install",
            "cairn.q.vm.list",
            "_INBOX_host.spy",
            "_INBOX_gateway.spy",
            "cairn.functions.reply.g.spy",
            "cairn.deliver.gateway.spy",
            "cairn.deliver.spy",
        ]

    async def snapshot(self) -> dict[str, Any]:
        """Everything of cairn's a forged reply could change, read by a host."""
        await flush_all(self.host)
        js = self.host.jetstream()
        kv = await js.key_value(LEASE_BUCKET)
        # The known keys read by name, and the bucket's stream state for any other: a key
        # listing is an ordered consumer, which a cluster may place on a member that has not
        # yet applied the last puts, and which then lists no keys at all.
        leases: dict[str, Any] = {}
        for key in ("vm", "functions"):
            entry = await kv.get(key)
            leases[key] = (entry.value, entry.revision)
        lease_stream = (await js.stream_info(f"KV_{LEASE_BUCKET}")).state
        leases["stream"] = (lease_stream.messages, lease_stream.last_seq)
        store = await js.object_store(CODE_BUCKET)
        info = await store.get_info(self.sha)
        code = (await store.get(self.sha)).data
        state = (await js.stream_info(STREAM)).state
        events = []
        for seq in range(state.first_seq, state.last_seq + 1):
            msg = await js.get_msg(STREAM, seq)
            events.append((msg.seq, msg.subject, msg.data, msg.headers))
        streams = sorted(s.config.name or "" for s in await js.streams_info())
        code_stream = (await js.stream_info(f"OBJ_{CODE_BUCKET}")).state
        return {
            "leases": leases,
            "code": (info.digest, info.size, info.nuid, code),
            "code stream": (code_stream.messages, code_stream.last_seq),
            "streams": streams,
            "events": (state.messages, state.bytes, state.first_seq, state.last_seq),
            "stored events": events,
            "kept consumer": (await js.consumer_info(STREAM, KEPT)).name,
        }


@pytest.fixture(params=["one server", "three-server TLS cluster"])
async def bus(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Bus]:
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "one server":
            server = await stack.enter_async_context(EmbeddedNats(tmp_path / "nats"))
            started = Bus(NatsAccess(server.url, server.keyring), 1, tmp_path)
        else:
            cluster = await stack.enter_async_context(NatsCluster(tmp_path / "cluster", 3))
            assert cluster.kit is not None
            started = Bus(cluster.access, 3, tmp_path)
        stack.push_async_callback(started.stop)
        yield await started.start()


def follow_request(deliver: str = "cairn.deliver.attacker1") -> bytes:
    return json.dumps({"deliver": deliver, "subject": "cairn.evt.>", "after": 0}).encode()


async def follow_events(
    client: Client, deliver: str, timeout: float = 10
) -> tuple[asyncio.Queue[Msg], Msg]:
    """Follow the event stream into `deliver` as `client`: the queue its events arrive in (the
    consumer's status messages left out) and the host's answer to the follow request."""
    heard: asyncio.Queue[Msg] = asyncio.Queue()

    async def hear(msg: Msg) -> None:
        if not (msg.headers or {}).get("Status"):
            heard.put_nowait(msg)

    await client.subscribe(deliver, cb=hear)
    await flush_all(client)
    answer = await client.request("cairn.events.follow", follow_request(deliver), timeout=timeout)
    return heard, answer


# What each role sends with a forged reply: its own row (the requests it may make) and the
# JetStream API calls a reader used to make, with bodies JetStream would act on.
REQUESTS: dict[Role, list[tuple[str, bytes]]] = {
    Role.GATEWAY: [
        ("cairn.q.functions.list", b"{}"),
        ("cairn.q.vm.list", b"{}"),
        ("cairn.cmd.vm.do", b"{}"),
        ("cairn.functions.run", b"{}"),
        ("cairn.functions.runtimes", b"{}"),
        ("cairn.events.follow", follow_request()),
        ("cairn.events.follow", b"{}"),
        (f"$JS.API.STREAM.INFO.{STREAM}", b""),
        ("$JS.API.INFO", b""),
    ],
    Role.OBSERVER: [
        ("cairn.events.follow", follow_request()),
        ("cairn.events.follow", follow_request("cairn.deliver.$KV")),
        ("cairn.events.follow", b"{}"),
        (f"$JS.API.STREAM.INFO.{STREAM}", b""),
        ("$JS.API.STREAM.NAMES", b"{}"),
        (
            f"$JS.API.CONSUMER.CREATE.{STREAM}",
            json.dumps(
                {"stream_name": STREAM, "config": {"deliver_subject": f"$KV.{LEASE_BUCKET}.vm"}}
            ).encode(),
        ),
    ],
    Role.RUNNER: [
        (f"$JS.API.STREAM.INFO.{STREAM}", b""),
        ("cairn.functions.runtimes", b"{}"),
        ("cairn.q.vm.list", b"{}"),
        ("cairn.events.follow", follow_request()),
    ],
}


@pytest.mark.parametrize("role", [Role.GATEWAY, Role.OBSERVER, Role.RUNNER])
async def test_no_forged_reply_changes_anything(bus: Bus, role: Role) -> None:
    before = await bus.snapshot()
    # Other roles' inboxes: what lands there would be read by them as an answer.
    spied: list[str] = []

    async def spy(msg: Msg) -> None:
        spied.append(msg.subject)

    listeners = {Role.HOST: "_INBOX_host.spy", Role.GATEWAY: "_INBOX_gateway.spy"}
    for owner, subject in listeners.items():
        if owner is not role:
            await (await bus.client(owner)).subscribe(subject, cb=spy)
    if role is not Role.GATEWAY:
        gateway = await bus.client(Role.GATEWAY)
        await gateway.subscribe("cairn.functions.reply.>", cb=spy)
        await flush_all(gateway)

    attacker = await bus.client(role)
    for subject, body in REQUESTS[role]:
        for reply in bus.forged_replies():
            await attacker.publish(subject, body, reply=reply)
    await flush_all(attacker)
    # The answers, had they landed anywhere of cairn's, would have by the time one more
    # request and its answer have made the same trip.
    if role is Role.GATEWAY:
        assert await attacker.request("cairn.q.vm.list", b"{}", timeout=10)
    if role is Role.OBSERVER:
        assert await attacker.request("cairn.events.follow", b"{}", timeout=10)

    after = await bus.snapshot()
    assert after == before
    assert spied == []


async def test_a_flood_from_each_non_host_key_leaves_the_events_stream_unchanged(
    bus: Bus,
) -> None:
    before = await bus.snapshot()
    for role in (Role.GATEWAY, Role.OBSERVER, Role.RUNNER):
        attacker = await bus.client(role)
        for n in range(FLOOD):
            junk = b'{"type":"vm.installed","junk":%d}' % n
            if n % 2:
                await attacker.publish("cairn.evt.vm.100", junk)
            else:
                # Its own row, the answer aimed at the events.
                request = REQUESTS[role][0][0]
                await attacker.publish(request, junk, reply="cairn.evt.vm.100")
        await flush_all(attacker, timeout=30)
    assert await (await bus.client(Role.GATEWAY)).request("cairn.q.vm.list", b"{}", timeout=10)
    after = await bus.snapshot()
    assert after["events"] == before["events"]
    assert after["stored events"] == before["stored events"]


async def test_a_runner_never_receives_a_run_outside_the_queue_group(bus: Bus) -> None:
    """A runner key subscribing beside the queue group is refused; the run goes to a queue
    member alone, and its answer back to the gateway that sent it."""
    refusals: list[str] = []

    async def refused(exc: Exception) -> None:
        refusals.append(str(exc).lower())

    beside = await bus.client(Role.RUNNER, refused)
    overheard: list[bytes] = []

    async def overhear(msg: Msg) -> None:
        overheard.append(msg.data)

    await beside.subscribe("cairn.functions.run", cb=overhear)
    await beside.subscribe("cairn.functions.run", queue="elsewhere", cb=overhear)
    await beside.subscribe("cairn.functions.>", cb=overhear)
    await flush_all(beside)
    gateway = await bus.client(Role.GATEWAY)
    for n in range(5):
        secret = json.dumps({"id": f"run{n}", "input": '{"api_token": "s3cret"}'}).encode()
        answer = await gateway.request("cairn.functions.run", secret, timeout=10)
        assert answer.data == b"{}"
    await flush_all(beside)
    assert overheard == []
    assert sum("permissions violation for subscription" in r for r in refusals) == 3, refusals


async def test_an_observer_still_reads_events(bus: Bus) -> None:
    """The observer's row: a consumer a host makes for it delivers the stream's events."""
    observer = await bus.client(Role.OBSERVER)
    heard, answer = await follow_events(observer, "cairn.deliver.reader01")
    assert json.loads(answer.data)["after"] == 0
    first = await asyncio.wait_for(heard.get(), 10)
    assert (first.subject, json.loads(first.data)) == ("cairn.evt.vm.100", {"n": 0})
    assert first.metadata.sequence.stream == 1
