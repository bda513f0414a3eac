"""Cluster mode: a part of a service that runs on one host at a time, the holder of a lease.

``Leased`` takes the lease ``name`` (``events/leases.py``) and, while this host holds it,
keeps the part started: ``start(lease)`` when it is taken returns the way to stop it, called
when the lease is lost (another host may already run the part: stop at once) or when this
host stops (the lease is then handed on, so a successor starts at once). The part uses
``lease.fence`` to refuse acting on a lease it can no longer trust (a pause, a lost network).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client

from events.bus import flush_all
from events.leases import Lease, LeaseSettings, LeaseState

log = logging.getLogger(__name__)

Stop = Callable[[], Awaitable[None]]
Start = Callable[[Lease], Awaitable[Stop]]


class Leased:
    def __init__(
        self, nc: Client, name: str, holder: str, settings: LeaseSettings, start: Start
    ) -> None:
        self._start = start
        self._stop: Stop | None = None
        self._ready = False
        self.lease = Lease(
            nc, name, holder, settings, on_acquired=self._acquired, on_lost=self._lost
        )

    async def start(self) -> Leased:
        await self.lease.start()
        return self

    @property
    def running(self) -> bool:
        """The part runs here: the lease is held and its start has finished."""
        return self._ready and self.lease.state is LeaseState.HELD

    async def _acquired(self) -> None:
        self._stop = await self._start(self.lease)
        # The part's subscriptions reach the server before it is said to run here.
        with contextlib.suppress(Exception):  # the bus went away: they reach it when back
            await flush_all(self.lease.nc)
        self._ready = True
        log.info("%s: this host runs it now (lease %r)", self.lease.name, self.lease.name)

    async def _lost(self, _: str) -> None:
        self._ready = False
        stop, self._stop = self._stop, None
        if stop is not None:
            await stop()

    async def stop(self) -> None:
        """Stop the part, then hand the lease on."""
        await self.lease.settled()
        await self._lost("this host stops")
        await self.lease.stop()

    def facts(self) -> dict[str, Any]:
        """For /health: who runs the part."""
        return {
            "name": self.lease.name,
            "holder": self.lease.holder,
            "runs_here": self.running,
            "runs_on": self.lease.holder if self.running else self.lease.other,
        }
