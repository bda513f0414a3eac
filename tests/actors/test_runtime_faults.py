"""The actor runtime under faults: a store that refuses writes (real SQLite, its write lock
held by another connection), a stream that cannot be replayed, a bounded drain at a stop."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from actors.runtime import ActorHost, AggregateActor
from events.errors import DamagedEvent, StoreWriteFailed
from events.model import Event
from events.store import EventStore, RetryPolicy, default_store_url
from tests.conftest import opened_store, wait_for
from tests.events.sample_events import Incremented, Noted


@attrs.frozen
class Add:
    by: int


@attrs.frozen
class Hold:
    gate: asyncio.Event


@attrs.frozen
class Settle:
    reason: str


@attrs.frozen
class Ahead:
    """Start a job that reports Add(by) as jobs report progress (fire-and-forget), then waits
    for it to be stored before going on; `out` gets ("went on", ...) or ("stopped", error)."""

    by: int
    out: asyncio.Future[tuple[str, Any]]


@attrs.frozen
class Peek:
    """Records nothing: its confirmation stands for what was recorded before it."""


class Ledger(AggregateActor):
    """Refuses odd notes on replay (a stream it cannot apply); settles after a failure."""

    aggregate = "ledger"

    def setup(self, **kwargs: Any) -> None:
        self.total = 0
        self.notes: list[str] = []

    def apply(self, event: Event) -> None:
        match event:
            case Incremented(by=by):
                self.total += by
            case Noted(text=text):
                if text == "poison":
                    raise ValueError("a note this version cannot apply")
                self.notes.append(text)

    def handle(self, message: Any) -> Any:
        match message:
            case Add(by=by):
                self.record(Incremented(by))
                return self.total
            case Hold(gate=gate):
                self.start_job(gate.wait())
                return None
            case Settle(reason=reason):
                self.record(Noted(f"settled: {reason}"))
                return None
            case Ahead():
                self.start_job(self._ahead(message))
                return None
        return self.total

    async def _ahead(self, msg: Ahead) -> None:
        self.notify(Add(msg.by))
        try:
            total = await self.confirmed(Peek())
        except BaseException as exc:  # the store's refusal, or the job cancelled with its actor
            msg.out.set_result(("stopped", exc))
            raise
        msg.out.set_result(("went on", total))

    def recovery(self, reason: str) -> Settle:
        return Settle(reason)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    """The store the actors' host writes to, with a short retry budget: a write the store
    keeps refusing fails within half a second."""
    async with opened_store(default_store_url(tmp_path), RetryPolicy(budget=0.5)) as store:
        yield store


async def test_an_actor_the_store_refuses_stops_then_restarts_and_recovers_once_it_writes(
    host: ActorHost, store: EventStore, tmp_path: Path
) -> None:
    ledger = await host.spawn(Ledger, "a")
    assert await ledger.ask(Add(1)) == 1
    blocker = sqlite3.connect(tmp_path / "events.sqlite3", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreWriteFailed, match="database is locked"):
            await ledger.ask(Add(2))
        await wait_for(lambda: host.store_refusal is not None, what="the host to notice")
        # Meanwhile asks fail at once with the reason, instead of queueing.
        with pytest.raises(StoreWriteFailed) as info:
            await asyncio.wait_for(ledger.ask(Add(3)), 1)
        assert info.value.status == 503
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()

    async def settled() -> bool:
        stored = await store.read_stream("ledger:a")
        return any(isinstance(r.event, Noted) for r in stored)

    await wait_for(settled, what="the restarted actor's recovery")
    stored = [r.event for r in await store.read_stream("ledger:a")]
    assert stored[0] == Incremented(1)
    assert isinstance(stored[1], Noted)
    assert stored[1].text.startswith("settled: the event store refuses writes: database is locked")
    assert host.store_refusal is None and ledger.restarts == 1
    assert await ledger.ask(Add(4)) == 5


async def test_a_job_waiting_for_its_record_to_be_stored_does_not_go_on_when_it_is_refused(
    host: ActorHost, store: EventStore, tmp_path: Path
) -> None:
    """A write-ahead record (a job's note before it changes the world outside): the job's
    wait covers what it reported before, fire-and-forget, and ends in the store's refusal."""
    ledger = await host.spawn(Ledger, "ahead")
    out: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
    blocker = sqlite3.connect(tmp_path / "events.sqlite3", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        await ledger.tell(Ahead(5, out))
        how, why = await asyncio.wait_for(out, 10)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert how == "stopped", why
    # Refused, or cancelled as its actor stopped for that refusal: either way it did not go on.
    assert isinstance(why, StoreWriteFailed | asyncio.CancelledError), repr(why)
    assert await store.read_stream("ledger:ahead") == []


async def test_a_stream_that_cannot_be_replayed_is_quarantined_alone(
    host: ActorHost, store: EventStore
) -> None:
    await store.append("ledger:bad", 0, [Incremented(1), Noted("poison")])
    await store.append("ledger:good", 0, [Incremented(7)])
    bad = await host.spawn(Ledger, "bad")
    good = await host.spawn(Ledger, "good")
    with pytest.raises(DamagedEvent) as info:
        await bad.ask(Add(1))
    assert info.value.status == 503
    assert info.value.message.startswith(
        "stream ledger:bad is quarantined: its event 2 (position 2, type test.noted) cannot be "
        "replayed: cannot be applied: ValueError: a note this version cannot apply"
    )
    await bad.tell(Add(1))  # dropped, not raised: nobody waits for a tell
    assert host.quarantined() == {"ledger:bad": info.value.message}
    assert await good.ask(Add(1)) == 8


async def test_drain_waits_for_jobs_then_names_what_is_still_running(host: ActorHost) -> None:
    ledger = await host.spawn(Ledger, "c")
    quick, stuck = asyncio.Event(), asyncio.Event()
    await ledger.ask(Hold(quick))
    await ledger.ask(Hold(stuck))
    asyncio.get_running_loop().call_later(0.05, quick.set)
    assert await host.drain(0.5, report_every=0.1) == ["ledger:c"]
    stuck.set()
    assert await host.drain(5) == []
