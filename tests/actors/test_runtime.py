"""The actor runtime: replay, commands, jobs, the loop bridge, failures and restarts."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import attrs
import pytest

from actors.runtime import ActorHost, AggregateActor, Rejected
from events.model import Event
from events.store import EventStore
from tests.conftest import wait_for
from tests.events.sample_events import Incremented, Noted


@attrs.frozen
class Add:
    by: int


@attrs.frozen
class Work:
    seconds: float


@attrs.frozen
class Boom:
    pass


@attrs.frozen
class Fetch:
    pass


@attrs.frozen
class Exhausted:
    pass


@attrs.frozen
class SlowJob:
    gate: asyncio.Event


@attrs.frozen
class JobFinished:
    outcome: Any


@attrs.frozen
class Ahead:
    """Start a job that reports Add(by) fire-and-forget, then waits until it is stored; `out`
    gets the total then and the stream as the store had it."""

    by: int
    out: asyncio.Future[tuple[Any, list[Event]]]


class Counter(AggregateActor):
    """A counter that refuses to go negative, works in its thread, and can crash."""

    aggregate = "counter"

    def setup(self, **kwargs: Any) -> None:
        self.total = 0
        self.notes: list[str] = []
        self.thread_names: set[str] = set()

    def apply(self, event: Event) -> None:
        match event:
            case Incremented(by=by):
                self.total += by
            case Noted(text=text):
                self.notes.append(text)

    def handle(self, message: Any) -> Any:
        self.thread_names.add(threading.current_thread().name)
        match message:
            case Add(by=by):
                if self.total + by < 0:
                    raise Rejected(409, f"counter would go below zero ({self.total}{by:+d})")
                self.record(Incremented(by))
                return self.total
            case Fetch():
                return self.total
            case Work(seconds=seconds):
                time.sleep(seconds)  # the actor's own thread: the loop must not feel this
                return "worked"
            case Boom():
                raise RuntimeError("boom")
            case Exhausted():
                return next(iter(()))  # raises StopIteration
            case SlowJob(gate=gate):
                self.start_job(gate.wait(), done=lambda outcome: JobFinished(outcome))
                return "started"
            case JobFinished():
                self.record(Noted("job done"))
                return None
            case Ahead():
                self.start_job(self._ahead(message))
                return "started"
        raise Rejected(400, f"unknown command {message!r}")

    async def _ahead(self, msg: Ahead) -> None:
        self.notify(Add(msg.by))
        total = await self.confirmed(Fetch())  # records nothing itself
        stored = [r.event for r in await self.ctx.store.read_stream(self.stream)]
        msg.out.set_result((total, stored))


async def test_commands_record_events_and_replies_wait_for_the_store(
    host: ActorHost, store: EventStore
) -> None:
    counter = await host.spawn(Counter, "a")
    assert await counter.ask(Add(2)) == 2
    # The reply came after the append: the event is already readable.
    assert [r.event for r in await store.read_stream("counter:a")] == [Incremented(2)]
    assert await counter.ask(Add(3)) == 5


async def test_a_job_can_wait_until_what_it_reported_is_stored(host: ActorHost) -> None:
    counter = await host.spawn(Counter, "ahead")
    out: asyncio.Future[tuple[Any, list[Event]]] = asyncio.get_running_loop().create_future()
    assert await counter.ask(Ahead(3, out)) == "started"
    total, stored = await asyncio.wait_for(out, 10)
    assert (total, stored) == (3, [Incremented(3)])


async def test_state_is_rebuilt_from_the_stream_at_start(
    host: ActorHost, store: EventStore
) -> None:
    await store.append("counter:b", 0, [Incremented(4), Incremented(6)])
    counter = await host.spawn(Counter, "b")
    assert await counter.ask(Fetch()) == 10
    assert await counter.ask(Add(1)) == 11
    assert [r.version for r in await store.read_stream("counter:b")] == [1, 2, 3]


async def test_a_rejected_command_raises_for_the_caller_and_changes_nothing(
    host: ActorHost, store: EventStore
) -> None:
    counter = await host.spawn(Counter, "c")
    with pytest.raises(Rejected) as info:
        await counter.ask(Add(-1))
    assert (info.value.status, info.value.message) == (409, "counter would go below zero (0-1)")
    assert await store.read_stream("counter:c") == []
    assert await counter.ask(Add(1)) == 1  # still alive, same actor


async def test_the_loop_keeps_ticking_while_an_actor_works(host: ActorHost) -> None:
    counter = await host.spawn(Counter, "d")
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    assert await counter.ask(Work(0.5)) == "worked"
    elapsed = time.monotonic() - started
    stop.set()
    await task
    assert elapsed >= 0.5
    # A blocked loop would tick once or twice; a free one ticks every 10 ms of the 0.5 s.
    assert ticks >= 20


async def test_the_handler_runs_in_the_actor_thread_not_the_loop(host: ActorHost) -> None:
    counter = await host.spawn(Counter, "thread")
    await counter.ask(Add(1))
    state = await counter.ask(Fetch())
    assert state == 1
    assert threading.current_thread().name == "MainThread"


async def test_an_unexpected_error_reaches_the_caller_and_the_actor_is_rebuilt(
    host: ActorHost,
) -> None:
    counter = await host.spawn(Counter, "e")
    await counter.ask(Add(5))
    with pytest.raises(RuntimeError, match="boom"):
        await counter.ask(Boom())
    # The next ask waits for the restart and meets a state rebuilt from the store.
    assert await counter.ask(Fetch()) == 5
    assert counter.restarts == 1
    assert await counter.ask(Add(1)) == 6


async def test_messages_queued_behind_a_crash_are_handled_by_the_new_actor(
    host: ActorHost,
) -> None:
    counter = await host.spawn(Counter, "f")
    results = await asyncio.gather(
        counter.ask(Work(0.05)),
        counter.ask(Boom()),
        counter.ask(Add(1)),
        counter.ask(Add(2)),
        return_exceptions=True,
    )
    assert results[0] == "worked"
    assert isinstance(results[1], RuntimeError)
    assert results[2:] == [1, 3]


async def test_a_job_reports_back_to_its_actor_which_records_the_outcome(
    host: ActorHost, store: EventStore
) -> None:
    counter = await host.spawn(Counter, "g")
    gate = asyncio.Event()
    assert await counter.ask(SlowJob(gate)) == "started"
    # The actor answers other commands while its job runs.
    assert await counter.ask(Add(1)) == 1
    gate.set()

    async def noted() -> bool:
        return any(isinstance(r.event, Noted) for r in await store.read_stream("counter:g"))

    await wait_for(noted, what="the job's outcome to be recorded")


async def test_a_failed_append_restarts_the_actor_from_the_store(
    host: ActorHost, store: EventStore
) -> None:
    counter = await host.spawn(Counter, "h")
    await counter.ask(Add(1))
    # Another writer sneaks in: the actor's next append conflicts.
    await store.append("counter:h", 1, [Incremented(100)])
    with pytest.raises(Exception, match="another writer appended first"):
        await counter.ask(Add(1))
    await wait_for(lambda: counter.restarts == 1, what="restart")
    assert await counter.ask(Fetch()) == 101


async def test_a_stop_iteration_from_a_handler_reaches_the_caller(host: ActorHost) -> None:
    counter = await host.spawn(Counter, "i")
    with pytest.raises(RuntimeError, match="StopIteration"):
        await asyncio.wait_for(counter.ask(Exhausted()), 10)
