"""A bounded pool of render threads, off the event loop, with single-flight and cancellation.

Threads, not processes: Pillow releases the GIL while it decodes, resizes and encodes, and a
thread can watch a cancel flag between stages. At most ``workers`` renders run at once; the rest
wait in the executor's queue, and how long a request waits there is bounded by the handler
time-out. Identical variants requested together are rendered once (single-flight). When the
last request that wanted a render goes away, the render is cancelled: dropped if it has not
started, stopped at its next stage boundary if it has.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class _Job(Generic[T]):
    __slots__ = ("flag", "future", "waiters")

    def __init__(self, future: asyncio.Future[T], flag: threading.Event) -> None:
        self.future = future
        self.flag = flag
        self.waiters = 0


class RenderPool:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cairn-img")
        self._inflight: dict[Hashable, _Job[Any]] = {}

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def waiting(self, key: Hashable) -> int:
        """How many callers wait for ``key``'s render (0 when none is in flight)."""
        job = self._inflight.get(key)
        return job.waiters if job is not None else 0

    async def run(self, key: Hashable, fn: Callable[[Callable[[], bool]], T]) -> T:
        """Run ``fn(cancelled)`` in a worker, sharing the result with concurrent callers of
        the same ``key``; ``cancelled()`` turns true once no caller waits any more."""
        job: _Job[T] | None = self._inflight.get(key)
        if job is None:
            flag = threading.Event()
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self._executor, fn, flag.is_set)
            new_job: _Job[T] = _Job(future, flag)
            self._inflight[key] = new_job

            def forget(_: object, key: Hashable = key, job: _Job[T] = new_job) -> None:
                if self._inflight.get(key) is job:
                    del self._inflight[key]

            future.add_done_callback(forget)
            job = new_job
        job.waiters += 1
        try:
            return await asyncio.shield(job.future)
        finally:
            job.waiters -= 1
            if job.waiters == 0 and not job.future.done():
                job.flag.set()
                job.future.cancel()  # drops it from the queue if it has not started yet
                if self._inflight.get(key) is job:
                    del self._inflight[key]

    def shutdown(self) -> None:
        for job in self._inflight.values():
            job.flag.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
