"""The inbox watcher: changes reach the loop from the watcher's own thread, and it ends (thread
and all) when told to or when its reader goes away."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import watchfiles

from actors.search.ingest import watching


def watcher_threads(path: Path) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"watch {path}"]


def join_watchers(path: Path) -> None:
    for thread in watcher_threads(path):
        thread.join(5)


async def next_batch(it: AsyncIterator[watching.Changes]) -> watching.Changes:
    return await asyncio.wait_for(anext(it), 10)


async def test_changes_arrive_and_stop_ends_the_thread(tmp_path: Path) -> None:
    stop = asyncio.Event()
    it = watching.changes(tmp_path, stop)
    first = asyncio.ensure_future(next_batch(it))
    # The watcher may not be watching yet when the first file lands: write until it reports.
    n = 0
    while not first.done():
        (tmp_path / f"note{n}.txt").write_text("hello")
        n += 1
        await asyncio.wait([first], timeout=0.1)
    batch = first.result()
    assert all(
        change in {watchfiles.Change.added, watchfiles.Change.modified} for change, _ in batch
    )
    assert {Path(p).name for _, p in batch} <= {f"note{i}.txt" for i in range(n)}
    assert len(watcher_threads(tmp_path)) == 1

    stop.set()
    with pytest.raises(StopAsyncIteration):
        await next_batch(it)
    await asyncio.to_thread(join_watchers, tmp_path)
    assert watcher_threads(tmp_path) == []


async def test_closing_the_iterator_stops_its_thread(tmp_path: Path) -> None:
    it = watching.changes(tmp_path, asyncio.Event())
    waiting = asyncio.ensure_future(anext(it))
    await asyncio.sleep(0)  # one step of that task: the generator starts its thread
    assert len(watcher_threads(tmp_path)) == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await it.aclose()
    await asyncio.to_thread(join_watchers, tmp_path)
    assert watcher_threads(tmp_path) == []


async def test_a_folder_that_cannot_be_watched_raises_here(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await next_batch(watching.changes(tmp_path / "missing", asyncio.Event()))
