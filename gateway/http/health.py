"""One health shape for every service.

Each service answers ``GET /health`` (beside each service's older liveness routes, which keep their
bodies for the clients that read them) with the same JSON::

    {"service": "vm", "status": "ok", "problems": [], "warnings": [], "cluster": "simulated", ...}

``status`` is ``ok`` (200), ``degraded`` (200: it works, but part of it does not, such as one
VM whose stored stream is damaged), ``down`` (503: it cannot do its work) or, on the gateway's
port while ``cairn up`` starts, ``starting`` (503: a service does not listen yet); ``problems`` and
``warnings`` say why, one sentence each, so a load balancer gets a status and an operator a
cause. What else a service reports about itself
(its cluster real or simulated, the search databases loaded ...) follows as more keys.
The process-wide problems (NATS unreachable, the event store refusing writes) are every
service's problems: none of them can work without both. ``/status`` on ``CAIRN_PORT`` gathers
the reports of every service in the process.

In cluster mode a host that does not run the actors writes little or nothing, so it would not
learn that the shared store refuses writes: its ``/health`` then looks at the store itself (one
small write, bounded in time, at most every ``STORE_CHECK_EVERY`` seconds), so every host says
so, not only the lease holder, and a load balancer stops sending it work that would get 503.
The look runs beside the request: /health answers with the last one, at most that old.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from typing import Any

from aiohttp import web

from actors.platform import Runtime
from events.store import EventStore, StoreWriteFailed

# The statuses a load balancer may send work to (200); ``down`` and ``starting`` are 503.
OK = ("ok", "degraded")

# How often, at most, /health writes to the store to see whether it takes writes, and how long
# that write may take before the store is said not to answer.
STORE_CHECK_EVERY = 2.0
STORE_CHECK_TIMEOUT = 3.0


class StoreCheck:
    """The last look at whether the store takes writes (cluster mode)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.problem: str | None = None
        self._at = float("-inf")
        self._running: asyncio.Task[None] | None = None

    def refresh(self) -> None:
        """Look again in the background when the last look is older than STORE_CHECK_EVERY:
        /health answers at once with the last look (a store that hangs, or a write waiting
        for SQLite's lock, must not hold it up)."""
        if self._running is not None and not self._running.done():
            return
        if time.monotonic() - self._at < STORE_CHECK_EVERY:
            return
        self._at = time.monotonic()
        self._running = asyncio.create_task(self._probe(), name="health-store-check")

    async def _probe(self) -> None:
        # A problem found is looked at again every STORE_CHECK_EVERY seconds without waiting
        # for a request: the next /health then says the store is back, rather than repeating
        # a look that may be minutes old.
        while True:
            try:
                async with asyncio.timeout(STORE_CHECK_TIMEOUT):
                    await self.store.probe_writable()
            except StoreWriteFailed as exc:
                self.problem = exc.message
            except TimeoutError:
                took = f"the event store did not take a write within {STORE_CHECK_TIMEOUT:g} s"
                self.problem = took
            else:
                self.problem = None
                return
            await asyncio.sleep(STORE_CHECK_EVERY)
            self._at = time.monotonic()


_checks: weakref.WeakKeyDictionary[EventStore, StoreCheck] = weakref.WeakKeyDictionary()


def store_check(runtime: Runtime) -> StoreCheck | None:
    """The store check of a cluster-mode runtime (None on a single host, whose actors see
    every write)."""
    if runtime.cluster is None:
        return None
    check = _checks.get(runtime.store)
    if check is None:
        check = _checks[runtime.store] = StoreCheck(runtime.store)
    return check


# What a service adds: what stops it (problems), what it works around (warnings), and facts
# about itself.
Problems = Callable[[], list[str]]
Details = Callable[[], dict[str, Any]]


def runtime_problems(runtime: Runtime) -> list[str]:
    found = []
    lost = [role for role, nc in runtime.connections.items() if not nc.is_connected]
    if lost:
        # Which of this process's connections, when not all of them (events/permissions.py).
        which = f" ({', '.join(lost)})" if len(lost) < len(runtime.connections) else ""
        found.append(f"nats: not connected to {runtime.shown_nats_url}{which}; reconnecting")
    refusal = runtime.actors.store_refusal
    check = store_check(runtime)
    if refusal is None and check is not None:
        refusal = check.problem
    if refusal is not None:
        found.append(f"event store: {refusal}")
    return found


def report(
    name: str,
    runtime: Runtime,
    problems: Problems | None = None,
    warnings: Problems | None = None,
    details: Details | None = None,
) -> dict[str, Any]:
    found = runtime_problems(runtime) + (problems() if problems is not None else [])
    warned = warnings() if warnings is not None else []
    return {
        "service": name,
        "status": "down" if found else ("degraded" if warned else "ok"),
        "problems": found,
        "warnings": warned,
        **(details() if details is not None else {}),
    }


def quarantined(runtime: Runtime, *aggregates: str) -> Problems:
    """Warnings for this service's streams that could not be replayed (gateway/status
    lists them all)."""
    prefixes = tuple(f"{a}:" for a in aggregates)

    def warnings() -> list[str]:
        return [
            f"{stream} is quarantined: {why}"
            for stream, why in runtime.actors.quarantined().items()
            if stream.startswith(prefixes)
        ]

    return warnings


# The services of this process that do not listen yet: set by `cairn up` on the gateway's app
# and emptied as each service listens. While it holds a name, that app's /health is 503
# ``starting``: a health check that passed as soon as the gateway listened would send work to
# a VM service still building (seen: ok at 2.8 s, the VM service listening at 3.5 s).
STARTING: web.AppKey[set[str]] = web.AppKey("starting", set)


def starting(body: dict[str, Any], waiting: set[str]) -> dict[str, Any]:
    """``body`` as it reads while ``waiting`` services do not listen yet (a service that is
    down says so, and stays down)."""
    if not waiting or body["status"] == "down":
        return body
    names = ", ".join(sorted(waiting))
    return {**body, "status": "starting", "problems": [f"starting: {names} not listening yet"]}


def add_health(
    app: web.Application,
    name: str,
    runtime: Runtime,
    *,
    problems: Problems | None = None,
    warnings: Problems | None = None,
    details: Details | None = None,
    path: str = "/health",
) -> None:
    """Answer ``GET path`` with the service's report, and register the report for /status."""

    def current() -> dict[str, Any]:
        return report(name, runtime, problems, warnings, details)

    async def health(request: web.Request) -> web.Response:
        check = store_check(runtime)
        if check is not None:
            check.refresh()
        body = starting(current(), request.app.get(STARTING) or set())
        return web.json_response(body, status=200 if body["status"] in OK else 503)

    runtime.health[name] = current
    app.router.add_get(path, health)
