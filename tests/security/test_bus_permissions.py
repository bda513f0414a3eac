"""The bus is closed: an attacker on loopback with a NATS client, against the embedded server as
``cairn up`` starts it (its keyring and configuration made at first start, nothing configured).

Every row of the permission table (``events/permissions.py``) is tried from outside: what a
role may not publish or subscribe to is refused by the server itself, and what it may do works.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from events.access import NatsAccess
from events.bus import flush_all
from events.consumers import ConsumerBroker
from events.credentials import Keyring
from events.follow import Follower
from events.jetstream import STREAM, StreamSettings, ensure_stream
from events.nats_server import EmbeddedNats
from events.permissions import RUNNERS_QUEUE, Role
from tests.conftest import wait_for


class Attempt:
    """A client that records the server's refusals (nats-py reports them to ``error_cb``)."""

    def __init__(self) -> None:
        self.refusals: list[str] = []
        self.nc = Client()

    async def connect(self, server: EmbeddedNats, role: Role | None) -> Attempt:
        async def on_error(exc: Exception) -> None:
            self.refusals.append(str(exc).lower())

        options: dict[str, Any] = {}
        if role is not None:
            assert server.keyring is not None
            options = NatsAccess(server.url, server.keyring).client_options(role)
        await self.nc.connect(
            server.url,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            error_cb=on_error,
            **options,
        )
        return self

    async def refused(self, what: str, subject: str) -> bool:
        """Whether the server refused the last action on ``subject``: its -ERR comes before
        the answer to a flush's PING, and nats-py hands it to ``error_cb`` in a task of its
        own, so it is waited for (a refusal that never comes fails the test at the time-out)."""
        await self.nc.flush(timeout=5)
        wanted = f'{what} to "{subject}"'.lower()  # nats-py lower-cases the error text
        with contextlib.suppress(AssertionError):
            await wait_for(lambda: any(wanted in r for r in self.refusals), timeout=5, what=wanted)
        return any(wanted in r for r in self.refusals)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    async with EmbeddedNats(tmp_path / "nats") as srv:
        host = await srv.connect(Role.HOST)
        await ensure_stream(host.jetstream(), StreamSettings())
        await host.close()
        yield srv


async def attempt(server: EmbeddedNats, role: Role | None) -> AsyncIterator[Attempt]:
    a = await Attempt().connect(server, role)
    try:
        yield a
    finally:
        await a.nc.close()


async def test_an_anonymous_client_cannot_connect(server: EmbeddedNats) -> None:
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(server.url, allow_reconnect=False, max_reconnect_attempts=0)


async def test_a_made_up_key_cannot_connect(server: EmbeddedNats, tmp_path: Path) -> None:
    stranger = Keyring.create(tmp_path / "stranger", [Role.HOST])
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(
            server.url,
            nkeys_seed_str=stranger.seed(Role.HOST),
            allow_reconnect=False,
            max_reconnect_attempts=0,
        )


def test_the_keyring_is_readable_by_its_owner_alone(server: EmbeddedNats) -> None:
    assert server.keyring is not None
    assert stat.S_IMODE(server.keyring.path.stat().st_mode) == 0o700
    files = sorted(p.name for p in server.keyring.path.iterdir())
    assert files == ["events.key", "gateway.nk", "host.nk", "observer.nk", "runner.nk"]
    for path in server.keyring.path.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    # The server's configuration holds public keys only.
    config = (server.store_dir / "nats-server.conf").read_text()
    for role in Role:
        assert server.keyring.public_key(role) in config
        assert server.keyring.seed(role) not in config


# What each role may NOT publish: the attacks of issue 26, one row per role.
FORBIDDEN_PUBLISH = {
    Role.OBSERVER: [
        "cairn.cmd.vm.do", "cairn.cmd.vm.install", "cairn.functions.run",
        "cairn.evt.vm.100", f"$JS.API.STREAM.MSG.DELETE.{STREAM}", f"$JS.API.STREAM.PURGE.{STREAM}",
        f"$JS.API.STREAM.DELETE.{STREAM}", "$KV.CAIRN_LEASES.vm", "$O.CAIRN_CODE.C.abc",
        "$JS.API.STREAM.CREATE.EVIL", "cairn.functions.reply.x.y", "_INBOX_gateway.x",
        f"$JS.API.STREAM.INFO.{STREAM}", f"$JS.API.CONSUMER.CREATE.{STREAM}", "cairn.deliver.x",
        "cairn.events.follow.gateway",
    ],
    Role.GATEWAY: [
        "cairn.evt.vm.100", f"$JS.API.STREAM.MSG.DELETE.{STREAM}", f"$JS.API.STREAM.PURGE.{STREAM}",
        "$KV.CAIRN_LEASES.vm", "$JS.API.STREAM.MSG.GET.KV_CAIRN_LEASES", "$O.CAIRN_CODE.C.abc",
        "$JS.API.STREAM.DELETE.OBJ_CAIRN_CODE", "cairn.functions.reply.x.y", "_INBOX_host.x",
        f"$JS.API.STREAM.INFO.{STREAM}", f"$JS.API.CONSUMER.CREATE.{STREAM}", "$JS.API.INFO",
        "cairn.deliver.x", "cairn.events.follow.observer",
    ],
    Role.RUNNER: [
        "cairn.cmd.vm.do", "cairn.cmd.functions.upload", "cairn.evt.functions.x",
        "$JS.API.STREAM.INFO.CAIRN_EVENTS", "$KV.CAIRN_LEASES.functions", "_INBOX_gateway.x",
        "cairn.functions.reply.x.y", "cairn.functions.run", "cairn.events.follow",
    ],
    # A VM's safe change runs its function checks over the gateway role's connection, so the
    # hosts' account, where JetStream answers, never asks runners and never hears a run.
    Role.HOST: ["cairn.functions.run", "cairn.functions.reply.x.y", "_INBOX_gateway.x"],
}  # fmt: skip

# What each role may NOT subscribe to (and so never hear).
FORBIDDEN_SUBSCRIBE = {
    Role.OBSERVER: [
        "cairn.cmd.vm.install", "cairn.cmd.>", "cairn.functions.run", "cairn.functions.reply.>",
        "_INBOX.>", "_INBOX_host.>", "_INBOX_gateway.>", "$KV.CAIRN_LEASES.>", ">",
    ],
    Role.GATEWAY: [
        "cairn.cmd.vm.install", "cairn.functions.run", "cairn.evt.>", "_INBOX_host.>",
        "_INBOX_runner.>",
    ],
    Role.RUNNER: [
        "cairn.cmd.>", "cairn.evt.>", "cairn.functions.reply.>", "_INBOX_gateway.>",
        # Runs only as a member of the runners' queue group: never beside it.
        "cairn.functions.run", "cairn.functions.>", "cairn.functions.runtimes",
    ],
    Role.HOST: [
        "cairn.functions.run", "cairn.functions.reply.>", "_INBOX_gateway.>",
        "cairn.deliver.gateway.>",
    ],
}  # fmt: skip


# Each forbidden subject with the action tried on it, named as the server's refusal names it.
FORBIDDEN = [
    (action, role, subject)
    for action, table in (("publish", FORBIDDEN_PUBLISH), ("subscription", FORBIDDEN_SUBSCRIBE))
    for role, subjects in table.items()
    for subject in subjects
]


@pytest.mark.parametrize(("action", "role", "subject"), FORBIDDEN)
async def test_a_role_cannot_publish_or_subscribe_outside_its_row(
    server: EmbeddedNats, action: str, role: Role, subject: str
) -> None:
    async for a in attempt(server, role):
        if action == "publish":
            await a.nc.publish(subject, b'{"forged": true}')
        else:
            await a.nc.subscribe(subject)
        assert await a.refused(action, subject), a.refusals


async def test_a_runner_takes_runs_only_in_the_runners_queue_group(server: EmbeddedNats) -> None:
    async for a in attempt(server, Role.RUNNER):
        await a.nc.subscribe("cairn.functions.run", queue="elsewhere")
        assert await a.refused("subscription", "cairn.functions.run"), a.refusals


async def test_each_role_can_do_what_its_row_says(server: EmbeddedNats) -> None:
    """The same server, the allowed half of the table: a gateway's command reaches a host and
    its answer comes back; a run reaches the runner and its replies reach the gateway; an
    observer reads the events a host published."""
    roles = (Role.HOST, Role.GATEWAY, Role.RUNNER, Role.OBSERVER)
    host, gateway, runner, observer = [await server.connect(role) for role in roles]
    try:

        async def answer(msg: Msg) -> None:
            await msg.respond(b'{"ok":1}')

        await host.subscribe("cairn.cmd.vm.do", cb=answer)
        await flush_all(host)
        reply = await gateway.request("cairn.cmd.vm.do", b"{}", timeout=5)
        assert json.loads(reply.data) == {"ok": 1}

        heard: asyncio.Queue[bytes] = asyncio.Queue()

        async def take_run(msg: Msg) -> None:
            for part in (b"log", b"result"):  # several replies, as a streaming run sends
                await runner.publish(msg.reply, part)

        async def hear(msg: Msg) -> None:
            heard.put_nowait(msg.data)

        await runner.subscribe("cairn.functions.run", queue=RUNNERS_QUEUE, cb=take_run)
        await gateway.subscribe("cairn.functions.reply.g1.*", cb=hear)
        await flush_all(runner)
        await flush_all(gateway)
        await gateway.publish("cairn.functions.run", b"{}", reply="cairn.functions.reply.g1.r1")
        assert [await asyncio.wait_for(heard.get(), 5) for _ in range(2)] == [b"log", b"result"]

        broker = await ConsumerBroker(host).start()
        events: asyncio.Queue[Msg] = asyncio.Queue()

        async def on_event(_: int, msg: Msg) -> None:
            events.put_nowait(msg)

        async with Follower(observer, "cairn.evt.>", on_event, after=0):
            await host.jetstream().publish("cairn.evt.vm.100", b'{"type":"vm.progress"}')
            msg = await asyncio.wait_for(events.get(), 5)
        assert (msg.subject, msg.data) == ("cairn.evt.vm.100", b'{"type":"vm.progress"}')
        await broker.stop()
    finally:
        for nc in (host, gateway, runner, observer):
            await nc.close()


async def test_no_one_but_the_asker_can_answer_a_request(server: EmbeddedNats) -> None:
    """A request's reply subject is the asker's own inbox: a runner (the role that may answer
    runs) still cannot publish there, and no other role can hear it."""
    gateway = await server.connect(Role.GATEWAY)
    try:
        inbox = gateway.new_inbox()
        assert inbox.startswith("_INBOX_gateway.")
        for role in (Role.RUNNER, Role.OBSERVER, Role.HOST):
            async for a in attempt(server, role):
                await a.nc.publish(inbox, b'{"forged": "answer"}')
                assert await a.refused("publish", inbox), (role, a.refusals)
    finally:
        await gateway.close()
