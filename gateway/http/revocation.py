"""What a request keeps open ends when what let it in lapses: its token revoked, its console
session signed out or expired. A check at the door is not enough for an event stream or a
serial console, which stay open for hours after it.

``watch`` asks the request's grant (``gateway/http/identity.py``) again every ``CHECK_EVERY``
seconds (one ``stat`` of the tokens file and a dictionary lookup) and, once it lapses, calls
``end`` with why, which says so on the stream and closes it. A request let in without a token
(no tokens exist, or a public route) has nothing to lapse and is not watched.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.http.identity import GRANT, Grant

log = logging.getLogger(__name__)

# Within a second or two of a revocation everything it covers has ended.
CHECK_EVERY = 1.0
Ender = Callable[[str], Awaitable[None]]


def watch(request: web.BaseRequest, end: Ender) -> asyncio.Task[None] | None:
    """Watch ``request``'s grant until cancelled; None when it has none."""
    grant = request.get(GRANT)
    if grant is None:
        return None
    return asyncio.create_task(_watch(grant, request.path, end))


async def _watch(grant: Grant, path: str, end: Ender) -> None:
    while True:
        await asyncio.sleep(CHECK_EVERY)
        why = grant.lapsed()
        if why is not None:
            log.info("ending %s of %s: %s", path[:200], grant.who.name, why)
            await end(why)
            return


async def until_lapsed(request: web.BaseRequest, work: Awaitable[None]) -> str | None:
    """Run ``work`` to its end, or until ``request``'s grant lapses: then it is cancelled and
    why is returned (None when it ended by itself). A cancel of the caller still propagates,
    so a stopping server is not mistaken for a revocation."""
    running = asyncio.ensure_future(work)
    lapsed: list[str] = []

    async def cut(why: str) -> None:
        lapsed.append(why)
        running.cancel()

    watcher = watch(request, cut)
    try:
        await running
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not lapsed or (task is not None and task.cancelling()):
            raise
    finally:
        if watcher is not None:
            watcher.cancel()
    return lapsed[0] if lapsed else None
