"""One health shape for every service.

Each service answers ``GET /health`` (beside the spec's own liveness routes, which keep their
bodies) with the same JSON::

    {"service": "vm", "status": "ok", "problems": [], "warnings": [], "cluster": "simulated", ...}

``status`` is ``ok`` (200), ``degraded`` (200: it works, but part of it does not, such as one
VM whose stored stream is damaged) or ``down`` (503: it cannot do its work); ``problems`` and
``warnings`` say why, one sentence each, so a load balancer gets a status and an operator a
cause. What else a service reports about itself
(its cluster real or simulated, the search databases loaded ...) follows as more keys.
The process-wide problems (NATS unreachable, the event store refusing writes) are every
service's problems: none of them can work without both. ``/status`` on ``CAIRN_PORT`` gathers
the reports of every service in the process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from actors.platform import Runtime

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
    if runtime.actors.store_refusal is not None:
        found.append(f"event store: {runtime.actors.store_refusal}")
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

    async def health(_: web.Request) -> web.Response:
        body = current()
        return web.json_response(body, status=503 if body["status"] == "down" else 200)

    runtime.health[name] = current
    app.router.add_get(path, health)
