"""Commands over NATS request/reply: replies, refusals, failures, nobody listening, time-out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from actors.runtime import Rejected
from events.bus import (
    DEADLINE_HEADER,
    BusUnavailable,
    CommandFailed,
    CommandTimeout,
    NoResponders,
    command,
    flush_all,
    serve_json,
)
from events.nats_server import EmbeddedNats
from tests.conftest import wait_for


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    """An open server: these tests are of request/reply on any subject, not of cairn's
    permissions (tests/security has those)."""
    async with EmbeddedNats(tmp_path / "nats", secure=False) as server:
        yield server


async def test_a_reply_comes_back_as_json(nc: Client) -> None:
    async def echo(payload: Any) -> Any:
        return {"got": payload}

    await serve_json(nc, "cmd.echo", echo)
    assert await command(nc, "cmd.echo", {"a": [1, "ü"]}) == {"got": {"a": [1, "ü"]}}


async def test_a_refusal_keeps_its_status_and_message(nc: Client) -> None:
    async def refuse(_: Any) -> Any:
        raise Rejected(409, "VM 120 is busy")

    await serve_json(nc, "cmd.refuse", refuse)
    with pytest.raises(CommandFailed) as info:
        await command(nc, "cmd.refuse", {})
    assert (info.value.status, info.value.message) == (409, "VM 120 is busy")


async def test_an_unexpected_failure_is_a_500_not_a_time_out(nc: Client) -> None:
    async def crash(_: Any) -> Any:
        raise ValueError("bad state")

    await serve_json(nc, "cmd.crash", crash)
    with pytest.raises(CommandFailed) as info:
        await command(nc, "cmd.crash", {}, timeout=5)
    assert (info.value.status, info.value.message) == (500, "bad state")


async def test_nobody_listening_is_a_503(nc: Client) -> None:
    with pytest.raises(NoResponders) as info:
        await command(nc, "cmd.nobody", {})
    assert info.value.status == 503
    assert "no service answers on cmd.nobody" in info.value.message


async def test_a_slow_handler_is_a_504_time_out(nc: Client) -> None:
    release = asyncio.Event()

    async def slow(_: Any) -> Any:
        await release.wait()
        return {}

    await serve_json(nc, "cmd.slow", slow)
    with pytest.raises(CommandTimeout) as info:
        await command(nc, "cmd.slow", {}, timeout=0.2)
    release.set()
    assert info.value.status == 504
    assert info.value.message == "no answer on cmd.slow within 0.2s"


async def test_a_queue_group_spreads_commands_over_hosts(nc: Client) -> None:
    seen: list[str] = []

    def host(name: str) -> Any:
        async def handle(_: Any) -> Any:
            seen.append(name)
            return name

        return handle

    await serve_json(nc, "cmd.q", host("a"), queue="workers")
    await serve_json(nc, "cmd.q", host("b"), queue="workers")
    answers = [await command(nc, "cmd.q", {}) for _ in range(40)]
    assert set(answers) == {"a", "b"}  # 40 draws from two hosts: both take work
    assert len(seen) == 40  # and each command was handled exactly once


async def test_concurrent_serving_lets_a_fast_command_pass_a_slow_one(nc: Client) -> None:
    release = asyncio.Event()

    async def handle(payload: Any) -> Any:
        if payload["slow"]:
            await release.wait()
        return payload["n"]

    await serve_json(nc, "cmd.conc", handle, concurrent=True)
    slow = asyncio.create_task(command(nc, "cmd.conc", {"slow": True, "n": 1}, timeout=10))
    # With one-at-a-time serving this would time out behind the slow command.
    assert await command(nc, "cmd.conc", {"slow": False, "n": 2}, timeout=5) == 2
    release.set()
    assert await slow == 1


async def test_a_command_past_its_deadline_is_dropped_with_a_log_line(
    nc: Client, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[Any] = []

    async def handler(payload: Any) -> Any:
        ran.append(payload)
        return {}

    await serve_json(nc, "cmd.late", handler)
    late = {DEADLINE_HEADER: f"{time.time() - 3:.3f}"}
    await nc.publish("cmd.late", b'{"n": 1}', reply="_INBOX.nobody", headers=late)
    assert await command(nc, "cmd.late", {"n": 2}) == {}  # in time: answered
    assert ran == [{"n": 2}]
    assert "dropped an expired command on cmd.late: its caller stopped waiting 3." in caplog.text


async def test_a_command_while_disconnected_is_a_503_at_once(nats_server: EmbeddedNats) -> None:
    client = await nats_server.connect()
    await nats_server.stop()
    try:
        await wait_for(lambda: not client.is_connected, what="the client to notice")
        with pytest.raises(BusUnavailable) as info:
            await asyncio.wait_for(command(client, "cmd.any", {}, timeout=60), 1)
        assert info.value.status == 503 and "NATS" in info.value.message
    finally:
        await client.close()


async def test_after_flush_all_another_connection_finds_the_subscription(
    nats_server: EmbeddedNats,
) -> None:
    """nats-py's flush can answer before a queued SUB reached the server; a request from
    another connection right after it then met "no responders" (23 of 300 here with a plain
    flush). After flush_all, every one finds its responder."""
    responder, asker = await nats_server.connect(), await nats_server.connect()
    try:

        async def answer(msg: Msg) -> None:
            await msg.respond(b"ok")

        for i in range(300):
            await responder.subscribe(f"t.{i}", cb=answer)
            await flush_all(responder)
            assert (await asker.request(f"t.{i}", b"", timeout=5)).data == b"ok", i
    finally:
        await responder.close()
        await asker.close()


async def test_a_request_whose_reply_names_no_inbox_is_dropped_unserved(nc: Client) -> None:
    """On an open bus (no accounts to map replies) a request may name any reply subject: the
    responder serves only one under a requester's inbox, so its answer cannot be sent into
    the lease bucket, the JetStream API or cairn's own subjects."""
    served: list[Any] = []

    async def handler(payload: Any) -> Any:
        served.append(payload)
        return {}

    await serve_json(nc, "cairn.q.functions.list", handler)
    landed: list[str] = []

    async def land(msg: Msg) -> None:
        landed.append(msg.subject)

    forged = ["$KV.CAIRN_LEASES.vm", "$JS.API.STREAM.PURGE.CAIRN_EVENTS", "cairn.evt.vm.1"]
    for subject in forged:
        await nc.subscribe(subject, cb=land)
    await flush_all(nc)
    for subject in forged:
        await nc.publish("cairn.q.functions.list", b'{"n":1}', reply=subject)
    # A request with a real inbox, after them: once it is answered, they have been handled.
    assert await command(nc, "cairn.q.functions.list", {"n": 2}) == {}
    assert served == [{"n": 2}]
    assert landed == []
