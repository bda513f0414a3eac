"""Filesystem changes under a folder, as an async iterator whose watcher lives on a thread.

`watchfiles.awatch` builds its watcher (one inotify watch per folder, found by walking the
tree) on the event loop and imports anyio there the first time: measured at service start with
an inbox of 2,000 files, the loop stood still 50-80 ms, in the middle of the first queries.
Here the watcher is built, read and closed on a thread of its own; only the batches of changes
cross to the loop.

The inbox is the inbox: inotify (through watchfiles) follows a symlinked folder, and a link
``drop/linkdir -> /home/me`` would report ``drop/linkdir/id_rsa`` as a change under the inbox.
So every change whose path goes through a symbolic link below the watched folder (or is one)
is dropped before it is handed over: nothing outside the folder is indexed or named. The
folder itself may be reached through links (the caller resolves it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncGenerator
from pathlib import Path

import watchfiles

__all__ = ["Changes", "changes"]

Changes = set[tuple[watchfiles.Change, str]]


def inside(root: Path, changes: Changes) -> Changes:
    """The changes whose path reaches ``root``'s file without following a symbolic link
    (the path itself, or a folder between it and ``root``); the rest name what is elsewhere."""
    top = str(root)
    linked: dict[str, bool] = {}

    def through_link(path: str) -> bool:
        if path in linked:
            return linked[path]
        parent = os.path.dirname(path)
        if path == top or parent == path or not path.startswith(top + os.sep):
            answer = path != top and not path.startswith(top + os.sep)
        else:
            answer = os.path.islink(path) or through_link(parent)
        linked[path] = answer
        return answer

    return {(change, path) for change, path in changes if not through_link(path)}


class _Stop:
    """Set when the caller's event is set or the iterator is closed (watchfiles polls
    `is_set()` every `step` milliseconds, from its thread)."""

    def __init__(self, outer: asyncio.Event) -> None:
        self.outer = outer
        self.closed = threading.Event()

    def is_set(self) -> bool:
        # A plain attribute read of the asyncio.Event: safe from another thread.
        return self.outer.is_set() or self.closed.is_set()


async def changes(
    path: Path, stop: asyncio.Event, *, recursive: bool = True, debounce: int = 50, step: int = 20
) -> AsyncGenerator[Changes, None]:
    """Batches of changes under `path` until `stop` is set; a failure of the watcher (the
    folder removed, too many watches) is raised here."""
    loop = asyncio.get_running_loop()
    batches: asyncio.Queue[Changes | BaseException | None] = asyncio.Queue()
    halt = _Stop(stop)

    def hand_over(item: Changes | BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed first: nobody is listening
            loop.call_soon_threadsafe(batches.put_nowait, item)

    def run() -> None:
        root = path.absolute()
        try:
            for batch in watchfiles.watch(
                path,
                stop_event=halt,
                debounce=debounce,
                step=step,
                recursive=recursive,
                raise_interrupt=False,
            ):
                kept = inside(root, batch)
                if kept:
                    hand_over(kept)
        except Exception as exc:
            hand_over(exc)
        finally:
            hand_over(None)

    thread = threading.Thread(target=run, name=f"watch {path}", daemon=True)
    thread.start()
    try:
        while (item := await batches.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        halt.closed.set()
