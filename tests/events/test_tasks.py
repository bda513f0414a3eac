"""cancel(): a stop's end of its background tasks."""

from __future__ import annotations

import asyncio

from events.tasks import cancel


async def test_a_running_task_has_ended_when_cancel_returns() -> None:
    cleaned: list[str] = []
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("done")

    task = asyncio.create_task(forever())
    await started.wait()
    await cancel(task)
    assert task.cancelled() and cleaned == ["done"]


async def test_none_and_an_ended_task_are_nothing_to_do() -> None:
    await cancel(None)

    async def quick() -> int:
        return 7

    task = asyncio.create_task(quick())
    assert await task == 7
    await cancel(task)
    assert task.result() == 7
