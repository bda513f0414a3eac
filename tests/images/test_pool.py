"""The render pool: bounded, single-flight, and cancelled when nobody waits any more."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

import pytest

from actors.images.pool import RenderPool
from tests.conftest import wait_for


@pytest.fixture
async def pool() -> AsyncIterator[RenderPool]:
    p = RenderPool(1)
    yield p
    p.shutdown()


async def test_identical_requests_render_once(pool: RenderPool) -> None:
    release = threading.Event()
    calls = []

    def work(_: Callable[[], bool]) -> str:
        calls.append(1)
        release.wait(5)
        return "done"

    tasks = [asyncio.create_task(pool.run("k", work)) for _ in range(5)]
    await wait_for(lambda: pool.waiting("k") == 5, what="five waiters")
    release.set()
    assert await asyncio.gather(*tasks) == ["done"] * 5
    assert len(calls) == 1
    assert pool.inflight == 0


async def test_bounded_and_cancelled_when_abandoned(pool: RenderPool) -> None:
    started = threading.Event()
    release = threading.Event()
    saw_cancel = threading.Event()
    ran_second = threading.Event()

    def blocker(cancelled: Callable[[], bool]) -> None:
        started.set()
        release.wait(5)
        if cancelled():
            saw_cancel.set()

    def second(_: Callable[[], bool]) -> None:
        ran_second.set()

    first = asyncio.create_task(pool.run("a", blocker))
    await asyncio.to_thread(started.wait, 5)
    queued = asyncio.create_task(pool.run("b", second))
    await wait_for(lambda: pool.waiting("b") == 1, what="second job queued")
    # one worker: the second job waits in the queue; both callers give up
    first.cancel()
    queued.cancel()
    await asyncio.gather(first, queued, return_exceptions=True)
    release.set()
    assert await asyncio.to_thread(saw_cancel.wait, 5)
    # the queued job was dropped, never run: a later job still runs on the only worker
    done = threading.Event()
    await pool.run("c", lambda _: done.set())
    assert done.is_set() and not ran_second.is_set()


async def test_errors_reach_every_waiter(pool: RenderPool) -> None:
    def boom(_: Callable[[], bool]) -> None:
        raise ValueError("bad image")

    results = await asyncio.gather(pool.run("e", boom), pool.run("e", boom), return_exceptions=True)
    assert all(isinstance(r, ValueError) for r in results)
