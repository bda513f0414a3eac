"""Retrying a write that fails for a passing reason, within a time budget.

A store implementation says which of its errors are transient (a lock held by another writer,
an I/O hiccup, a full disk that may be cleared); :func:`retry_within` tries again with growing
pauses until the budget, counted from when the caller asked, is spent, then lets the last error
through. Errors that are not transient (a bug, a conflict) go through at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import attrs

from events.errors import reason

log = logging.getLogger(__name__)

T = TypeVar("T")


@attrs.frozen
class RetryPolicy:
    budget: float = 10.0  # seconds from the first attempt to giving up
    first_pause: float = 0.05
    max_pause: float = 1.0


async def retry_within(
    attempt: Callable[[], Awaitable[T]],
    *,
    transient: Callable[[BaseException], bool],
    policy: RetryPolicy,
    what: str,
    started: float | None = None,
) -> T:
    """``await attempt()`` until it succeeds, its error is not transient, or ``policy.budget``
    seconds have passed since ``started`` (monotonic; default now)."""
    began = time.monotonic() if started is None else started
    tries = 0
    while True:
        tries += 1
        try:
            return await attempt()
        except Exception as exc:
            if not transient(exc):
                raise
            spent = time.monotonic() - began
            if spent >= policy.budget:
                log.error(
                    "%s: gave up after %d tries in %.1f s: %s", what, tries, spent, reason(exc)
                )
                raise
            pause = min(policy.first_pause * 2 ** (tries - 1), policy.max_pause)
            pause = min(pause, policy.budget - spent)
            if tries == 1:
                log.warning(
                    "%s failed (%s); retrying for up to %.0f s", what, reason(exc), policy.budget
                )
            await asyncio.sleep(pause)
