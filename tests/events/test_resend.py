"""A command carrying its task id is sent again while unanswered (events/resend.py), against a
real nats-server: a holder that swallowed it, or died with it, does not cost the caller the
command's whole deadline."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from events.bus import NoResponders, flush_all
from events.errors import CommandFailed
from events.nats_server import EmbeddedNats
from events.permissions import Role
from events.resend import command_resent

SUBJECT = "cairn.cmd.test.resend"


@pytest.fixture
async def gateway(nats_server: EmbeddedNats) -> AsyncIterator[Client]:
    """A gateway's connection (it may send commands; ``nc``, a host's, answers them)."""
    client = await nats_server.connect(Role.GATEWAY)
    yield client
    await client.close()


async def test_a_swallowed_command_is_sent_again_with_its_task_and_deadline(
    nc: Client, gateway: Client
) -> None:
    copies: list[tuple[dict[str, Any], str]] = []

    async def holder(msg: Msg) -> None:
        copies.append((json.loads(msg.data), (msg.headers or {}).get("Cairn-Deadline", "")))
        if len(copies) >= 3:  # the first two are lost (a holder that died with them)
            await msg.respond(b'{"vmid": 100}')

    sub = await nc.subscribe(SUBJECT, cb=holder)
    await flush_all(nc)
    began = time.monotonic()
    reply = await command_resent(gateway, SUBJECT, {"task": "t1"}, 30.0, resend_every=0.3)
    assert reply == {"vmid": 100}
    assert time.monotonic() - began < 5
    assert [c for c, _ in copies] == [{"task": "t1"}] * 3
    assert len({d for _, d in copies}) == 1  # one deadline for every copy
    await sub.unsubscribe()


async def test_the_next_holder_gets_the_copy_once_the_dead_one_is_gone(
    nc: Client, gateway: Client
) -> None:
    """The first holder takes the command and vanishes (its subscription gone: NATS says no
    responders); the copies wait for the next holder instead of failing."""
    taken = asyncio.Event()

    async def dying(msg: Msg) -> None:
        taken.set()

    first = await nc.subscribe(SUBJECT, cb=dying)
    await flush_all(nc)
    asked = asyncio.create_task(
        command_resent(gateway, SUBJECT, {"task": "t2"}, 30.0, resend_every=0.3)
    )
    await taken.wait()
    await first.unsubscribe()  # it died
    await asyncio.sleep(1.0)  # no holder for a while: the copies meet "no responders"
    assert not asked.done()

    async def next_holder(msg: Msg) -> None:
        await msg.respond(b'{"error": {"status": 409, "message": "VM 100 is busy"}}')

    second = await nc.subscribe(SUBJECT, cb=next_holder)
    with pytest.raises(CommandFailed) as refused:
        await asyncio.wait_for(asked, 10)
    assert (refused.value.status, refused.value.message) == (409, "VM 100 is busy")
    await second.unsubscribe()


async def test_nobody_serving_at_the_first_try_is_said_at_once(gateway: Client) -> None:
    began = time.monotonic()
    with pytest.raises(NoResponders):
        await command_resent(gateway, SUBJECT, {"task": "t3"}, 30.0)
    assert time.monotonic() - began < 2
