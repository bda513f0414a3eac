"""The event store under faults on a real PostgreSQL server: another client's lock on the
events table (briefly, then past the retry budget), the server stopped and started again, and
appends from two hosts racing on one database."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from events.errors import StoreWriteFailed
from events.store import (
    APPEND_LOCK,
    IDLE_IN_TRANSACTION,
    ConcurrencyConflict,
    EventStore,
    RetryPolicy,
)
from tests.conftest import opened_store, wait_for
from tests.events.sample_events import Incremented
from tests.postgres import PostgresServer


@pytest.fixture
async def budget_store(postgres_url: str) -> AsyncIterator[EventStore]:
    async with opened_store(postgres_url, RetryPolicy(budget=2.5)) as store:
        yield store


@pytest.fixture
async def other_client(
    postgres: PostgresServer, postgres_url: str
) -> AsyncIterator[asyncpg.Connection]:
    """Another client of the same database, as psql or a backup job would be."""
    conn = await asyncpg.connect(
        host="127.0.0.1", port=postgres.port, user="postgres", database=postgres_url.rsplit("/")[-1]
    )
    yield conn
    await conn.close()


async def lock_events(conn: asyncpg.Connection) -> asyncpg.transaction.Transaction:
    transaction = conn.transaction()
    await transaction.start()
    await conn.execute("LOCK TABLE events IN EXCLUSIVE MODE")
    return transaction


async def test_a_lock_released_within_the_budget_only_delays_the_append(
    budget_store: EventStore,
    other_client: asyncpg.Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await budget_store.append("counter:a", 0, [Incremented(1)])
    held = await lock_events(other_client)
    with caplog.at_level(logging.WARNING, "events.retry"):
        append = asyncio.ensure_future(budget_store.append("counter:a", 1, [Incremented(2)]))
        await wait_for(lambda: "retrying for up to" in caplog.text, what="a retry")
        await held.rollback()
        recorded = await append
    assert [r.version for r in recorded] == [2]
    assert "append to counter:a failed (canceling statement due to lock timeout)" in caplog.text


async def test_a_lock_held_past_the_budget_is_a_503_saying_why(
    budget_store: EventStore, other_client: asyncpg.Connection
) -> None:
    await budget_store.append("counter:b", 0, [Incremented(1)])
    held = await lock_events(other_client)
    with pytest.raises(StoreWriteFailed) as info:
        await budget_store.append("counter:b", 1, [Incremented(2)])
    assert info.value.status == 503 and not info.value.full
    assert info.value.message.startswith(
        "the event store refuses writes: canceling statement due to lock timeout"
    )
    await held.rollback()
    await budget_store.probe_writable()
    # Nothing half-written: the stream goes on from where it was.
    assert [r.version for r in await budget_store.append("counter:b", 1, [Incremented(2)])] == [2]


async def test_the_server_stopped_then_started_again_heals_without_reopening(
    postgres: PostgresServer, budget_store: EventStore
) -> None:
    await budget_store.append("counter:c", 0, [Incremented(1)])
    await asyncio.to_thread(postgres.stop)
    try:
        with pytest.raises(StoreWriteFailed) as info:
            await budget_store.append("counter:c", 1, [Incremented(2)])
        assert info.value.message.startswith("the event store refuses writes: ")
        with pytest.raises(StoreWriteFailed):
            await budget_store.probe_writable()
    finally:
        await asyncio.to_thread(postgres.start)
    await budget_store.probe_writable()
    assert [r.version for r in await budget_store.append("counter:c", 1, [Incremented(2)])] == [2]
    assert [r.event for r in await budget_store.read_stream("counter:c")] == [
        Incremented(1),
        Incremented(2),
    ]


async def test_two_hosts_appending_at_once_commit_in_position_order(postgres_url: str) -> None:
    """Positions are handed out in commit order even across connections: a reader that saw
    position n never later finds a smaller one committed behind it (the relay relies on it)."""
    hosts = [await EventStore.open(postgres_url) for _ in range(2)]
    seen: list[int] = []
    done = asyncio.Event()

    async def follow() -> None:
        position = 0
        while not done.is_set():
            for record in await hosts[0].read_all(after_position=position):
                seen.append(record.position)
                position = record.position
            await asyncio.sleep(0)

    async def write(host: EventStore, name: str) -> None:
        for version in range(40):
            await host.append(f"counter:{name}", version, [Incremented(version)])

    try:
        reader = asyncio.ensure_future(follow())
        await asyncio.gather(write(hosts[0], "a"), write(hosts[1], "b"))
        done.set()
        await reader
        everything = [r.position for r in await hosts[0].read_all(limit=1000)]
        assert len(everything) == 80
        # The follower, reading as the relay does, saw every row: none committed behind it.
        assert sorted(set(seen) | set(everything)) == everything
        assert seen == everything[: len(seen)] and len(set(seen)) == len(seen)
        with pytest.raises(ConcurrencyConflict):
            await hosts[1].append("counter:a", 0, [Incremented(0)])
    finally:
        for host in hosts:
            await host.close()


async def test_a_host_stalled_inside_its_append_holds_the_others_up_only_briefly(
    postgres_url: str,
) -> None:
    """A host paused (SIGSTOP, a frozen VM) between its insert and its commit keeps the
    database's append lock, and its connection stays open. The server ends such a session
    after `idle_in_transaction_session_timeout`, so the other hosts' appends go on within
    their retry budget; without it every host's writes fail until the paused one wakes."""
    stalled, other = [await EventStore.open(postgres_url) for _ in range(2)]
    inside = asyncio.Event()

    async def stall_after_insert(conn: AsyncConnection) -> None:
        if inside.is_set():
            return None  # awake again: the retry of its append does nothing more
        await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": APPEND_LOCK})
        await conn.execute(sa.text("SELECT 1"))
        inside.set()
        await asyncio.Event().wait()  # silent from here on, as a paused process is

    stuck = asyncio.ensure_future(stalled._write("append to counter:s", stall_after_insert))
    try:
        await inside.wait()
        started = time.monotonic()
        recorded = await other.append("counter:t", 0, [Incremented(1)])
        assert [r.version for r in recorded] == [1]
        assert time.monotonic() - started < IDLE_IN_TRANSACTION + 3
    finally:
        stuck.cancel()  # it wakes: its transaction is gone, the write is retried
        with contextlib.suppress(BaseException):
            await stuck
    try:
        # The stalled host, awake again, writes on (from a fresh connection) where it left.
        recorded = await stalled.append("counter:s", 0, [Incremented(1)])
        assert [r.version for r in recorded] == [1]
    finally:
        for host in (stalled, other):
            with contextlib.suppress(Exception):
                await host.close()


async def test_hosts_probing_a_fresh_store_at_once_do_not_refuse_each_other(
    postgres: PostgresServer,
) -> None:
    # Every host's /health looks at the shared store with the same small write: on a fresh
    # database their first looks insert the same row at once, and none may fail for it.
    for _ in range(5):
        url = postgres.url(postgres.new_database())
        stores = [await EventStore.open(url, RetryPolicy(budget=0)) for _ in range(3)]
        try:
            await asyncio.gather(*(store.probe_writable() for store in stores))
            # Cursors saved by several hosts under one name at once are upserts as well.
            await asyncio.gather(*(store.save_cursor("relay", n) for n, store in enumerate(stores)))
            assert await stores[0].load_cursor("relay") in (0, 1, 2)
        finally:
            for store in stores:
                await store.close()
