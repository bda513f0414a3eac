"""Ending the background tasks a component started, as its stop does."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended, its cancellation swallowed: once this
    returns, nothing of it runs any more. None (never started) is nothing to do."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
