"""Forward passes handed out to the embedding threads one at a time, with late ones hedged.

The document embedder runs a call's batches on one low-priority thread per core and the call
waits for all of them. When another process keeps one core busy, the thread that shares that
core may get a fraction of it (a third against a process of another session, less against a
nice-0 process of its own session, the embedder being niced), so a batch it holds takes
several times longer than on the free core and the whole call waits for it. Here each
worker takes the next batch from a shared list when it is free, so the thread on the free core
takes most of them; when none is left, a free worker runs again a batch still in flight on
another thread once that batch is late (running for `LATE` times what its size should cost,
judged by the batches this call already finished), and the first result wins. The loser's
pass is not interrupted: its thread finishes it and then joins the next call's work.

Public surface: `hedged_map(pool, workers, fn, items, costs)` and `LATE`.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Executor, Future
from typing import TypeVar, cast

__all__ = ["LATE", "hedged_map"]

T = TypeVar("T")
R = TypeVar("R")

# A batch in flight is late, and worth running again on a free thread, after this many times
# what it should take. Threads that share their cores evenly finish within ~1.2x of each other
# (measured), so an idle machine never hedges; a thread sharing a core with a busy process
# runs 3-10x slower.
LATE = 2.0


class _Call:
    """One call's shared state: what is left to start, what is in flight, what is done."""

    def __init__(self, count: int, costs: Sequence[float]) -> None:
        self.lock = threading.Condition()
        self.costs = costs
        self.next = 0
        self.results: dict[int, object] = {}
        self.error: BaseException | None = None
        self.started: dict[int, float] = {}  # in flight: index -> when its first run started
        self.hedged: set[int] = set()
        self.seconds_per_cost: list[float] = []
        self.count = count

    def finished(self) -> bool:
        return self.error is not None or len(self.results) == self.count

    def take(self) -> int | None:
        """The next index to run on this thread (under the lock); None when the call is over.
        Waits while nothing is left to start and nothing in flight is late yet."""
        while not self.finished():
            if self.next < self.count:
                index = self.next
                self.next += 1
                self.started[index] = time.monotonic()
                return index
            late, wait = self._late()
            if late is not None:
                self.hedged.add(late)
                return late
            self.lock.wait(wait)
        return None

    def _late(self) -> tuple[int | None, float | None]:
        """A late batch in flight not yet hedged, or how long until the first one will be
        (None: until another batch finishes, which tells what a batch costs)."""
        if not self.seconds_per_cost:
            return None, None
        rate = statistics.median(self.seconds_per_cost)
        now = time.monotonic()
        soonest: float | None = None
        for index, since in self.started.items():
            if index in self.hedged or index in self.results:
                continue
            remaining = since + LATE * rate * self.costs[index] - now
            if remaining <= 0:
                return index, None
            soonest = remaining if soonest is None else min(soonest, remaining)
        return None, soonest

    def done(self, index: int, result: object, began: float) -> None:
        if index not in self.results:
            self.results[index] = result
            self.started.pop(index, None)
            if index not in self.hedged:  # a hedge's own time says nothing of a batch's cost
                self.seconds_per_cost.append((time.monotonic() - began) / self.costs[index])
        self.lock.notify_all()

    def failed(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.lock.notify_all()


def hedged_map(
    pool: Executor,
    workers: int,
    fn: Callable[[T], R],
    items: Sequence[T],
    costs: Sequence[float],
) -> list[R]:
    """`[fn(item) for item in items]`, run by `workers` jobs on `pool`, each taking the next
    item when it is free (in the order given), with late items run again (see the module);
    `costs` are the items' relative costs (e.g. padded tokens). The first exception raised by
    `fn` is raised here. Returns when every item has a result, which may be before all the
    jobs have ended: a hedged item's slower run goes on in the pool until it finishes."""
    if not items:
        return []
    call = _Call(len(items), [max(float(c), 1e-9) for c in costs])

    def work() -> None:
        while True:
            with call.lock:
                index = call.take()
            if index is None:
                return
            began = time.monotonic()
            try:
                result = fn(items[index])
            except BaseException as exc:  # handed to the caller, which raises it
                with call.lock:
                    call.failed(exc)
                return
            with call.lock:
                call.done(index, result, began)

    jobs = max(1, min(workers, len(items)))
    ended: list[Future[None]] = []

    def job_ended(job: Future[None]) -> None:
        # A pool shut down under a call cancels its queued jobs: fail rather than wait forever.
        with call.lock:
            ended.append(job)
            if len(ended) == jobs and not call.finished():
                call.failed(CancelledError("the embedding threads stopped"))

    for _ in range(jobs):
        pool.submit(work).add_done_callback(job_ended)
    with call.lock:
        while not call.finished():
            call.lock.wait()
        if call.error is not None:
            raise call.error
        return cast("list[R]", [call.results[i] for i in range(len(items))])
