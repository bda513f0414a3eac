"""The event store under faults: on a real SQLite file, another connection holding the write
lock (briefly, then past the retry budget) and a full disk told apart; on SQLite and
PostgreSQL, a damaged row (PostgreSQL's own locks and restarts: test_store_faults_postgres)."""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from nats.aio.client import Client

from events.errors import DamagedEvent, StoreWriteFailed, disk_full, reason
from events.relay import OutboxRelay
from events.store import EventStore, RetryPolicy, default_store_url
from tests.conftest import opened_store, wait_for
from tests.events.sample_events import Incremented, Noted


@pytest.fixture
async def budget_store(tmp_path: Path) -> AsyncIterator[EventStore]:
    async with opened_store(default_store_url(tmp_path), RetryPolicy(budget=1.5)) as store:
        yield store


@pytest.fixture
def write_lock(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """Another client's connection; ``BEGIN IMMEDIATE`` on it takes SQLite's write lock."""
    conn = sqlite3.connect(
        tmp_path / "events.sqlite3", isolation_level=None, check_same_thread=False
    )
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


async def test_a_lock_released_within_the_budget_only_delays_the_append(
    budget_store: EventStore, write_lock: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    await budget_store.append("counter:a", 0, [Incremented(1)])
    write_lock.execute("BEGIN IMMEDIATE")
    with caplog.at_level(logging.WARNING, "events.retry"):
        append = asyncio.ensure_future(budget_store.append("counter:a", 1, [Incremented(2)]))
        await wait_for(lambda: "retrying for up to 2 s" in caplog.text, what="a retry")
        write_lock.execute("ROLLBACK")
        recorded = await append
    assert [r.version for r in recorded] == [2]
    assert "append to counter:a failed (database is locked)" in caplog.text


async def test_a_lock_held_past_the_budget_is_a_503_saying_why(
    budget_store: EventStore, write_lock: sqlite3.Connection
) -> None:
    await budget_store.append("counter:b", 0, [Incremented(1)])
    write_lock.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreWriteFailed) as info:
        await budget_store.append("counter:b", 1, [Incremented(2)])
    assert info.value.status == 503 and not info.value.full
    assert info.value.message.startswith("the event store refuses writes: database is locked")
    with pytest.raises(StoreWriteFailed):
        await budget_store.probe_writable()
    write_lock.execute("ROLLBACK")
    await budget_store.probe_writable()
    # Nothing half-written: the stream goes on from where it was.
    assert [r.version for r in await budget_store.append("counter:b", 1, [Incremented(2)])] == [2]


async def damage(store_url: str, sql: str, *args: object) -> None:
    """Change stored rows behind the store's back, as a bad migration or a hand edit would
    (`?` marks the arguments)."""
    if store_url.startswith("postgresql"):
        conn = await asyncpg.connect(store_url.replace("+asyncpg", ""))
        try:
            numbered = iter(range(1, len(args) + 1))
            await conn.execute(re.sub(r"\?", lambda _: f"${next(numbered)}", sql), *args)
        finally:
            await conn.close()
        return

    def run() -> None:
        with sqlite3.connect(store_url.split("///", 1)[1]) as conn:
            conn.execute(sql, args)

    await asyncio.to_thread(run)


async def test_a_damaged_row_is_named_by_stream_position_and_error(
    store: EventStore, store_url: str
) -> None:
    await store.append("counter:c", 0, [Incremented(1), Incremented(2), Noted("x")])
    good = await store.append("counter:d", 0, [Incremented(5)])
    bad = (await store.read_stream("counter:c"))[1]
    await damage(store_url, "UPDATE events SET data = '{\"by\": ' WHERE position = ?", bad.position)

    with pytest.raises(DamagedEvent) as info:
        await store.read_stream("counter:c")
    assert (info.value.stream, info.value.position, info.value.version) == (
        "counter:c",
        bad.position,
        2,
    )
    assert info.value.status == 503
    assert info.value.message.startswith(
        f"stream counter:c is quarantined: its event 2 (position {bad.position}, "
        "type test.incremented) cannot be replayed: JSONDecodeError"
    )
    assert [r.event for r in await store.read_stream("counter:d")] == [Incremented(5)]

    page = await store.read_page(0, 10)
    assert [r.position for r in page.records] == [1, 3, good[0].position]
    assert [d.position for d in page.damaged] == [bad.position]
    assert page.last_position == good[0].position
    count, damaged = await store.check()
    assert (count, [d.position for d in damaged]) == (4, [bad.position])


async def test_check_lists_unknown_types_and_missing_fields(
    store: EventStore, store_url: str
) -> None:
    await store.append("counter:e", 0, [Incremented(1), Noted("y")])
    await damage(store_url, "UPDATE events SET type = 'test.renamed' WHERE version = 1")
    await damage(store_url, "UPDATE events SET data = '{}' WHERE version = 2")
    count, damaged = await store.check(page_size=1)
    assert count == 2
    assert [(d.version, d.error) for d in damaged] == [
        (1, "unknown event type 'test.renamed'"),
        (2, "required field missing @ $.text"),
    ]


async def test_the_relay_steps_over_a_damaged_row(
    store: EventStore, nc: Client, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await store.append("counter:f", 0, [Incremented(1), Incremented(2), Incremented(3)])
    await damage(store_url, "UPDATE events SET data = 'not json' WHERE version = 2")
    seen: list[int] = []

    async def on_msg(msg: object) -> None:
        seen.append(int(msg.data.split(b'"version":')[1].split(b",")[0]))  # type: ignore[attr-defined]

    await nc.subscribe("cairn.evt.counter.f", cb=on_msg)
    await nc.flush()
    relay = OutboxRelay(store, nc)
    await relay.start()
    try:
        await wait_for(lambda: seen == [1, 3], what="the events around the damaged row")
        await wait_for(lambda: relay.cursor == 3, what="the cursor past the damaged row")
    finally:
        await relay.stop()
    assert "relay: not publishing a damaged event: stream counter:f is quarantined" in caplog.text


def test_a_full_disk_is_recognised_through_every_wrapper() -> None:
    full = OSError(errno.ENOSPC, "No space left on device")
    assert disk_full(full) and reason(full) == "the disk is full"
    assert disk_full(sqlite3.OperationalError("database or disk is full"))
    wrapped = RuntimeError("append failed")
    wrapped.__cause__ = full
    assert disk_full(wrapped)
    assert not disk_full(sqlite3.OperationalError("database is locked"))
    assert reason(OSError(errno.EIO, "Input/output error")) == "input/output error"
