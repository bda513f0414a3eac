"""A runner host: takes run requests from NATS (a queue group, so hosts on several machines
share the load), keeps them in a bounded queue and runs them in sandboxes taken from a pool
kept started per runtime (each sandbox in fresh cgroups, used for one run, then removed).

Capacity is ``RUN_CONCURRENCY`` running plus ``RUN_QUEUE`` waiting; a request beyond it is
answered ``busy`` at once (the gateway turns that into 503), never queued behind minutes of
work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import attrs
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from actors.audit import parse_by
from actors.functions import cgroups, protocol
from actors.functions.languages import Language, parse_language
from actors.functions.results import RunFailure, RunResult
from actors.functions.runner import RunJob, Sandbox, Started, tool_runner
from actors.functions.runtimes import describe as describe_runtimes
from actors.functions.sandbox import LANGUAGE_OF_RUNTIME, RUNTIMES, runtime_of
from actors.functions.settings import FunctionsSettings
from actors.functions.transpile import TranspileError, Transpiler
from events.bus import answerable, expired, flush_all, serve_json, unsubscribe_all
from events.permissions import Role, reply_prefixes

log = logging.getLogger(__name__)
# A run is no stored event, so the runner host says what became of it (see actors/journal.py).
journal = logging.getLogger("cairn.journal")

# A log line longer than this goes out in pieces (a message must fit NATS's max_payload even
# when JSON escaping makes it six times longer).
LOG_PIECE = 16 * 1024
STOP_GRACE_S = 10.0
# The reply subjects a run or a runtimes query may name (events/permissions.py).
_REPLIES = reply_prefixes(Role.RUNNER)
PREPARE_DELAY_S = 0.01


@attrs.frozen
class _Job:
    id: str
    reply: str
    language: Language
    code: str
    input_json: str
    stream: bool
    # A stored version (its transpiled TypeScript is worth keeping on disk), not a /run-now body.
    stored: bool
    # What the journal calls the run: "<path> version <n>", or "/run-now".
    name: str = "/run-now"
    # Who asked (the audit trail, actors/audit.py): named in the run's journal line.
    by: str | None = None


def parse_job(data: bytes, reply: str) -> _Job | None:
    try:
        fields: Any = protocol.decode(data)
        language = parse_language(fields["language"])
        job = _Job(
            str(fields["id"]),
            reply,
            language,  # type: ignore[arg-type]
            fields["code"],
            fields.get("input") or "{}",
            bool(fields.get("stream")),
            bool(fields.get("stored")),
            str(fields.get("name") or "/run-now"),
            parse_by(fields.get("by")),
        )
    except (ValueError, KeyError, TypeError):  # BadBy is a ValueError
        return None
    if language is None or not isinstance(job.code, str) or not isinstance(job.input_json, str):
        return None
    return job


class RunnerHost:
    def __init__(self, nc: Client, settings: FunctionsSettings, data_dir: Path) -> None:
        self.nc = nc
        self.settings = settings
        self.sandbox = Sandbox(settings.limits, settings.user, settings.runtimes)
        # esbuild gets a sandbox and fresh groups of its own, with the limits of a run.
        self.transpiler = Transpiler(
            settings.esbuild,
            data_dir / "functions" / "ts-cache",
            tool_runner(self.sandbox, lambda: self.cgroups),
            settings.limits,
            max_bytes=settings.code_max_size,
        )
        self.capacity = settings.concurrency + settings.queue
        self.queue: asyncio.Queue[_Job] = asyncio.Queue()
        self.pending = 0
        self.taken = 0  # runs accepted so far (status and tests)
        self.idle = asyncio.Event()
        self.idle.set()
        self.cgroups: cgroups.Cgroups | None = None
        self._queued: set[str] = set()
        # Reply subjects of the runs this host holds (queued or running): each hears `alive`.
        self._held: dict[str, str] = {}
        self._cancelled: set[str] = set()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._workers: list[asyncio.Task[None]] = []
        self._warm_roots: set[int] = set()
        self._ready: dict[str, asyncio.Queue[Started]] = {r: asyncio.Queue() for r in RUNTIMES}
        # One token per sandbox that may exist at once (running or waiting).
        self._free: asyncio.Queue[None] = asyncio.Queue()
        self._slots: set[cgroups.CgroupSlot] = set()
        self._warming: set[asyncio.Task[None]] = set()
        self._spawning: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._subs: list[Subscription] = []

    async def start(self) -> None:
        # Slots: one per concurrent run, plus RUN_WARM per runtime kept started and waiting
        # (each sandbox, started or running, has a slot of its own).
        count = self.settings.concurrency + self.settings.warm * len(RUNTIMES)
        if self.settings.cgroups:
            made = await asyncio.to_thread(cgroups.create, self.settings.limits)
            self.cgroups = made if made.parents else None
            if not made.parents:
                log.warning("runner: no usable cgroups: %s", made.reason)
            log.info("runner: %s", cgroups.describe(made))
        else:
            log.info("runner: %s", cgroups.describe(None))
        for _ in range(count):
            self._free.put_nowait(None)
        for runtime in RUNTIMES:
            for _ in range(self.settings.warm):
                self._refill(runtime)
        self._workers = [
            asyncio.create_task(self._worker()) for _ in range(self.settings.concurrency)
        ]
        self._workers.append(asyncio.create_task(self._heartbeat(), name="runner-alive"))
        languages = await describe_runtimes(self.settings.runtimes, self.settings.esbuild)

        async def on_runtimes(_: Any) -> Any:
            return languages

        self._subs = [
            await self.nc.subscribe(
                protocol.RUN_SUBJECT, queue=protocol.RUNNERS_QUEUE, cb=self._on_run
            ),
            await self.nc.subscribe(protocol.CANCEL_SUBJECT, cb=self._on_cancel),
            await serve_json(
                self.nc,
                protocol.RUNTIMES_SUBJECT,
                on_runtimes,
                queue=protocol.RUNNERS_QUEUE,
                replies=_REPLIES,
            ),
        ]
        # Once start returns, the server has the subscriptions: a run sent from another
        # connection right away finds this host (it met "no runner host" before).
        await flush_all(self.nc)

    async def stop(self) -> None:
        """Take no more work, let what was accepted finish (bounded), then clean up."""
        if self._subs:
            with contextlib.suppress(Exception):
                await self._subs[0].unsubscribe()
            with contextlib.suppress(Exception):
                await flush_all(self.nc, timeout=2)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle.wait(), STOP_GRACE_S)
        await unsubscribe_all(self._subs[1:])
        self._subs = []
        self._stopping = True
        # A sandbox half-way through its spawn is let finish (cancelling asyncio there makes
        # it reap the child behind its own child watcher's back); it is discarded below.
        spawning = [task for task in self._warming if task in self._spawning]
        if spawning:
            await asyncio.wait(spawning, timeout=STOP_GRACE_S)
        tasks = [*self._workers, *self._running.values(), *self._warming]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._workers = []
        for ready in self._ready.values():
            while not ready.empty():
                started = ready.get_nowait()
                self._warm_roots.discard(started.proc.pid)
                await self.sandbox.discard(started)
        if self.cgroups is not None:
            for slot in list(self._slots):
                self.cgroups.retire(slot)
            self._slots.clear()
            await asyncio.to_thread(self.cgroups.remove)
            self.cgroups = None

    # -- NATS ------------------------------------------------------------------------------

    async def _on_run(self, msg: Msg) -> None:
        if not msg.reply or not answerable(msg, _REPLIES) or expired(msg):
            return
        job = parse_job(msg.data, msg.reply)
        if job is None:
            await self._send(msg.reply, {"t": protocol.ERROR, "message": "malformed run request"})
            return
        if job.id in self._held:
            # Each run's messages go to the reply subject it came with, and to nothing else: a
            # second request with the id of a run held here does not take its place.
            await self._send(msg.reply, {"t": protocol.ERROR, "message": "duplicate run id"})
            return
        if self.pending >= self.capacity:
            await self._send(msg.reply, {"t": protocol.BUSY})
            return
        self.pending += 1
        self.taken += 1
        self.idle.clear()
        self._queued.add(job.id)
        self._held[job.id] = job.reply
        self.queue.put_nowait(job)
        await self._send(msg.reply, {"t": protocol.ACCEPTED, "alive": protocol.ALIVE_EVERY_S})

    async def _heartbeat(self) -> None:
        alive = protocol.encode({"t": protocol.ALIVE})
        while True:
            await asyncio.sleep(protocol.ALIVE_EVERY_S)
            for reply in list(self._held.values()):
                with contextlib.suppress(Exception):
                    await self.nc.publish(reply, alive)

    async def _on_cancel(self, msg: Msg) -> None:
        with contextlib.suppress(ValueError, TypeError, KeyError):
            run_id = str(protocol.decode(msg.data)["id"])
            task = self._running.get(run_id)
            if task is not None:
                task.cancel()
            elif run_id in self._queued:
                self._cancelled.add(run_id)

    async def _send(self, reply: str, message: dict[str, Any]) -> None:
        data = protocol.encode(message)
        if len(data) > self.nc.max_payload:
            data = protocol.encode(
                {
                    "t": protocol.ERROR,
                    "message": f"result is larger than NATS allows ({self.nc.max_payload} bytes)",
                }
            )
        with contextlib.suppress(Exception):
            await self.nc.publish(reply, data)

    # -- work ------------------------------------------------------------------------------

    async def _worker(self) -> None:
        while True:
            job = await self.queue.get()
            self._queued.discard(job.id)
            try:
                if job.id in self._cancelled:
                    self._cancelled.discard(job.id)
                    continue
                runtime = runtime_of(job.language)
                started: Started | None = None
                if self.settings.warm:
                    started = await self._ready[runtime].get()
                    self._warm_roots.discard(started.proc.pid)
                    slot = started.slot
                    # Refill now, not when this run ends: with fewer waiting sandboxes than
                    # slots (RUN_WARM < RUN_CONCURRENCY, or a burst of one runtime) the next run
                    # then waits for a sandbox's start, never for another run's whole time.
                    self._refill(runtime)
                else:
                    await self._free.get()
                    slot = self._new_slot()
                task = asyncio.create_task(self._execute(job, started, slot))
                self._running[job.id] = task
                await asyncio.wait([task])
                self._running.pop(job.id, None)
                self._background(self._release(slot))
            finally:
                self._held.pop(job.id, None)
                self.pending -= 1
                if self.pending == 0:
                    self.idle.set()

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._warming.add(task)
        task.add_done_callback(self._warming.discard)

    def _new_slot(self) -> cgroups.CgroupSlot | None:
        slot = self.cgroups.new_slot() if self.cgroups is not None else None
        if slot is not None:
            self._slots.add(slot)
        return slot

    async def _release(self, slot: cgroups.CgroupSlot | None) -> None:
        """Sweep a used slot (the run is over; this only makes sure), remove its groups and
        free its place."""
        if slot is not None:
            await slot.empty()
            self._slots.discard(slot)
            if self.cgroups is not None:
                self.cgroups.retire(slot)
        self._free.put_nowait(None)

    def _refill(self, runtime: str) -> None:
        self._background(self._keep_filled(runtime))

    async def _keep_filled(self, runtime: str) -> None:
        # A refill that dies would leave its runtime's pool one short for good, and runs
        # waiting on an empty pool wait forever: log, and try again.
        delay = 0.05
        while True:
            try:
                await self._start_sandbox(runtime)
                return
            except Exception:
                log.exception("runner: starting a %s sandbox failed; retrying", runtime)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _start_sandbox(self, runtime: str) -> None:
        """Start a sandbox for ``runtime`` in fresh groups and add it to that runtime's pool."""
        await self._free.get()
        try:
            await self._spawn_into_pool(runtime)
        except BaseException:
            self._free.put_nowait(None)
            raise

    async def _spawn_into_pool(self, runtime: str) -> None:
        # Starting a process blocks the loop for a few ms (fork, pipes, a watcher thread):
        # let the run that just took a sandbox send it its code first.
        await asyncio.sleep(PREPARE_DELAY_S)
        retry = 0.05
        while True:
            if self._stopping:
                raise asyncio.CancelledError  # gives the place back (see _start_sandbox)
            slot = self._new_slot()
            task = asyncio.current_task()
            assert task is not None
            self._spawning.add(task)
            try:
                started = await self.sandbox.start(LANGUAGE_OF_RUNTIME[runtime], slot)
            except OSError:
                log.exception("runner: could not start a sandbox; retrying")
                if slot is not None:
                    self._slots.discard(slot)
                    if self.cgroups is not None:
                        self.cgroups.retire(slot)
                await asyncio.sleep(retry)  # a broken bwrap must not spin the loop
                retry = min(retry * 2, 5.0)
                continue
            finally:
                self._spawning.discard(task)
            self._warm_roots.add(started.proc.pid)
            self._ready[runtime].put_nowait(started)
            return

    @property
    def settled(self) -> bool:
        """No run in flight and every sandbox started and waiting (tests)."""
        return self.pending == 0 and not self._warming

    def leftovers(self) -> set[int]:
        """Processes in the slots' cgroups other than the waiting sandboxes: after a run has
        ended this must be empty."""
        if self.cgroups is None:
            return set()
        waiting: set[int] = set()
        for root in self._warm_roots:
            waiting |= cgroups.process_tree(root)
        members: set[int] = set()
        for slot in list(self._slots):
            members |= slot.members()
        return members - waiting

    async def _execute(
        self, job: _Job, started: Started | None, slot: cgroups.CgroupSlot | None
    ) -> None:
        outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        async def deliver() -> None:
            # One sender per run keeps log lines and the final message in order.
            while (message := await outbox.get()) is not None:
                await self._send(job.reply, message)

        def on_line(line: str) -> None:
            for start in range(0, max(len(line), 1), LOG_PIECE):
                outbox.put_nowait({"t": protocol.LOG, "data": line[start : start + LOG_PIECE]})

        sender = asyncio.create_task(deliver())
        outbox.put_nowait({"t": protocol.STARTED})
        began = time.monotonic()
        try:
            try:
                final = await self._final(job, started, slot, on_line if job.stream else None)
            except Exception:
                # The caller must get an answer, not wait for its time-out.
                log.exception("runner: run %s failed inside the runner", job.id)
                final = {"t": protocol.ERROR, "message": "the runner failed (see its log)"}
            outcome = "ok" if final["t"] == protocol.RESULT else f"failed: {final['message']}"
            journal.info(
                "function %s (%s): %s in %.0f ms%s",
                job.name,
                job.language,
                outcome,
                (time.monotonic() - began) * 1000,
                f", asked by {job.by}" if job.by else "",
                extra={"function": job.name, "ok": final["t"] == protocol.RESULT, "by": job.by},
            )
            outbox.put_nowait(final)
        finally:
            outbox.put_nowait(None)
            await asyncio.shield(sender)

    async def _final(
        self,
        job: _Job,
        started: Started | None,
        slot: cgroups.CgroupSlot | None,
        on_line: Any,
    ) -> dict[str, Any]:
        code = job.code
        if job.language is Language.TYPESCRIPT:
            try:
                code = await self.transpiler.transpile(code, keep=job.stored)
            except TranspileError as exc:
                if started is not None:
                    await self.sandbox.discard(started)
                return {"t": protocol.ERROR, "message": str(exc)}
        outcome = await self.sandbox.run(
            RunJob(job.language, code, job.input_json),
            slot=slot,
            on_line=on_line,
            started=started,
            empty_slot=False,  # _release sweeps it, after the answer has gone
        )
        if isinstance(outcome, RunResult):
            return {"t": protocol.RESULT, "data": outcome.data, "type": str(outcome.type)}
        assert isinstance(outcome, RunFailure)
        return {"t": protocol.ERROR, "message": outcome.message}
