"""A run of a function, asked of the runner hosts' queue group over NATS: the request, and
its reply messages collected up to the final one (actors/functions/protocol.py). The HTTP
gateway runs functions through it, and so does a VM's safe change that checks itself with a
stored function."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncGenerator
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from actors.functions import protocol
from actors.functions.requests import FAILED_TO_RUN
from actors.functions.settings import FunctionsSettings
from events.bus import BUS_DOWN, deadline_headers
from events.permissions import RUN_REPLIES

ACCEPT_TIMEOUT_S = 5.0
# After "started": the run's own time-out, a TypeScript transpile, and slack for the bus.
START_SLACK_S = 40.0
QUEUE_FULL = "run queue is full"
NO_RUNNER = "no runner host is available"
HOST_SILENT = "the runner host stopped answering (it stopped, or lost its connection to NATS)"


class RunFailed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class RunClient:
    """Sends run requests and collects each run's reply messages through one wildcard inbox
    subscription (a subscription per run would cost a round trip each)."""

    def __init__(self, nc: Client, settings: FunctionsSettings) -> None:
        self.nc = nc
        self.settings = settings
        self.prefix = f"{RUN_REPLIES}.{secrets.token_hex(8)}"
        self._runs: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(f"{self.prefix}.*", cb=self._on_reply)

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    async def _on_reply(self, msg: Msg) -> None:
        queue = self._runs.get(msg.subject.rpartition(".")[2])
        if queue is None:
            return
        if msg.headers and msg.headers.get("Status") == "503":
            queue.put_nowait({"t": "no-responders"})
            return
        with contextlib.suppress(ValueError):
            queue.put_nowait(protocol.decode(msg.data))

    def _queued_wait(self) -> float:
        # A queued run waits for every run ahead of it in the worst case.
        rounds = self.settings.queue // self.settings.concurrency + 1
        return rounds * (self.settings.limits.timeout_s + START_SLACK_S)

    async def run(self, request: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """The run's messages up to and including the final one. Raises RunFailed when no
        runner takes it. Leaving early cancels the run on its host."""
        if not self.nc.is_connected:
            raise RunFailed(503, BUS_DOWN)
        run_id = secrets.token_hex(12)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._runs[run_id] = queue
        finished = False
        try:
            await self.nc.publish(
                protocol.RUN_SUBJECT,
                protocol.encode({**request, "id": run_id}),
                reply=f"{self.prefix}.{run_id}",
                headers=deadline_headers(ACCEPT_TIMEOUT_S),
            )
            loop = asyncio.get_running_loop()
            deadline = loop.time() + ACCEPT_TIMEOUT_S
            # Set by a host that sends `alive`: how long its silence may last.
            silence: float | None = None
            while True:
                wait = deadline - loop.time()
                if silence is not None:
                    wait = min(wait, silence)
                try:
                    message = await asyncio.wait_for(queue.get(), max(0.0, wait))
                except TimeoutError:
                    if loop.time() < deadline:
                        raise RunFailed(500, f"{FAILED_TO_RUN}{HOST_SILENT}") from None
                    raise RunFailed(500, f"{FAILED_TO_RUN}no answer from the runner") from None
                kind = message.get("t")
                if kind == protocol.ALIVE:
                    continue
                if kind == "no-responders":
                    raise RunFailed(503, NO_RUNNER)
                if kind == protocol.BUSY:
                    raise RunFailed(503, QUEUE_FULL)
                if kind == protocol.ACCEPTED:
                    deadline = loop.time() + self._queued_wait()
                    every = message.get("alive")
                    if isinstance(every, int | float) and every > 0:
                        silence = every * protocol.ALIVE_MISSES
                elif kind == protocol.STARTED:
                    deadline = loop.time() + self.settings.limits.timeout_s + START_SLACK_S
                finished = kind in protocol.FINAL
                yield message
                if finished:
                    return
        finally:
            del self._runs[run_id]
            if not finished:
                with contextlib.suppress(Exception):
                    await self.nc.publish(protocol.CANCEL_SUBJECT, protocol.encode({"id": run_id}))
