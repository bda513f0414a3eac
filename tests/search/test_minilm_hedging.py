"""Batches handed out to the embedding threads, a late one run again by a free thread
(`minilm_hedging.hedged_map`), on a real thread pool as `LocalProvider` runs it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any

import pytest

from actors.search.minilm_hedging import hedged_map


def test_every_item_once_in_the_order_given() -> None:
    with ThreadPoolExecutor(2) as pool:
        items = list(range(50))
        assert hedged_map(pool, 2, lambda x: x * x, items, [1] * 50) == [x * x for x in items]
        assert hedged_map(pool, 2, lambda x: x, [], []) == []
        assert hedged_map(pool, 4, lambda x: -x, [7], [3]) == [-7]


def test_a_batch_stuck_on_a_starved_thread_is_run_again_by_the_free_one() -> None:
    # Item 0 is taken first by one thread and its first run does not finish (a thread that
    # shares its core with a busy process); the other thread runs the rest, then item 0 again
    # once it is late, and the call returns with the stuck run still going.
    release = threading.Event()
    runs: list[int] = []
    lock = threading.Lock()

    def fn(item: int) -> str:
        with lock:
            runs.append(item)
            first = runs.count(item) == 1
        if item == 0 and first:
            release.wait(timeout=60)
            return "stuck"
        return f"ran {item}"

    with ThreadPoolExecutor(2) as pool:
        try:
            got = hedged_map(pool, 2, fn, list(range(6)), [1] * 6)
            assert got == [f"ran {i}" for i in range(6)]
            assert runs.count(0) == 2 and not release.is_set()
            assert sorted(set(runs)) == list(range(6)) and len(runs) == 7
        finally:
            release.set()


def test_the_first_error_is_raised_to_the_caller() -> None:
    def fn(item: int) -> int:
        if item == 3:
            raise ValueError("bad batch")
        return item

    with ThreadPoolExecutor(2) as pool, pytest.raises(ValueError, match="bad batch"):
        hedged_map(pool, 2, fn, list(range(8)), [1] * 8)


class _Pool(ThreadPoolExecutor):
    """A real pool that says when a job was handed to it."""

    def __init__(self) -> None:
        super().__init__(1)
        self.submitted = threading.Event()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        self.submitted.set()
        return future


def test_a_pool_shut_down_under_a_call_fails_it_instead_of_hanging() -> None:
    pool = _Pool()
    release = threading.Event()
    pool.submit(release.wait, 60)  # the one thread is busy: the call's job stays queued
    pool.submitted.clear()
    outcome: Future[list[int]] = Future()

    def call() -> None:
        try:
            outcome.set_result(hedged_map(pool, 1, lambda x: x, [1, 2], [1, 1]))
        except BaseException as exc:
            outcome.set_exception(exc)

    caller = threading.Thread(target=call)
    caller.start()
    try:
        assert pool.submitted.wait(timeout=30)
        pool.shutdown(wait=False, cancel_futures=True)
        with pytest.raises(CancelledError):
            outcome.result(timeout=30)
    finally:
        release.set()
        caller.join(timeout=30)
